"""Protocols of the swappable parts. Each implementation is a small class chosen in ``conf/``
by ``_target_``; the runner only sees these interfaces.

A part also *declares* what the composition root (:mod:`rag_experiments.build`) needs to know
to build and wire it: a metric its ``requires`` (the shared parts it is given), ``depth`` and
``audit()``; a target whether the harness assembles it from the config's parts
(``assembled``). :class:`MetricBase` and :class:`TargetBase` hold the defaults, so an
implementation states only what differs. (The chat-model protocol is
:class:`rag_experiments.llm.base.ChatModel`.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from rag_experiments.data.base import EvalDataset
    from rag_experiments.records import (
        Chunk,
        Document,
        MetricSpec,
        MetricValue,
        RagResponse,
        Sample,
    )


@runtime_checkable
class DatasetLoader(Protocol):
    """Builds an :class:`~rag_experiments.data.base.EvalDataset` (samples + corpus)."""

    def load(self) -> EvalDataset:
        """Read the dataset. Raises :class:`~rag_experiments.errors.DatasetError` listing every
        bad row as ``file:line:field``."""
        ...


@runtime_checkable
class Chunker(Protocol):
    """Splits documents into chunks. ``config_id`` identifies the configuration (it is part of
    the vector-index key, so two configs that chunk differently must have different ids)."""

    @property
    def config_id(self) -> str: ...

    def split(self, doc: Document) -> list[Chunk]:
        """Return the document's chunks in order; their positions are 0..n-1."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of shape ``(n, dim)``."""

    @property
    def id(self) -> str:
        """Stable identity of model + settings that change vectors (part of the index key)."""
        ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray:
        """Shape ``(dim,)``."""
        ...

    def check(self) -> None:
        """Make sure the embedder can be used now (its server answers and has the model),
        before a job builds an index or answers anything; quick, no long retry. In-process
        embedders (hash, sentence-transformers) have nothing to reach.

        Raises:
            RagExpError: The embedder cannot be used; the message names the fix.
        """
        ...


@runtime_checkable
class Target(Protocol):
    """The RAG system under test: answers one question.

    ``max_concurrency`` declares how many questions it takes at once (the runner answers that
    many from threads unless the run sets ``max_concurrency``); with more than 1, ``answer``
    must be thread-safe.

    ``assembled`` (a class attribute) declares that the harness builds the target from the
    config's parts: its ``__init__`` takes the ``chunker``, ``embedder``, ``retriever``,
    ``index`` and ``generator`` built from those groups (the baseline; also what
    ``rag-exp serve`` can serve). False: the target is built from its own node alone.
    """

    assembled: ClassVar[bool]
    max_concurrency: int

    def prepare(self, dataset: EvalDataset) -> None:
        """Get ready for ``dataset`` (build or reuse an index, check an endpoint)."""
        ...

    def answer(self, sample: Sample) -> RagResponse:
        """Answer one sample. Failures are returned as ``RagResponse(error=reason)``, never
        raised, so one bad question never kills a run."""
        ...

    def describe(self) -> dict[str, str]:
        """Identity for tags (model ids, embedder id, index name, url)."""
        ...

    def check(self) -> None:
        """Make sure the system and every model it uses can be reached, before any question
        is asked and before any index is built (once per job; quick).

        Raises:
            RagExpError: Something it needs cannot be used; the message names the fix.
        """
        ...


@runtime_checkable
class Metric(Protocol):
    """A group of metric columns computed over all rows.

    ``evaluate`` returns one dict per row, keyed by :attr:`MetricSpec.name`; a value that
    cannot be computed for a row is ``MetricValue.nan(reason)``, never a silent 0.

    Declared for the composition root:

    - ``requires`` (class attribute): the shared parts its ``__init__`` takes as keyword
      arguments of the same name: ``"judge"`` (the judge chat model), ``"embedder"`` (the
      job's embedder); empty for a metric that needs neither.
    - ``uses`` (class attribute): the shared parts it takes when the job has one and works
      without (passed as None otherwise): ``"verifier"`` for the claim metrics, which check
      claims with the verifier when ``verifier=`` is set and with the judge otherwise.
    - ``depth``: ranks of retrieval it scores (the retriever returns at least the deepest
      ``depth`` of the suite); 0 when it scores no ranking.
    - ``audit()``: per-row records of the last ``evaluate`` (judged metrics:
      ``judge_audit.jsonl``); empty for the others.
    - ``per_row`` (class attribute): how it is scored. True: one row at a time by the judge
      scheduler while answers arrive (it is a :class:`~rag_experiments.metrics.scheduler.
      JudgedRowMetric`, with ``score_row`` and ``judge``); False: over all rows after answering.
    - ``declaration`` (class attribute): what its outputs mean (:class:`~rag_experiments.
      metrics.definitions.MetricDeclaration`), or None for a metric that declares nothing.
    """

    requires: ClassVar[frozenset[str]]
    uses: ClassVar[frozenset[str]]
    per_row: ClassVar[bool]

    @property
    def depth(self) -> int: ...

    def audit(self) -> list[dict[str, Any]]: ...

    def specs(self) -> list[MetricSpec]: ...

    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]: ...


@runtime_checkable
class Verifier(Protocol):
    """A groundedness verifier: a sequence-classification (NLI, fact-checking) or
    cross-encoder model that says how likely a premise supports a hypothesis
    (:mod:`rag_experiments.verifier`: a local model folder, a TEI server).

    The one call is :meth:`score`, batched; the faithfulness metric of ``metrics=verifier``
    asks it for (context, claim) pairs, and any other part (a claim checker) may ask it for its
    own pairs. Declared for the judge scheduler, which runs it like a judge model:
    ``max_concurrency`` (rows scored at once), ``slot_affinity`` (False) and ``slots`` (1).
    """

    max_concurrency: int
    slot_affinity: bool
    slots: int

    @property
    def id(self) -> str:
        """Identity of the model and of every setting that changes a score (part of the
        response-cache key of each pair)."""
        ...

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Score ``(premise, hypothesis)`` pairs.

        Args:
            pairs: Each pair's premise (the evidence: a retrieved context) and hypothesis (the
                statement to check: a claim of the answer). A premise longer than the model
                reads is cut into overlapping windows and the pair gets the maximum over them.

        Returns:
            One probability in [0, 1] per pair, same order, that the premise supports
            (entails) the hypothesis; ``[]`` for no pairs. Thread-safe.

        Raises:
            LLMError: A served verifier failed after its retries (``timeout``,
                ``unreachable``, ``http_error``, ``bad_response``): the caller's row error.
        """
        ...

    def describe(self) -> dict[str, str]:
        """Tags naming it: ``provider``, ``model`` and the settings that matter."""
        ...

    def check(self) -> None:
        """Make sure it can be used now (quick; a server must answer one pair).

        Raises:
            RagExpError: It cannot be used; the message names the fix.
        """
        ...


_METRIC_CLASSES: list[type[MetricBase]] = []


def metric_classes() -> list[type[MetricBase]]:
    """Every subclass of :class:`MetricBase` defined so far, in definition order (the
    registry read by :func:`rag_experiments.metrics.definitions.declared_metrics`)."""
    return list(_METRIC_CLASSES)


class MetricBase:
    """Defaults of :class:`Metric`'s declarations: requires nothing, scores no ranking
    (``depth`` 0), is scored over all rows (``per_row`` False), declares no outputs
    (``declaration`` None) and keeps no audit. A metric overrides what differs.

    Every subclass registers itself when it is defined (:func:`metric_classes`), so a metric
    defined in a user's module joins the registry when the module is imported.
    """

    requires: ClassVar[frozenset[str]] = frozenset()
    uses: ClassVar[frozenset[str]] = frozenset()
    per_row: ClassVar[bool] = False
    declaration: ClassVar[Any] = None
    depth: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _METRIC_CLASSES.append(cls)

    def audit(self) -> list[dict[str, Any]]:
        """No per-row records (``[]``)."""
        return []

    preview: ClassVar[Mapping[str, Any] | None] = None
    """What ``rag-exp run --cfg job`` shows under the suite entry as ``prompt_preview``, plain
    data (a YAML rubric's prompt: its id, system message and user template, line by line);
    None: nothing shown."""

    @classmethod
    def declared_for(cls, config: Mapping[str, Any]) -> type[MetricBase]:
        """The class declaring the metric a suite entry of this class configures. Default:
        this class. A metric whose outputs depend on its config (a YAML rubric,
        :mod:`~rag_experiments.metrics.rubric`) returns a class made for that config, which
        registers, so its declaration is in every derived list. Called when the config is
        composed (:func:`~rag_experiments.config.keys.check_suite`) and for a logged run's
        params (:func:`~rag_experiments.metrics.definitions.register_run_metrics`).

        Args:
            config: The suite entry's keys (``_target_`` included), plain data.

        Raises:
            ConfigError: A value the metric refuses (the message names the key).
        """
        return cls


class TargetBase:
    """Defaults of :class:`Target`'s declarations: built from its own config node alone
    (``assembled`` False)."""

    assembled: ClassVar[bool] = False
