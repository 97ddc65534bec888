"""The engine of one evaluation job, below every command: open the job's MLflow run, build the
parts (:mod:`rag_experiments.build`), check them (:func:`preflight`), record the rows the loader
left out (:func:`log_dropped`) and hand everything to the runner.

``rag-exp run`` (:mod:`rag_experiments.app`, the Hydra entry), ``rag-exp rerun`` and
``rag-exp merge`` (:mod:`rag_experiments.commands`) call it with a composed config (an
OmegaConf node: it never composes one); it imports nothing above it.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rag_experiments.build import (
    build,
    build_tracker,
    chat_class,
    qualify_settings,
    run_caveat,
    used_chat_roles,
)
from rag_experiments.console import summary_table
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import (
    ConfigError,
    GateFailed,
    LLMError,
    PreflightError,
    RagExpError,
    TargetError,
    UsageError,
)
from rag_experiments.metrics.calibration import summary_lines as calibration_lines
from rag_experiments.tracking.record import ARTIFACTS, JUDGE_ERRORS_PREFIX, TAGS

log = logging.getLogger("rag_experiments")


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


def log_dropped(dataset: EvalDataset, tracker: Any) -> None:
    """Say which source rows the loader left out: a console warning, tag ``dataset.dropped``
    (the one-line summary) and artifact ``dropped_rows.json`` (every id with its reason). The
    counts are metrics logged after the run's key metrics (:func:`dropped_metrics`): MLflow's
    run page lists metrics in the order they were first logged."""
    if dataset.dropped:
        summary = dataset.dropped_summary()
        log.warning("dataset: %s (every id in dropped_rows.json)", summary)
        tracker.set_tags({TAGS.dataset_dropped: summary})
        tracker.log_dict(dataset.dropped_rows(), ARTIFACTS.dropped_rows)


def dropped_metrics(dataset: EvalDataset) -> dict[str, float]:
    """Metric ``n_dropped`` (0 when none) and ``n_dropped.<reason>`` of the rows the loader
    left out."""
    counts = dataset.dropped_counts()
    return {
        "n_dropped": float(len(dataset.dropped)),
        **{f"n_dropped.{reason}": float(n) for reason, n in counts.items()},
    }


def _default_run_name(cfg: DictConfig, dataset_name: str) -> str:
    """``<dataset>-<chunker option>-<metrics>``, then the retriever and reranker when they are
    not the default dense retriever and none (:func:`~rag_experiments.config.resolvers.
    retrieval_suffix`): ``sample-semantic-retrieval-bm25``. The chunker is named as the user
    chose it (:func:`_chunker_choice`), as a sweep's child names are."""
    from rag_experiments.config.resolvers import retrieval_suffix

    suffix = retrieval_suffix(cfg.get("retriever"), cfg.get("reranker"))
    return f"{dataset_name}-{_chunker_choice(cfg)}-{cfg.metrics.name}{suffix}"


def _chunker_choice(cfg: DictConfig) -> str:
    """The chunker as chosen: Hydra's choice of group ``chunker`` (``chunker=semantic`` →
    ``semantic``) in a Hydra job; else the bundled option that builds its ``_target_``
    (:func:`~rag_experiments.config.choices.option_of`); else the class name (a user's own)."""
    from hydra.core.hydra_config import HydraConfig

    from rag_experiments.config.choices import option_of

    if HydraConfig.initialized():
        chosen = HydraConfig.get().runtime.choices.get("chunker")
        if chosen:
            return str(chosen)
    target = str(cfg.chunker._target_)
    return option_of("chunker", target) or target.rsplit(".", 1)[-1]


def _hydra_job_dir() -> str | None:
    """The Hydra job's output folder (where the job checkpoints), None outside a Hydra job (no
    Hydra config, or one composed without a job: its ``runtime.output_dir`` is missing)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    runtime = HydraConfig.get().runtime
    return None if OmegaConf.is_missing(runtime, "output_dir") else str(runtime.output_dir)


GATE_IN_SWEEP = (
    "gate= gates one run, and a sweep's jobs cannot each set the exit code: drop gate= from "
    "the sweep and gate the child run you choose with `rag-exp gate <run id> --baseline …`"
)
"""Why a sweep with ``gate=`` is refused: before it starts
(:func:`rag_experiments.app.refuse_gated_sweep`), or by its job (:func:`gate_settings`) when
the gate came from elsewhere (a preset)."""


def gate_settings(cfg: DictConfig, in_sweep: bool) -> Any:
    """The end-of-run gate's settings (``gate=``), checked before any work, or None.

    Raises:
        UsageError: A gate in a sweep's job (gate its runs with ``rag-exp gate``).
        ConfigError: Bad rules (:func:`~rag_experiments.analysis.gate.parse_settings`).
    """
    gate = cfg.get("gate")
    if not gate:
        return None
    if in_sweep:  # `rag-exp run -m … gate=…` is refused before it starts (app.refuse_gated_sweep)
        raise UsageError(GATE_IN_SWEEP)
    # imported only for a gate: it imports scipy.stats and pandas (~2 CPU s of start-up)
    from rag_experiments.analysis.gate import parse_settings

    settings = parse_settings(OmegaConf.to_container(gate, resolve=True), "gate")
    if settings.needs_baseline and not gate.get("baseline"):
        raise ConfigError(
            "gate: the rules have max_drop but gate.baseline is not set: pass "
            "gate.baseline=<run id | alias> (rag-exp promote <run id> --alias production)"
        )
    return settings


def check_gate(cfg: DictConfig, settings: Any, metrics: list[Any], tracking_uri: str) -> None:
    """Refuse, before the run opens, a ``gate=`` whose rules name a metric the run does not
    compute or whose ``gate.baseline`` is neither an alias nor a run of the store.

    Raises:
        ConfigError: An unknown metric (with the closest name) or baseline.
    """
    from rag_experiments.analysis.gate import check_baseline, check_rule_metrics
    from rag_experiments.tracking.store import quiet_downloads

    check_rule_metrics(settings, [s for m in metrics for s in m.specs()])
    baseline = cfg.gate.get("baseline")
    if baseline:
        with quiet_downloads():
            check_baseline(tracking_uri, str(cfg.tracking.experiment), str(baseline))


def run_job(cfg: DictConfig, extra_tags: dict[str, str] | None = None) -> float | None:
    """Open the job's MLflow run, build the parts and evaluate inside it.

    Outside a sweep the parts are built (config values checked, dataset loaded) before the
    run opens, so a refused command leaves no MLflow run; a sweep's job opens its run first
    (a refused job is a FAILED child of the sweep's parent). Any later error (a dead model
    at preflight, an index build failure, too many failed questions) ends as a FAILED run with
    tag ``error`` and ``error.txt``. A resumed run that finishes drops its earlier attempt's
    ``error`` tag and ``error.txt`` (tag ``resumed_after_error`` keeps the old error).

    Every job checkpoints its answers in its Hydra job directory; ``resume=<run_id or dir>``
    reopens an interrupted run and answers only what is missing
    (:mod:`rag_experiments.lifecycle.resume`).

    Args:
        cfg: The composed root config.
        extra_tags: More run tags (``rag-exp rerun`` sets ``rerun_of``).

    With ``gate=`` (:class:`~rag_experiments.config.schema.GateConf`) the run, once logged, is
    gated against ``gate.baseline`` (:func:`~rag_experiments.analysis.gate.run_gate`: one line
    per rule, the result logged on the run); a failed or undecided gate raises
    :class:`~rag_experiments.errors.GateFailed`, whose exit code (1 or 2) ``rag-exp run`` exits
    with.

    Returns:
        The run's objective (``objective``: a metric or a weighted sum, see
        :mod:`rag_experiments.lifecycle.objective`); a :class:`NaNObjective` saying why when
        it cannot be computed (also tagged ``objective.error`` on the run); None without one.

    Raises:
        GateFailed: The end-of-run gate failed a rule or could not decide.
        RagExpError: Any job error, after it was recorded on the run.
    """
    from rag_experiments.lifecycle.objective import NaNObjective, nan_reason, objective_value
    from rag_experiments.lifecycle.resume import job_checkpoint
    from rag_experiments.lifecycle.sweep_callback import child_run_name, parent_run_id_for_job
    from rag_experiments.qualify.registry import apply_qualification
    from rag_experiments.runner import evaluate_in_run

    params = OmegaConf.to_container(cfg, resolve=True)
    params.pop("resume", None)  # a resumed run must log the params it started with
    tags = {TAGS.metrics_backend: str(cfg.metrics.name), **(extra_tags or {})}
    caveat = run_caveat(used_chat_roles(cfg))
    if caveat:
        tags[TAGS.note] = caveat
    # A sweep's child is named after its swept values; otherwise, until the dataset is
    # loaded, a dataset config without `name` is called "dataset".
    swept_name = None if cfg.run_name else child_run_name(str(cfg.tracking.uri))
    provisional = swept_name or _default_run_name(cfg, str(cfg.dataset.get("name") or "dataset"))
    tracker = build_tracker(cfg, run_name=cfg.run_name or provisional)
    job = job_checkpoint(cfg.get("resume"), tracker.uri, _hydra_job_dir())
    parent_run_id = parent_run_id_for_job()
    gate = gate_settings(cfg, in_sweep=parent_run_id is not None)
    # A refused command (a config value a part refuses, a missing dataset) leaves no run:
    # outside a sweep the parts are built before the run opens. A sweep's job opens its run
    # first, so the sweep's record shows the refused job as a FAILED child.
    exp = build(cfg) if parent_run_id is None else None
    if gate is not None and exp is not None:  # a gate is refused in a sweep's job above
        check_gate(cfg, gate, exp.metrics, tracker.uri)
    # A refused resume (other config or dataset) leaves the run as it was: checked before the
    # run is reopened, since a failure inside it would end the run FAILED.
    job.refuse_mismatch(params, exp.dataset.digest if exp is not None else None)
    with tracker.start_run(
        params=params,
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        tags=tags,
        parent_run_id=parent_run_id,
        run_id=job.resume_run_id,
    ):
        job.attach(tracker)
        exp = exp or build(cfg)
        log_dropped(exp.dataset, tracker)
        tracker.set_tags({TAGS.dataset_questions_digest: exp.dataset.questions_digest})
        apply_qualification(
            qualify_settings(cfg),
            tracker,
            exp.session.identity_by_role(),
            tags.get(TAGS.note),
            scripted=cfg.get("judge") is not None and chat_class(cfg.judge).scripted,
        )
        checks = exp.checks
        if "target" in checks and job.answers_all(s.id for s in exp.dataset.samples):
            log.info("resume: every answer is in the checkpoint; the target is not checked")
            checks = {role: part for role, part in checks.items() if role != "target"}
        preflight(checks)
        if not (cfg.run_name or swept_name):  # the default name holds the dataset's name
            tracker.set_tags({"mlflow.runName": _default_run_name(cfg, exp.dataset.name)})
        # Everything built so far (imported modules, the config, the parts, the dataset) lives
        # for the whole run: frozen, the collector stops re-scanning it in every full
        # collection while the run allocates its rows; unfrozen when the run ends. The
        # collector runs from here on (`rag-exp run` turns it off for the start-up).
        gc.freeze()
        gc.enable()
        try:
            result = evaluate_in_run(
                exp.dataset,
                job.wrap(exp.target, exp.dataset.digest, exp.session),
                exp.metrics,
                tracker,
                max_failure_rate=float(cfg.max_failure_rate),
                progress=bool(cfg.progress),
                max_concurrency=cfg.get("max_concurrency"),
                seed=int(cfg.seed),
                judge_repeats=exp.judge_repeats,
                calibration=exp.calibration,
            )
        finally:  # LLM usage per role and model identity, also when the run fails
            gc.unfreeze()
            tracker.set_tags(exp.session.identity_by_role())
            tracker.log_metrics({**dropped_metrics(exp.dataset), **exp.session.usage_by_role()})
        summary = result.metrics()
        objective = objective_value(cfg.get("objective"), summary)
        if objective is not None and math.isnan(objective):  # a failed trial, with its reason
            objective = NaNObjective(nan_reason(str(cfg.objective), result.values))
            log.warning("%s; a sweeper records this trial as failed", objective.reason)
            tracker.set_tags({TAGS.objective_error: objective.reason})
        job.finish(tracker)  # a resumed run that got here is no longer a failure
    print(f"\n{tracker.describe_location()}")
    table = summary_table(
        result.specs, result.aggregates, values=result.values, run_metrics=summary
    )
    print("\n".join(table))
    print(
        f"  samples {int(result.counts['n_samples'])}, failed {int(result.counts['n_failed'])}, "
        f"{result.counts['duration_s']:.1f} s"
    )
    judge_errors = {
        k.removeprefix(JUDGE_ERRORS_PREFIX): int(v)
        for k, v in summary.items()
        if k.startswith(JUDGE_ERRORS_PREFIX)
    }
    if judge_errors:
        print(
            "  judge errors (NaN cells): "
            + ", ".join(f"{reason} {n}" for reason, n in sorted(judge_errors.items()))
        )
    if exp.dataset.dropped:
        print(f"  dropped {exp.dataset.dropped_summary()} (dropped_rows.json)")
    usage = exp.session.usage_by_role()
    if "judge_calls_per_question" in summary:
        tokens = summary["judge_prompt_tokens"] + summary["judge_completion_tokens"]
        thinking = int(usage.get("judge.reasoning_tokens", 0))
        print(
            f"  judge calls per question {summary['judge_calls_per_question']:.2f} "
            f"(max {int(summary['judge_calls_per_question_max'])}), judge tokens {int(tokens)}"
            + (f" (reasoning {thinking})" if thinking else "")
        )
    if usage.get("generator.reasoning_tokens"):
        print(
            f"  generator tokens {int(usage['generator.completion_tokens'])} completion "
            f"(reasoning {int(usage['generator.reasoning_tokens'])})"
        )
    for line in calibration_lines(summary):
        print(line)
    if caveat:
        print(f"  NOTE: {caveat}")
    if gate is not None:
        from rag_experiments.analysis.gate import run_gate
        from rag_experiments.tracking.store import quiet_downloads

        print()
        with quiet_downloads():  # the baseline's tables: no MLflow progress bar per file
            verdict = run_gate(
                tracker.uri,
                tracker.run_id,
                cfg.gate.get("baseline"),
                gate,
                junit=cfg.gate.get("junit"),
                markdown=cfg.gate.get("markdown"),
                retry_s=float(cfg.tracking.get("retry_s", 120.0)),
            )
        if verdict.exit_code:
            raise GateFailed(verdict.summary(), verdict.exit_code)
    return objective
