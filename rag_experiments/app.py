"""Hydra entry point of ``rag-exp run``: compose the config, build the parts, hand them to the
runner. This is the only module of the run path that imports Hydra."""

from __future__ import annotations

import inspect
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from rag_experiments.config.reporting import reported
from rag_experiments.config.resolvers import register_resolvers
from rag_experiments.config.schema import register_configs
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import (
    ConfigError,
    LLMError,
    PreflightError,
    RagExpError,
    TargetError,
)
from rag_experiments.lifecycle.shard import select_shard
from rag_experiments.llm.factory import (
    build_chat,
    configure_from_config,
    identity_by_role,
    usage_by_role,
)

log = logging.getLogger("rag_experiments")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"

SMALL_MODEL_NOTE = (
    "Answers and judgements come from the embedded SmolLM2-135M model: fine for plumbing and "
    "demos, not trustworthy for decisions. Use llm=ollama/openai (or judge=…) with a real model."
)


def target_class(node: Any) -> str:
    """The class name of a config node's ``_target_`` (``BaselineTarget``, ``EmbeddedChat``),
    ``""`` when it has none."""
    return str(OmegaConf.select(node, "_target_") or "").rsplit(".", 1)[-1]


def is_embedded_model(node: Any) -> bool:
    """True when chat-model config ``node`` is the in-process embedded model (whose scores
    come with :data:`SMALL_MODEL_NOTE`)."""
    return "EmbeddedChat" in target_class(node)


def _register() -> None:
    register_configs()
    register_resolvers()  # ${unique_dir:…} of hydra.run.dir / hydra.sweep.dir
    if not OmegaConf.has_resolver("rx.root"):
        OmegaConf.register_new_resolver("rx.root", lambda: str(PROJECT_ROOT))


_register()


@dataclass
class Experiment:
    """The built parts of one job (the tracker is made apart: the run opens before building).

    ``checks`` maps each role to the part :func:`preflight` checks: the baseline's
    ``generator`` and ``embedder``, another ``target`` itself (its ``health_url``), the
    ``judge`` and the metrics' ``embedder`` when metrics use them.
    """

    dataset: EvalDataset
    target: Any
    metrics: list[Any]
    generate: bool
    checks: dict[str, Any] = field(default_factory=dict)


def preflight(checks: dict[str, Any]) -> None:
    """Check every model and service of a job once, before any question is answered and
    before any index is built: each part's ``check()`` (reachable, model present, context
    window known), in the order given; the same object under two roles is checked once.

    A refused connection fails at once and a silent server within
    :data:`~rag_experiments.llm.transport.CHECK_TIMEOUT_S`, so the time to the error does not
    depend on the number of questions.

    Args:
        checks: Role (``generator``, ``embedder``, ``judge``, ``target``) → part.

    Raises:
        PreflightError: A part cannot be used; the message names the role, the part and the
            fix.
    """
    seen: set[int] = set()
    for role, part in checks.items():
        if id(part) in seen:
            continue
        seen.add(id(part))
        started = time.perf_counter()
        try:
            part.check()
        except RagExpError as exc:
            reason = exc.reason if isinstance(exc, (LLMError, TargetError)) else "config"
            raise PreflightError(
                role, reason, f"preflight: the {role} cannot be used, so nothing was run: {exc}"
            ) from exc
        log.info("preflight: %s ready (%.2f s)", role, time.perf_counter() - started)


def build(cfg: DictConfig) -> Experiment:
    """Instantiate every part but the tracker from a composed config and load the dataset.

    Our own errors raised inside a constructor reach the caller as they are, not wrapped in
    Hydra's ``InstantiationException`` (whose first line does not say what failed).

    Args:
        cfg: The composed root config.

    Returns:
        The built :class:`Experiment`.

    Raises:
        RagExpError: A part refused its config (e.g. ``ConfigError`` for ``retriever.top_k=0``)
            or the dataset could not be loaded.
    """
    configure_from_config(cfg)  # LLM response cache + fresh per-role usage meters
    try:
        shared = _SharedParts(cfg)
        metrics = [_build_metric(node, shared) for node in cfg.metrics.suite.values()]
        generate = bool(cfg.metrics.generate)
        dataset = load_dataset(cfg)
        checks: dict[str, Any] = {}
        if target_class(cfg.target) == "BaselineTarget":
            target = _build_baseline(cfg, metrics, generate, shared)
        else:
            target = instantiate(cfg.target)
            checks["target"] = target
    except InstantiationException as e:
        if isinstance(e.__cause__, RagExpError):
            raise e.__cause__ from None
        raise
    return Experiment(dataset, target, metrics, generate, {**shared.built, **checks})


def load_dataset(cfg: DictConfig) -> Any:
    """The dataset a job evaluates: ``cfg.dataset`` loaded, then the seeded ``max_samples``
    subset when one is set, then shard ``shard.index`` of ``shard.count``
    (:mod:`rag_experiments.lifecycle.shard`); its digest is the one the run logs.

    Raises:
        RagExpError: The dataset cannot be loaded.
        InstantiationException: ``cfg.dataset`` does not instantiate.
    """
    dataset = instantiate(cfg.dataset).load()
    if cfg.get("max_samples") is not None:
        dataset = dataset.subset(int(cfg.max_samples), seed=int(cfg.seed))
    return select_shard(dataset, **cfg.get("shard", {}))  # no shard key or count 1: all


class _SharedParts:
    """Parts built at most once per job and shared: the judge (for every metric that takes
    ``judge``) and the embedder (the baseline's, also handed to metrics that take
    ``embedder``)."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self._judge: Any = None
        self._embedder: Any = None
        self.built: dict[str, Any] = {}
        """Role → model built so far (``generator``, ``embedder``, ``judge``), in build order."""

    def judge(self) -> Any:
        from rag_experiments.metrics.judge_config import check_judge_distinct, judge_model_node

        if self._judge is None:
            baseline = target_class(self.cfg.target) == "BaselineTarget"
            if self.cfg.metrics.generate and baseline:  # the generator is cfg.llm
                check_judge_distinct(self.cfg.llm, self.cfg.judge)
            self._judge = self.built["judge"] = build_chat(
                judge_model_node(self.cfg.judge), "judge"
            )
        return self._judge

    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = self.built["embedder"] = build_embedder(self.cfg)
        return self._embedder


def build_embedder(cfg: DictConfig) -> Any:
    """The configured embedder (``cfg.embedder``), behind the shared embedding cache
    (``paths.embedding_cache``) when one is set."""
    embedder = instantiate(cfg.embedder)
    if cfg.paths.embedding_cache:
        from rag_experiments.embedding.cache import CachedEmbedder

        embedder = CachedEmbedder(embedder, path=cfg.paths.embedding_cache)
    return embedder


def _build_metric(node: DictConfig, shared: _SharedParts) -> Any:
    """Instantiate one ``metrics.suite`` entry, passing ``judge=`` / ``embedder=`` when its
    class's ``__init__`` takes them."""
    params = inspect.signature(get_class(node._target_).__init__).parameters
    extra = {}
    if "judge" in params:
        extra["judge"] = shared.judge()
    if "embedder" in params:
        extra["embedder"] = shared.embedder()
    return instantiate(node, **extra)


def _build_baseline(
    cfg: DictConfig, metrics: list[Any], generate: bool, shared: _SharedParts | None = None
) -> Any:
    from rag_experiments.index.chroma import ChromaIndex

    shared = shared or _SharedParts(cfg)
    embedder = shared.embedder()
    depth = max([m.depth for m in metrics if hasattr(m, "depth")], default=0)
    retriever_cfg = OmegaConf.to_container(cfg.retriever, resolve=True)
    if retriever_cfg.get("depth") is None:
        retriever_cfg["depth"] = max(depth, int(retriever_cfg["top_k"]))
    retriever = instantiate(retriever_cfg)
    generator = build_chat(cfg.llm, "generator") if generate else None
    if generator is not None:
        shared.built["generator"] = generator
    target_cfg = OmegaConf.to_container(cfg.target, resolve=True)
    hnsw = target_cfg.pop("hnsw", {})
    return instantiate(
        target_cfg,
        chunker=instantiate(cfg.chunker),
        embedder=embedder,
        retriever=retriever,
        index=ChromaIndex(path=cfg.paths.chroma_dir, **hnsw),
        generator=generator,
        generate=generate,
    )


def log_dropped(dataset: EvalDataset, tracker: Any) -> None:
    """Say which source rows the loader left out: a console warning, metric ``n_dropped``
    (0 when none) and ``n_dropped.<reason>``, tag ``dataset.dropped`` (the one-line summary)
    and artifact ``dropped_rows.json`` (every id with its reason)."""
    counts = dataset.dropped_counts()
    tracker.log_metrics(
        {
            "n_dropped": float(len(dataset.dropped)),
            **{f"n_dropped.{reason}": float(n) for reason, n in counts.items()},
        }
    )
    if dataset.dropped:
        summary = dataset.dropped_summary()
        log.warning("dataset: %s (every id in dropped_rows.json)", summary)
        tracker.set_tags({"dataset.dropped": summary})
        tracker.log_dict(dataset.dropped_rows(), "dropped_rows.json")


def _default_run_name(cfg: DictConfig, dataset_name: str) -> str:
    return f"{dataset_name}-{cfg.chunker._target_.rsplit('.', 1)[-1]}-{cfg.metrics.name}"


def run_job(cfg: DictConfig, extra_tags: dict[str, str] | None = None) -> float | None:
    """Open the job's MLflow run, build the parts and evaluate inside it.

    The run opens before anything is built, so an error anywhere in the job (a config a
    component refuses, a missing dataset, an index build failure) ends as a FAILED run with tag
    ``error`` and ``error.txt``, nested under the sweep's parent run in a multirun.

    Every job checkpoints its answers in its Hydra job directory; ``resume=<run_id or dir>``
    reopens an interrupted run and answers only what is missing
    (:mod:`rag_experiments.lifecycle.resume`).

    Args:
        cfg: The composed root config.
        extra_tags: More run tags (``rag-exp rerun`` sets ``rerun_of``).

    Returns:
        The run's objective (``objective``: a metric or a weighted sum, see
        :mod:`rag_experiments.lifecycle.objective`); a :class:`NaNObjective` saying why when
        it cannot be computed (also tagged ``objective.error`` on the run); None without one.

    Raises:
        RagExpError: Any job error, after it was recorded on the run.
    """
    from rag_experiments.lifecycle.objective import NaNObjective, nan_reason, objective_value
    from rag_experiments.lifecycle.resume import job_checkpoint
    from rag_experiments.qualify.registry import apply_qualification
    from rag_experiments.runner import evaluate_in_run
    from rag_experiments.tracking.sweep import parent_run_id_for_job

    params = OmegaConf.to_container(cfg, resolve=True)
    params.pop("resume", None)  # a resumed run must log the params it started with
    tags = {"metrics.backend": str(cfg.metrics.name), **(extra_tags or {})}
    uses_embedded = bool(cfg.metrics.generate) and any(
        is_embedded_model(node) for node in (cfg.llm, cfg.judge)
    )
    if uses_embedded:
        tags["mlflow.note.content"] = SMALL_MODEL_NOTE
    # Until the dataset is loaded, a dataset config without `name` is called "dataset".
    provisional = _default_run_name(cfg, str(cfg.dataset.get("name") or "dataset"))
    tracker = instantiate(cfg.tracking, run_name=cfg.run_name or provisional)
    job = job_checkpoint(cfg, tracker.uri)
    with tracker.start_run(
        params=params,
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        tags=tags,
        parent_run_id=parent_run_id_for_job(),
        run_id=job.resume_run_id,
    ):
        job.attach(tracker)
        exp = build(cfg)
        log_dropped(exp.dataset, tracker)
        apply_qualification(cfg, tracker, identity_by_role(), tags.get("mlflow.note.content"))
        preflight(exp.checks)
        if not cfg.run_name:  # the default name holds the loaded dataset's name
            tracker.set_tags({"mlflow.runName": _default_run_name(cfg, exp.dataset.name)})
        try:
            result = evaluate_in_run(
                exp.dataset,
                job.wrap(exp.target, exp.dataset.digest),
                exp.metrics,
                tracker,
                max_failure_rate=float(cfg.max_failure_rate),
                progress=bool(cfg.progress),
                max_concurrency=cfg.get("max_concurrency"),
                seed=int(cfg.seed),
            )
        finally:  # LLM usage per role and model identity, also when the run fails
            tracker.set_tags(identity_by_role())
            tracker.log_metrics(usage_by_role())
        summary = result.metrics()
        objective = objective_value(cfg.get("objective"), summary)
        if objective is not None and math.isnan(objective):  # a failed trial, with its reason
            objective = NaNObjective(nan_reason(str(cfg.objective), result.values))
            log.warning("%s; a sweeper records this trial as failed", objective.reason)
            tracker.set_tags({"objective.error": objective.reason})
    print(f"\n{tracker.describe_location()}")
    for spec in result.specs:
        if spec.name in summary:
            n = int(summary.get(f"{spec.name}_n_valid", 0))
            ci = f"[{summary[f'{spec.name}_ci_low']:.3f}, {summary[f'{spec.name}_ci_high']:.3f}]"
            print(f"  {spec.name:<30} {summary[spec.name]:.4f} {ci:<16} (n={n})")
    print(
        f"  samples {int(result.counts['n_samples'])}, failed {int(result.counts['n_failed'])}, "
        f"{result.counts['duration_s']:.1f} s"
    )
    judge_errors = {
        k.removeprefix("judge.errors."): int(v)
        for k, v in summary.items()
        if k.startswith("judge.errors.")
    }
    if judge_errors:
        print(
            "  judge errors (NaN cells): "
            + ", ".join(f"{reason} {n}" for reason, n in sorted(judge_errors.items()))
        )
    if exp.dataset.dropped:
        print(f"  dropped {exp.dataset.dropped_summary()} (dropped_rows.json)")
    if "judge_calls_per_question" in summary:
        tokens = summary["judge_prompt_tokens"] + summary["judge_completion_tokens"]
        print(
            f"  judge calls per question {summary['judge_calls_per_question']:.2f} "
            f"(max {int(summary['judge_calls_per_question_max'])}), judge tokens {int(tokens)}"
        )
    if uses_embedded:
        print(f"  NOTE: {SMALL_MODEL_NOTE}")
    return objective


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def hydra_main(cfg: DictConfig) -> float | None:
    """``rag-exp run [overrides…]``. Our own errors leave as one line, exit code 1
    (:mod:`rag_experiments.config.reporting`)."""
    with reported():
        if not cfg.dataset:
            raise ConfigError("no dataset selected: pass dataset=<name>")
        return run_job(cfg)
