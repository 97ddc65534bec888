"""Plain records that flow through a run: config → dataset → target → metrics → tracker.

Field names follow the field's conventions so users and peer tools meet familiar words:
RAGAS sample names (``user_input``, ``response``, ``retrieved_contexts``, ``reference``,
``reference_contexts``) and BEIR ids (``doc_id``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

QUESTION_TYPES: tuple[str, ...] = (
    "procedural",
    "compliance",
    "role_responsibility",
    "condition_trigger",
    "definition_concept",
    "exception_escalation",
    "timeline_sla",
    "multi_hop",
)
"""The 8 question types of generated and bundled datasets. Loaders accept other strings too
(BEIR has none; peer formats use their own categories)."""


@dataclass(frozen=True)
class Document:
    """One source document of the corpus.

    Attributes:
        id: Stable id, unique in the corpus (a BEIR ``_id``, or the file's path relative to the
            corpus folder without its extension, e.g. ``"it-access-policy"``).
        text: Full extracted text, normalised (NFKC, no NUL).
        title: Optional title (BEIR ``title``; used by embedders as ``title + " " + text``).
        metadata: Free-form; loaders set ``source`` (path) and, for PDFs, ``page_starts``:
            the character offset in ``text`` where each 1-based page begins.
    """

    id: str
    text: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def page_at(self, offset: int) -> int | None:
        """Return the 1-based page that contains character ``offset``, or None when unknown."""
        starts = self.metadata.get("page_starts")
        if not starts:
            return None
        page = 1
        for i, start in enumerate(starts, start=1):
            if offset >= start:
                page = i
            else:
                break
        return page


@dataclass(frozen=True)
class Chunk:
    """A piece of a document, the unit that is embedded and retrieved.

    Attributes:
        id: ``f"{doc_id}#{position}"``; unique for a given chunker configuration.
        doc_id: Id of the parent :class:`Document`.
        text: The chunk's text (a slice of the document text, possibly stripped).
        position: 0-based index of the chunk within its document.
        start: Character offset in the document where the chunk starts.
        end: Character offset (exclusive) where it ends.
        metadata: Free-form (``page``, ``title``, ``source``).
    """

    id: str
    doc_id: str
    text: str
    position: int
    start: int = 0
    end: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Citation:
    """One structured citation of a response: the statement it supports and the source it
    names (what ``metrics=citations`` checks, :mod:`~rag_experiments.metrics.citations`).

    The statement is given by its **text** (not a character span): the sentence of
    ``response`` it supports, or a part of it (Cohere's citation ``text`` is a span of the
    answer); markers, case, whitespace and final punctuation do not matter. The source is a
    retrieved chunk id, a document id, or the cited passage's text: at least one of them.
    Several sources of one statement are several citations with the same statement.

    Attributes:
        statement: Text of the cited statement (non-blank).
        chunk_id: Id of the cited retrieved chunk (one of ``retrieved_ids``), or None.
        doc_id: Id of the cited document (one of ``retrieved_doc_ids``), or None.
        text: The cited passage's text (a retrieved context, or a quote of one), or None.

    Raises:
        ValueError: A blank statement, or no source.
    """

    statement: str
    chunk_id: str | None = None
    doc_id: str | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if not self.statement.strip():
            raise ValueError("a citation's statement must not be blank")
        if self.chunk_id is None and self.doc_id is None and self.text is None:
            raise ValueError("a citation needs a source: chunk_id, doc_id or text")


class RecordedCitation(BaseModel):
    """A :class:`Citation` as a dataset row records it (same fields, checked strictly by the
    loaders; :meth:`to_citation` gives the record)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    statement: str = Field(min_length=1, pattern=r"\S")
    chunk_id: str | None = None
    doc_id: str | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _names_a_source(self) -> RecordedCitation:
        if self.chunk_id is None and self.doc_id is None and self.text is None:
            raise ValueError("a citation needs a source: chunk_id, doc_id or text")
        return self

    def to_citation(self) -> Citation:
        """The :class:`Citation` record."""
        return Citation(self.statement, self.chunk_id, self.doc_id, self.text)


class RecordedAnswer(BaseModel):
    """An answer the system under test already gave, carried by the dataset row
    (``target=recorded`` scores it without calling the system).

    Field names are RAGAS' (``response``, ``retrieved_contexts``) and
    :class:`RagResponse`'s for the rest.

    Attributes:
        response: The answer; None when the system gave none (answer metrics are then NaN
            ``no_response``; retrieval metrics still score the contexts).
        retrieved_contexts: Context texts in rank order (best first).
        retrieved_ids: Chunk ids in rank order, when recorded.
        retrieved_doc_ids: Document ids in rank order, when recorded (else matched to the
            corpus by text, as for HTTP targets).
        latency_ms: Recorded wall time of the answer, milliseconds (≥ 0), when known.
        citations: The answer's structured citations (:class:`RecordedCitation`: statement
            and chunk_id / doc_id / text), when recorded; None = the citations are the
            answer's inline ``[k]`` markers, if any.
    """

    model_config = ConfigDict(extra="forbid")

    response: str | None = None
    retrieved_contexts: list[str] = Field(default_factory=list)
    retrieved_ids: list[str] | None = None
    retrieved_doc_ids: list[str] | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    citations: list[RecordedCitation] | None = None


class Sample(BaseModel):
    """One evaluation question.

    Attributes:
        id: Unique question id within the dataset.
        user_input: The question asked of the RAG system.
        reference: Reference (ground-truth) answer; ``""`` when there is none (BEIR).
        reference_doc_ids: Ids of the documents that hold the answer (doc-level relevance).
        reference_contexts: Passages that hold the answer, verbatim from the documents.
        keywords: Terms a good retrieval should surface (keyword coverage).
        question_type: One of :data:`QUESTION_TYPES`, or another label, or None.
        answerable: False for questions whose answer is not in the corpus; those are left
            out of retrieval metrics and used for refusal rates.
        relevance: Graded relevance per doc id (BEIR qrels); when empty, every id in
            ``reference_doc_ids`` has grade 1.
        metadata: Free-form provenance (source page, chunk id, generator model …).
        recorded: An answer already given to this question (``target=recorded``), or None.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    user_input: str = Field(min_length=1)
    reference: str = ""
    reference_doc_ids: list[str] = Field(default_factory=list)
    reference_contexts: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    question_type: str | None = None
    answerable: bool = True
    relevance: dict[str, int] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    recorded: RecordedAnswer | None = None

    @field_validator("user_input")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v

    def qrels(self) -> dict[str, int]:
        """Graded relevance ``{doc_id: grade}``: :attr:`relevance` if set, else grade 1 for
        every reference doc id."""
        if self.relevance:
            return dict(self.relevance)
        return {d: 1 for d in self.reference_doc_ids}


@dataclass
class RagResponse:
    """What the system under test returned for one sample.

    Attributes:
        response: The generated answer (``""`` in retrieval-only mode or on error).
        retrieved_contexts: Context texts in rank order (best first).
        retrieved_ids: Chunk ids in rank order when the target knows them, else None.
        retrieved_doc_ids: Parent doc ids in rank order (deduplicated, first occurrence
            wins), when known, else None. May be deeper than ``retrieved_contexts`` (the
            retriever keeps a longer ranking for retrieval metrics).
        retrieved_sources: Per retrieved context, where it came from (the baseline's
            :meth:`~rag_experiments.retrieval.base.Hit.provenance`: ``{"rank.dense": 3,
            "rank.bm25": 1, "score": …}``, plus ``retriever_rank`` and ``rerank_score`` when
            reranked), or None when the target does not say.
        latency_ms: Wall time of the whole answer in milliseconds.
        no_response: True when there is no answer to score though the target did not fail (a
            recorded row without a response): answer metrics are NaN ``no_response``,
            retrieval metrics still score ``retrieved_contexts``; not counted in ``n_failed``.
        error: None on success; otherwise a short reason code (``timeout``, …).
        error_message: Human-readable detail for ``error``.
        metadata: Free-form (token usage, model id, …).
        citations: The answer's structured citations (:class:`Citation`) when the target
            returns them, else None (``metrics=citations`` then reads inline ``[k]`` markers).
            Plain dicts (a checkpoint read back) are turned into :class:`Citation`.
    """

    response: str = ""
    retrieved_contexts: list[str] = field(default_factory=list)
    retrieved_ids: list[str] | None = None
    retrieved_doc_ids: list[str] | None = None
    retrieved_sources: list[dict[str, Any]] | None = None
    latency_ms: float = 0.0
    no_response: bool = False
    error: str | None = None
    error_message: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    citations: list[Citation] | None = None

    def __post_init__(self) -> None:
        if self.citations is not None:
            self.citations = [
                c if isinstance(c, Citation) else Citation(**c) for c in self.citations
            ]

    @property
    def unanswered(self) -> str | None:
        """Why there is no answer to score, as the NaN reason of every answer metric:
        ``target_error`` (the target failed), ``no_response`` (it returned none), else None."""
        if self.error is not None:
            return "target_error"
        return "no_response" if self.no_response else None


@dataclass(frozen=True)
class MetricValue:
    """One per-sample metric value: a float in the metric's range, or NaN with a reason.

    Attributes:
        value: The score; ``math.nan`` when undefined.
        reason: Why the value is NaN (``no_claims``, ``empty_context``, ``timeout``,
            ``parse_error``, ``unanswerable``, ``target_error`` …) or a flag on a defined value
            (``empty_context`` on a 0.0); None when the value is ordinary.
    """

    value: float
    reason: str | None = None

    @property
    def is_valid(self) -> bool:
        """True when :attr:`value` is a real number (not NaN)."""
        return not math.isnan(self.value)

    @classmethod
    def nan(cls, reason: str) -> MetricValue:
        """A NaN value carrying ``reason`` (required: a NaN never comes without one)."""
        return cls(math.nan, reason)


@dataclass(frozen=True)
class ColumnSource:
    """Who computed an LLM-judged metric column, in plain values: what a reader of the run
    (a trace assessment) needs without knowing the metric's class.

    Attributes:
        judge: The judge's model id (``"judge"`` when the judge names none).
        audit_key: Key of the column's metric in each ``judge_audit.jsonl`` row (the metric's
            name), whose record explains the column's value.
        rationale_key: Field of that record holding the explanation lines (``list[str]``).
    """

    judge: str
    audit_key: str
    rationale_key: str


@dataclass(frozen=True)
class MetricSpec:
    """Declaration of one metric column.

    Attributes:
        name: Canonical name carrying its parameters (``nDCG@10``, ``faithfulness``).
        higher_is_better: Direction of improvement.
        low: Lowest possible value.
        high: Highest possible value.
        description: One line for the README and the MLflow run.
        key: Priority of a key metric (smaller = more important), None for any other column;
            filled in from the metric declarations (:func:`~rag_experiments.metrics.keys.
            declared_specs`). Not part of equality.
        source: The judge that computed an LLM-judged column, None for a column computed by
            code. Not part of equality.
    """

    name: str
    higher_is_better: bool = True
    low: float = 0.0
    high: float = 1.0
    description: str = ""
    key: int | None = field(default=None, compare=False)
    source: ColumnSource | None = field(default=None, compare=False)
