"""The composition root: every "config node → object" decision of the harness is made here.

Every command that builds parts from a composed config goes through this module: ``rag-exp
run`` (:mod:`rag_experiments.app`), ``serve``, ``generate``, ``review`` (its model check and
form), ``rerun``, ``judge-check`` and ``dataset report``. The runner receives what is built
here and never imports Hydra.

Decisions follow what each part *declares* on its protocol (:mod:`rag_experiments.protocols`,
:class:`rag_experiments.llm.base.ChatModel`), never class names, constructor signatures or
probing:

- a metric gets the shared parts named in its class's ``requires`` (``judge``, ``embedder``);
  the retriever returns ``max(top_k, deepest metric depth, reranker.candidates)`` ranks, or
  ``max(retriever.depth, reranker.candidates)`` when ``retriever.depth`` is set;
- a retriever (:class:`~rag_experiments.retrieval.base.RetrieverBase`) that declares
  ``uses_vectors`` (dense, hybrid) gets the job's embedder and the vector index; BM25 gets
  neither; a reranker (``cfg.reranker``, :class:`~rag_experiments.retrieval.base.RerankerBase`,
  null = none) is handed to the baseline and checked by the preflight (role ``reranker``);
- a target whose class declares ``assembled`` (the baseline) is built from the config's
  chunker, embedder, retriever, index and generator; any other from its own node;
- a chat-model class declares its ``caveat`` (the note of a run that uses it), the keys the
  review form sets (``form_fields``), whether it is ``scripted``, and
  ``check_settings()`` for values a user must fill in.

Declarations on a class are read from the class named by a node's ``_target_`` (before
anything is built: the run opens first, the review form composes first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from rag_experiments.common.http import nest_retry
from rag_experiments.config.keys import check_keys
from rag_experiments.data.base import EvalDataset
from rag_experiments.data.shard import select_shard
from rag_experiments.errors import ConfigError, RagExpError
from rag_experiments.llm.base import ChatModelBase
from rag_experiments.llm.factory import CacheSettings, ModelSession
from rag_experiments.llm.factory import model_arguments as call_arguments
from rag_experiments.llm.roles import check_judge_distinct, judge_model_node
from rag_experiments.metrics.calibration import CalibrationLabels, load_labels
from rag_experiments.metrics.repeats import JudgeRepeats
from rag_experiments.protocols import MetricBase, TargetBase
from rag_experiments.retrieval.base import RerankerBase, RetrieverBase

if TYPE_CHECKING:
    from rag_experiments.qualify.registry import QualifySettings

T = TypeVar("T")

SHARED_PARTS = ("judge", "embedder", "verifier")
"""What a metric may declare in ``requires``: the job's judge model, its embedder and its
verifier (``cfg.verifier``, :func:`build_verifier`)."""


# --- declarations read from a config node ---------------------------------------------------
def part_class(node: Any, base: type[T]) -> type[T]:
    """The class a config node's ``_target_`` names, which declares its capabilities by
    subclassing ``base`` (:class:`~rag_experiments.protocols.MetricBase`,
    :class:`~rag_experiments.protocols.TargetBase`,
    :class:`~rag_experiments.llm.base.ChatModelBase`).

    Raises:
        ConfigError: The node has no ``_target_``, it names no importable class, or the class
            does not subclass ``base``.
    """
    target = node.get("_target_") if isinstance(node, Mapping) else None
    if not target:
        raise ConfigError(f"a config node has no _target_ (got {node!r}); name a class")
    try:
        cls = get_class(str(target))
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"_target_={target} is not an importable class: {exc}") from exc
    if not issubclass(cls, base):
        raise ConfigError(
            f"_target_={target} does not declare what a {base.__name__.removesuffix('Base')} "
            f"declares: subclass {base.__module__}.{base.__name__}"
        )
    return cls


def chat_class(node: Any) -> type[ChatModelBase]:
    """The chat-model class of config node ``node`` (``cfg.llm``, ``cfg.judge``)."""
    return part_class(node, ChatModelBase)


def is_assembled(target_node: Any) -> bool:
    """True when the target is built from the config's parts (its class declares
    ``assembled``: the baseline)."""
    return part_class(target_node, TargetBase).assembled


ROLE_PRODUCTS: dict[str, tuple[str, str]] = {
    "generator": ("answers", "llm"),
    "judge": ("judgements", "judge"),
    "dataset_generator": ("questions", "llm"),
}
"""Chat-model role → (what its model produces, the config group that picks it)."""


def run_caveat(roles: Mapping[str, Any]) -> str:
    """The notes the chat-model classes of ``roles`` declare (``caveat``; the embedded model's
    :data:`~rag_experiments.llm.embedded.SMALL_MODEL_NOTE`), each naming exactly what its model
    produced in this run and the overrides that replace it.

    Args:
        roles: Role (a key of :data:`ROLE_PRODUCTS`) → config node of the chat model that
            plays it in this run; a role the run does not use must be left out (see
            :func:`used_chat_roles`).

    Returns:
        ``"Answers and judgements come from the embedded SmolLM2-135M model: … Use
        llm=ollama/openai and judge=ollama/openai with a real model."``; ``""`` when no class
        declares a caveat.
    """
    groups: dict[str, list[str]] = {}
    for role, node in roles.items():
        note = chat_class(node).caveat
        if note:
            groups.setdefault(note, []).append(role)
    out = []
    for note, used in groups.items():
        what = " and ".join(ROLE_PRODUCTS[r][0] for r in used).capitalize()
        fix = " and ".join(dict.fromkeys(f"{ROLE_PRODUCTS[r][1]}=ollama/openai" for r in used))
        out.append(note.format(what=what, fix=fix))
    return " ".join(out)


def used_chat_roles(cfg: DictConfig) -> dict[str, Any]:
    """The chat models a ``rag-exp run`` job calls, by role: ``generator`` (``cfg.llm``) when
    the target is the assembled baseline and answers are generated; ``judge`` (``cfg.judge``)
    when a metric of ``metrics.suite`` declares it ``requires`` one. An HTTP or recorded target
    never calls ``cfg.llm``; retrieval metrics never call the judge.

    Raises:
        ConfigError: A node names no class of the right kind.
    """
    roles: dict[str, Any] = {}
    if cfg.metrics.generate and is_assembled(cfg.target):
        roles["generator"] = cfg.llm
    if any("judge" in part_class(n, MetricBase).requires for n in cfg.metrics.suite.values()):
        roles["judge"] = cfg.judge
    return roles


@contextmanager
def own_errors() -> Iterator[None]:
    """Let our own errors raised inside a constructor leave as they are, not wrapped in
    Hydra's ``InstantiationException`` (whose first line does not say what failed)."""
    try:
        yield
    except InstantiationException as exc:
        if isinstance(exc.__cause__, RagExpError):
            raise exc.__cause__ from None
        raise


# --- settings: the config values the parts receive, read once -------------------------------
def plain(node: Any) -> dict[str, Any]:
    """A config node as a plain dict (interpolations resolved), or a mapping copied."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return dict(node)


def node_key(node: Any) -> str:
    """The config key of ``node`` (``llm``, ``judge``) for error messages; ``""`` for a plain
    mapping."""
    return str(node._key() or "") if isinstance(node, DictConfig) else ""


def model_arguments(node: Any) -> dict[str, Any]:
    """A chat-model or embedder node (DictConfig or mapping) as the arguments its class takes
    (:func:`~rag_experiments.llm.factory.model_arguments`: flat call settings as one
    ``retry``)."""
    return call_arguments(plain(node), where=node_key(node))


def cache_settings(cfg: Any) -> CacheSettings:
    """The job's LLM response cache: ``paths.llm_cache`` (null = none) and ``cache.mode``.

    Raises:
        ConfigError: Unknown ``cache.mode``.
    """
    paths = cfg.get("paths") or {}
    cache = cfg.get("cache") or {}
    return CacheSettings(paths.get("llm_cache"), str(cache.get("mode", "read_write")))


def model_session(cfg: Any) -> ModelSession:
    """A fresh :class:`~rag_experiments.llm.factory.ModelSession` (the job's response cache,
    new per-role usage meters) from the config's :func:`cache_settings`."""
    return ModelSession(cache_settings(cfg))


def qualify_settings(cfg: Any) -> QualifySettings:
    """What a run asks of its judge's qualification: ``judge.min_kappa`` and
    ``judge.require_qualified`` (defaults without a judge node)."""
    from rag_experiments.qualify.registry import QualifySettings  # imports the probes' metrics

    judge = cfg.get("judge") or {}
    default = QualifySettings()
    return QualifySettings(
        min_kappa=float(judge.get("min_kappa", default.min_kappa)),
        require_qualified=bool(judge.get("require_qualified", default.require_qualified)),
    )


# --- single parts ---------------------------------------------------------------------------
def build_chat_model(node: Any) -> Any:
    """The bare chat model of ``node`` (no cache, no meter): what a check asks.

    Raises:
        RagExpError: The model refused its config.
    """
    with own_errors():
        return instantiate(model_arguments(node))


def build_role_chat(
    node: Any,
    role: str,
    session: ModelSession | None = None,
    repeats: JudgeRepeats | None = None,
) -> Any:
    """The chat model of a role node (``cfg.judge``, or ``cfg.llm`` of ``generate``) without
    its role keys (:func:`~rag_experiments.llm.roles.judge_model_node`), behind the response
    cache and the role's usage meter of ``session`` (default: a new session without a cache),
    and, for the judge, the job's ``repeats`` (which repeat a call belongs to)."""
    session = session if session is not None else ModelSession()
    scope = repeats.scope if repeats is not None else None
    with own_errors():
        return session.build_chat(judge_model_node(node), role, where=node_key(node), repeats=scope)


def build_embedder(cfg: DictConfig) -> Any:
    """The configured embedder (``cfg.embedder``), behind the shared embedding cache
    (``paths.embedding_cache``) when one is set."""
    with own_errors():
        embedder = instantiate(model_arguments(cfg.embedder))
    if cfg.paths.embedding_cache:
        from rag_experiments.embedding.cache import CachedEmbedder

        embedder = CachedEmbedder(embedder, path=cfg.paths.embedding_cache)
    return embedder


def build_verifier(node: Any, session: ModelSession | None = None) -> Any:
    """The verifier of ``node`` (``cfg.verifier``: ``verifier=local``, ``tei``), behind the
    LLM response cache and the usage meter of role ``verifier``
    (:class:`~rag_experiments.verifier.cache.CachedVerifier`); a served one's ``timeout_s``/
    ``max_retries``/``backoff_s``/``backoff_max_s`` reach it as one
    :class:`~rag_experiments.common.http.RetryPolicy`. None for ``verifier=none`` (null).

    Raises:
        RagExpError: The verifier refused its config (no model folder, a label it cannot
            resolve, a bad URL).
    """
    if node is None:
        return None
    from rag_experiments.verifier.cache import CachedVerifier  # imports torch only when used

    if isinstance(node, DictConfig):
        unset = sorted(str(k) for k in node if OmegaConf.is_missing(node, k))
        if unset:
            raise ConfigError(
                f"verifier.{unset[0]} is not set: add verifier.{unset[0]}=… (verifier=local "
                "needs verifier.path, the model folder)"
            )
    data = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    with own_errors():
        inner = instantiate(nest_retry(dict(data), where="verifier"))
    session = session if session is not None else ModelSession()
    cache, mode, meter = session.cache_for("verifier")
    return CachedVerifier(inner, meter, cache, mode)


def build_target(node: DictConfig) -> Any:
    """A target that is not assembled from parts (``target=http``, ``target=recorded``) from
    its node; an HTTP target's ``timeout_s``/``retries``/``backoff_s``/``backoff_max_s`` reach
    it as one :class:`~rag_experiments.common.http.RetryPolicy` (no jitter).

    Raises:
        RagExpError: The target refused its config.
    """
    data = OmegaConf.to_container(node, resolve=True)
    with own_errors():
        return instantiate(
            nest_retry(data, retries_key="retries", jitter=False, where=str(node._key() or ""))
        )


def build_chunker(cfg: DictConfig) -> Any:
    """The configured chunker (``cfg.chunker``)."""
    with own_errors():
        return instantiate(cfg.chunker)


def build_tracker(cfg: DictConfig, **options: Any) -> Any:
    """The configured tracker (``cfg.tracking``) with ``options`` (``run_name``,
    ``experiment``)."""
    return instantiate(cfg.tracking, **options)


def load_dataset(cfg: DictConfig) -> EvalDataset:
    """The dataset a job evaluates: ``cfg.dataset`` loaded, then the seeded ``max_samples``
    subset when one is set, then shard ``shard.index`` of ``shard.count``
    (:mod:`rag_experiments.data.shard`); its digest is the one the run logs.

    Raises:
        RagExpError: The dataset cannot be loaded.
        InstantiationException: ``cfg.dataset`` does not instantiate.
    """
    return select_samples(cfg, instantiate(cfg.dataset).load())


def select_samples(cfg: DictConfig, dataset: EvalDataset) -> EvalDataset:
    """The part of the whole loaded ``dataset`` a job evaluates: the seeded ``max_samples``
    subset when one is set, then shard ``shard.index`` of ``shard.count``.

    Raises:
        ConfigError: ``max_samples`` < 1 or a bad shard.
    """
    if cfg.get("max_samples") is not None:
        dataset = dataset.subset(int(cfg.max_samples), seed=int(cfg.seed))
    return select_shard(dataset, **cfg.get("shard", {}))  # no shard key or count 1: all


class SharedParts:
    """Parts built at most once per job and shared: the judge (for every metric that
    requires ``judge``) and the embedder (the baseline's, also handed to metrics that require
    ``embedder``).

    Args:
        cfg: The composed root config.
        session: The job's models (default: a new one from :func:`cache_settings`).
        repeats: The job's judge repeats; the judge is built with their scope.

    Attributes:
        built: Role → part built so far (``generator``, ``embedder``, ``judge``,
            ``reranker``), in build order: what the job's preflight checks.
    """

    def __init__(
        self,
        cfg: DictConfig,
        session: ModelSession | None = None,
        repeats: JudgeRepeats | None = None,
    ) -> None:
        self.cfg = cfg
        self.session = session if session is not None else model_session(cfg)
        self.repeats = repeats
        self._judge: Any = None
        self._embedder: Any = None
        self._verifier: Any = None
        self.built: dict[str, Any] = {}

    def judge(self) -> Any:
        """The judge model (built on first use; warns or refuses when it is the generator's
        model, see :func:`~rag_experiments.llm.roles.check_judge_distinct`)."""
        if self._judge is None:
            if self.cfg.metrics.generate and is_assembled(self.cfg.target):
                check_judge_distinct(self.cfg.llm, self.cfg.judge)  # the generator is cfg.llm
            self._judge = self.built["judge"] = build_role_chat(
                self.cfg.judge, "judge", self.session, self.repeats
            )
        return self._judge

    def embedder(self) -> Any:
        """The job's embedder (built on first use)."""
        if self._embedder is None:
            self._embedder = self.built["embedder"] = build_embedder(self.cfg)
        return self._embedder

    def verifier(self) -> Any:
        """The job's verifier (``cfg.verifier``, built on first use).

        Raises:
            ConfigError: ``verifier=none`` while a metric requires one.
        """
        if self._verifier is None:
            node = self.cfg.get("verifier")
            if node is None:
                raise ConfigError(
                    "a metric of metrics.suite requires a verifier and verifier=none: set "
                    "verifier=local verifier.path=<model folder> or verifier=tei "
                    "verifier.url=<TEI server> (docs: how-to/verifiers.md)"
                )
            self._verifier = self.built["verifier"] = build_verifier(node, self.session)
        return self._verifier

    def optional(self, name: str) -> Any:
        """The shared part ``name`` when the job has one, else None (what a metric ``uses``:
        only ``verifier`` is optional; the judge and embedder always exist)."""
        if name == "verifier" and self.cfg.get("verifier") is None:
            return None
        return self.get(name)

    def get(self, name: str) -> Any:
        """The shared part ``name`` (one of :data:`SHARED_PARTS`).

        Raises:
            ConfigError: ``name`` is not a shared part.
        """
        if name == "judge":
            return self.judge()
        if name == "embedder":
            return self.embedder()
        if name == "verifier":
            return self.verifier()
        raise ConfigError(
            f"a metric requires {name!r}, which is not a shared part; "
            f"metrics may require {', '.join(SHARED_PARTS)}"
        )


def build_metric(node: DictConfig, shared: SharedParts) -> Any:
    """One ``metrics.suite`` entry, given the shared parts its class ``requires`` (as keyword
    arguments of the same names) and those it ``uses`` (None when the job has none).

    Raises:
        ConfigError: It requires a part that is not shared, or its class does not subclass
            :class:`~rag_experiments.protocols.MetricBase`.
        RagExpError: The metric refused its config.
    """
    cls = part_class(node, MetricBase)
    extra = {name: shared.get(name) for name in sorted(cls.requires)}
    extra.update({name: shared.optional(name) for name in sorted(cls.uses - cls.requires)})
    with own_errors():
        return instantiate(node, **extra)


def retriever_depth(metrics: list[Any], top_k: int, candidates: int = 0) -> int:
    """Ranks the retriever returns: ``max(top_k, deepest depth the metrics declare,
    candidates)`` (``candidates``: what the reranker re-scores, 0 without one)."""
    return max([int(m.depth) for m in metrics] + [int(top_k), int(candidates)])


def build_reranker(cfg: DictConfig, session: ModelSession) -> RerankerBase | None:
    """The configured reranker (``cfg.reranker``), None for ``reranker=none`` (null); a served
    one's ``timeout_s``/``max_retries``/``backoff_s``/``backoff_max_s`` reach it as one
    :class:`~rag_experiments.common.http.RetryPolicy`, as every HTTP client's do. It comes
    behind the LLM response cache (``paths.llm_cache``, ``cache.mode``) and the usage meter of
    role ``reranker`` (:class:`~rag_experiments.retrieval.rerank.CachedReranker`), so a rerun
    sends no rerank request and its report counts the reranker's calls.

    Raises:
        ConfigError: The node names no :class:`~rag_experiments.retrieval.base.RerankerBase`.
        RagExpError: The reranker refused its config.
    """
    node = cfg.get("reranker")
    if node is None:
        return None
    from rag_experiments.retrieval.rerank import CachedReranker  # imports httpx: only when used

    part_class(node, RerankerBase)
    data = OmegaConf.to_container(node, resolve=True)
    with own_errors():
        inner = instantiate(nest_retry(data, where="reranker"))
    cache, mode, meter = session.cache_for("reranker")
    return CachedReranker(inner, meter, cache, mode)


def build_baseline(
    cfg: DictConfig, metrics: list[Any], generate: bool, shared: SharedParts | None = None
) -> Any:
    """The assembled target (``cfg.target``, the baseline) from the config's chunker,
    retriever (its depth from :func:`retriever_depth` unless ``retriever.depth`` is set; always
    at least ``reranker.candidates``),
    embedder (shared) and ChromaDB index (``paths.chroma_dir``, ``target.hnsw``) when the
    retriever ``uses_vectors``, reranker (``cfg.reranker``, role ``reranker`` of the preflight)
    and, when answers are generated, the generator ``cfg.llm`` (role ``generator``)."""
    from rag_experiments.index.chroma import ChromaIndex

    shared = shared or SharedParts(cfg)
    uses_vectors = part_class(cfg.retriever, RetrieverBase).uses_vectors
    embedder = shared.embedder() if uses_vectors else None
    reranker = build_reranker(cfg, shared.session)
    retriever_cfg = OmegaConf.to_container(cfg.retriever, resolve=True)
    candidates = int(reranker.candidates) if reranker is not None else 0
    if retriever_cfg.get("depth") is None:
        retriever_cfg["depth"] = retriever_depth(metrics, int(retriever_cfg["top_k"]), candidates)
    else:  # a set depth never cuts what the reranker re-scores
        retriever_cfg["depth"] = max(int(retriever_cfg["depth"]), candidates)
    with own_errors():
        retriever = instantiate(retriever_cfg, _convert_="all")
        generator = (
            shared.session.build_chat(plain(cfg.llm), "generator", where=node_key(cfg.llm))
            if generate
            else None
        )
    if generator is not None:
        shared.built["generator"] = generator
    if reranker is not None:
        shared.built["reranker"] = reranker
    target_cfg = OmegaConf.to_container(cfg.target, resolve=True)
    hnsw = target_cfg.pop("hnsw", {})
    with own_errors():
        return instantiate(
            target_cfg,
            chunker=instantiate(cfg.chunker),
            embedder=embedder,
            retriever=retriever,
            index=ChromaIndex(path=cfg.paths.chroma_dir, **hnsw),
            generator=generator,
            generate=generate,
            reranker=reranker,
        )


# --- a job ----------------------------------------------------------------------------------
@dataclass
class Experiment:
    """The built parts of one job (the tracker is made apart: the run opens before building).

    ``checks`` maps each role to the part the job's preflight checks: the baseline's
    ``generator`` and ``embedder``, another ``target`` itself (its ``health_url``), the
    ``judge`` and the metrics' ``embedder`` when metrics use them.
    """

    dataset: EvalDataset
    target: Any
    metrics: list[Any]
    generate: bool
    checks: dict[str, Any] = field(default_factory=dict)
    judge_repeats: JudgeRepeats = field(default_factory=JudgeRepeats)
    """``judge.repeats`` / ``judge.vary`` (:func:`build_judge_repeats`); the judge's model
    was built with their scope."""
    calibration: CalibrationLabels | None = None
    """Human labels of ``calibration.labels`` (checked against the metrics and the samples)."""
    session: ModelSession = field(default_factory=ModelSession)
    """The job's models: response cache, usage per role, identity tags
    (:class:`~rag_experiments.llm.factory.ModelSession`)."""


def build(cfg: DictConfig) -> Experiment:
    """Instantiate every part but the tracker from a composed root config and load the
    dataset.

    Our own errors raised inside a constructor reach the caller as they are, not wrapped in
    Hydra's ``InstantiationException``.

    Args:
        cfg: The composed root config.

    Returns:
        The built :class:`Experiment`.

    Raises:
        ConfigError: The config holds a key no schema declares (``+retriever.topk=3``); the
            message names the closest keys. Two metrics of the suite produce the same column
            (:func:`check_metric_columns`).
        RagExpError: A part refused its config (e.g. ``ConfigError`` for ``retriever.top_k=0``)
            or the dataset could not be loaded.
    """
    check_keys(cfg)
    judge_repeats = build_judge_repeats(cfg)  # a bad judge.repeats/vary fails before any work
    session = model_session(cfg)  # LLM response cache + fresh per-role usage meters
    with own_errors():
        shared = SharedParts(cfg, session, judge_repeats)
        names = list(cfg.metrics.suite.keys())
        metrics = [build_metric(cfg.metrics.suite[name], shared) for name in names]
        check_metric_columns(dict(zip(map(str, names), metrics, strict=True)))
        calibration = build_calibration(cfg, metrics)
        generate = bool(cfg.metrics.generate)
        whole = instantiate(cfg.dataset).load()
        dataset = select_samples(cfg, whole)
        if calibration is not None:  # ids are checked against the whole dataset, not the part
            calibration.check_ids((s.id for s in whole.samples), (s.id for s in dataset.samples))
        checks: dict[str, Any] = {}
        if is_assembled(cfg.target):
            target = build_baseline(cfg, metrics, generate, shared)
        else:
            target = build_target(cfg.target)
            checks["target"] = target
    return Experiment(
        dataset,
        target,
        metrics,
        generate,
        {**shared.built, **checks},
        judge_repeats,
        calibration,
        session,
    )


def check_metric_columns(metrics: Mapping[str, Any]) -> None:
    """Refuse a suite in which two metrics produce the same column, before any question is
    answered (the per-query table has one column per name).

    Args:
        metrics: ``metrics.suite`` key → the built metric (its ``specs()`` name its columns).

    Raises:
        ConfigError: One line naming the column, the two suite entries and the fix.
    """
    owner: dict[str, str] = {}
    for name, metric in metrics.items():
        for spec in metric.specs():
            first = owner.setdefault(spec.name, name)
            if first != name:
                raise ConfigError(
                    f"metrics.suite: {first} and {name} both produce the column "
                    f"{spec.name!r}; give one a prefix (+metrics.suite.{name}.prefix={name}.) "
                    "when its class takes one, or remove one of them from the suite"
                )


def build_judge_repeats(cfg: DictConfig) -> JudgeRepeats:
    """The judge repeats of ``cfg.judge`` (``repeats``, ``vary``, ``vary_temperature``; the
    base seed is the judge's ``seed``, 0 when its model has none); one judgement when the
    config has no judge.

    Raises:
        ConfigError: A value :class:`~rag_experiments.metrics.repeats.JudgeRepeats` refuses.
    """
    node = cfg.get("judge")
    if node is None:
        return JudgeRepeats()
    return JudgeRepeats(
        repeats=int(node.get("repeats", 1)),
        vary=str(node.get("vary", "seed")),
        temperature=float(node.get("vary_temperature", 0.7)),
        base_seed=int(node.get("seed", 0) or 0),
    )


def build_calibration(cfg: DictConfig, metrics: list[Any]) -> CalibrationLabels | None:
    """The human labels of ``calibration.labels`` (None when unset), read and checked against
    the run's metric columns before the dataset loads
    (:meth:`~rag_experiments.metrics.calibration.CalibrationLabels.check_metrics`).

    Raises:
        ConfigError: An unreadable or malformed file, a metric the run does not compute, or a
            column whose declared range is not [0, 1].
    """
    node = cfg.get("calibration")
    if node is None or not node.get("labels"):
        return None
    labels = load_labels(
        str(node.labels),
        power_tuning=bool(node.get("power_tuning", False)),
        run_labels=_graded_run_labels(cfg),
    )
    labels.check_metrics([s for m in metrics for s in m.specs()])
    return labels


def _graded_run_labels(cfg: DictConfig) -> Callable[[str], Path]:
    """``calibration.labels=<run id>``: the labels file of a run graded with ``rag-exp review
    --run``, read from the run's tracking store (``tracking.uri``)."""

    def fetch(run_id: str) -> Path:
        from rag_experiments.qualify.graded import run_labels_file
        from rag_experiments.tracking.store import RunStore

        try:
            return run_labels_file(RunStore(str(cfg.tracking.uri), where="tracking.uri"), run_id)
        except RagExpError as exc:
            raise ConfigError(f"calibration.labels={run_id}: {exc}") from exc

    return fetch


# --- a generation ---------------------------------------------------------------------------
@dataclass
class GenerationParts:
    """The parts of an LLM-mode ``rag-exp generate``.

    Attributes:
        chat: The question writer (``cfg.llm``, role ``dataset_generator``).
        judge: The judge of unanswerable questions (``cfg.judge``), None when none are asked.
        chunker: Splits the documents.
        embedder: Embeds chunks (dedup, retrieval check).
    """

    chat: Any
    judge: Any
    chunker: Any
    embedder: Any


def build_generation(
    cfg: DictConfig, *, with_judge: bool, session: ModelSession | None = None
) -> GenerationParts:
    """The parts of a composed ``generate`` config.

    Args:
        cfg: The composed ``generate`` config.
        with_judge: Build the judge (unanswerable questions are asked); warns, or refuses
            with ``judge.require_distinct``, when it is the question writer's model.
        session: The generation's models (default: a new one from :func:`cache_settings`).

    Raises:
        ConfigError: The config holds a key no schema declares (see :func:`build`).
        RagExpError: A part refused its config.
    """
    check_keys(cfg)
    session = session if session is not None else model_session(cfg)
    chat = build_role_chat(cfg.llm, "dataset_generator", session)
    judge = None
    if with_judge:
        check_judge_distinct(cfg.llm, cfg.judge)
        judge = build_role_chat(cfg.judge, "judge", session)
    return GenerationParts(chat, judge, build_chunker(cfg), build_embedder(cfg))
