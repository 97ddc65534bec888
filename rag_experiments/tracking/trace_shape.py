"""The shape of one question's MLflow trace, in plain values and as MLflow's entities.

MLflow 3's GenAI view shows traces: a tree of spans (inputs, outputs, timing) and assessments
on the trace (feedback with a rationale per judge, expectations). One question's trace
(:func:`question_parts`, written by :mod:`~rag_experiments.tracking.trace_log`) is linked to
its run (trace metadata ``mlflow.sourceRun``):

* root span ``question`` (type ``CHAIN``): inputs ``{"question": user_input}``, outputs the
  answer (``""`` in retrieval-only mode; status ``ERROR`` with the error when the target failed);
* child span ``retrieve`` (type ``RETRIEVER``): inputs ``{"query": user_input}``, outputs one
  :class:`mlflow.entities.Document` per retrieved context (``page_content`` = context text,
  ``metadata`` = ``doc_id``, ``chunk_id``, ``rank`` (1 = best));
* child span ``generate`` (type ``LLM``) when the target generated an answer: model id, token
  usage (``mlflow.chat.tokenUsage``) and the generation's wall time when the target timed it;
* the reference answer as the :class:`mlflow.entities.Expectation` ``expected_response``;
* one :class:`mlflow.entities.Feedback` per **assessed** value (below): name = canonical
  metric name, value = the float, rationale = the explanation lines of the judge's audit
  record (the field named by the column's :attr:`~rag_experiments.records.ColumnSource.
  rationale_key`, the same shape for every backend) after a ``flag: <reason>`` line for a
  flagged value, source = ``LLM_JUDGE`` with the judge's model id for judged columns, ``CODE``
  (``rag-experiments``) for the others.

**Which values become assessments** (``tracking.trace_assessments``, :func:`assessed_columns`).
By default (``key``) a trace carries the key metrics the run computed (a spec with a
:attr:`~rag_experiments.records.MetricSpec.key`, e.g. ``nDCG@10``, ``faithfulness``,
``answer_judge.accuracy``), most important first: the headline of the console table; ``all``
adds every LLM-judged column (both backends: a spec with a
:attr:`~rag_experiments.records.MetricSpec.source`). A grade on its own scale (``*_raw``, 1–5)
is never one. Every other column stays in the run's per-query table, which keeps all of them.
Of those values:

* a number is a feedback with that value;
* a NaN that says something **failed** — the target (``target_error``), the judge (a reason of
  :data:`~rag_experiments.llm.errors.JUDGE_ERROR_REASONS`: ``timeout``, ``parse_error`` …),
  the metric (``metric_error``, ``judge_error``), or a missing cell (``missing``) — is a
  feedback without value whose error code is the reason (MLflow shows it as an error, as it
  should);
* a NaN **by design** — any other reason: the metric does not apply to this question
  (``unanswerable``, ``no_reference``, ``no_reference_docs``, ``has_reference``, ``refusal``,
  ``no_claims``, ``missing_params`` …) — is not an assessment (MLflow would show a red
  "Error"); the trace tag ``not_applicable`` lists them (``<reason>: <column>, …``).

**Ids.** The trace id is derived from the run id and the question id (:func:`trace_id_for`),
span and assessment ids from the trace id, so the same question of the same run always makes
the same rows. The plain values (:class:`TraceParts`) are what every writer starts from: the
SQL writer's rows, the batch endpoint's JSON, and MLflow's entities (:func:`entities`; spans
built offline with a private OpenTelemetry tracer, never MLflow's global one, so nothing here
touches the caller's own tracing).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlflow.entities import (
    AssessmentSourceType,
    SpanType,
)
from mlflow.tracing.constant import (
    TRACE_SCHEMA_VERSION,
    TRACE_SCHEMA_VERSION_KEY,
    SpanAttributeKey,
    TokenUsageKey,
    TraceMetadataKey,
    TraceTagKey,
)
from mlflow.tracing.utils import (
    generate_mlflow_trace_id_from_otel_trace_id,
)

from rag_experiments.llm.errors import JUDGE_ERROR_REASONS
from rag_experiments.records import ColumnSource, MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.tracking.selection import assessed_columns

CODE_SOURCE_ID = "rag-experiments"
"""Source id of assessments computed by code (retrieval metrics, keyword metrics, refusal)."""

EXPECTATION_NAME = "expected_response"
"""MLflow's conventional expectation name for a reference answer."""

NOT_APPLICABLE_TAG = "not_applicable"
"""Trace tag listing the assessed columns left out because their NaN is by design."""

FAILURE_REASONS: frozenset[str] = JUDGE_ERROR_REASONS | {
    "target_error",
    "metric_error",
    "judge_error",
    "missing",
}
"""NaN reasons that say something failed (shown as an assessment error); every other NaN
reason means the metric does not apply to the question (left out, see the module docstring)."""

TRACE_NAME = "question"
TRACES_PER_TRANSACTION = 100
"""Traces (with their assessments) per database transaction: short enough that parallel sweep
jobs sharing a sqlite file never wait long for its write lock."""


_PREVIEW_CHARS = 1000
_TAG_CHARS = 4000


def otel_span_id(otel_trace_id: int, n: int) -> int:
    """The OpenTelemetry id of the ``n``-th span (1 = the root) of a trace."""
    digest = hashlib.blake2b(f"{otel_trace_id:032x}/{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def otel_trace_id_for(run_id: str, question_key: str) -> int:
    """The OpenTelemetry trace id (128 bits, never 0) of one question of one run: a BLAKE2b
    hash of both."""
    digest = hashlib.blake2b(f"{run_id}\n{question_key}".encode(), digest_size=16).digest()
    return int.from_bytes(digest, "big") or 1


def trace_id_for(run_id: str, question_key: str) -> str:
    """The MLflow trace id of one question of one run (``tr-`` + 32 hex digits): a BLAKE2b
    hash of both, so rewriting a question's trace replaces it instead of adding one.

    Args:
        run_id: The MLflow run.
        question_key: The question's id (``Sample.id``; a repeated id gets ``#<n>``).

    Returns:
        The trace id.
    """
    return generate_mlflow_trace_id_from_otel_trace_id(otel_trace_id_for(run_id, question_key))


def assessment_source(source: ColumnSource | None) -> tuple[str, str]:
    """``(source type, source id)`` of an assessment: ``LLM_JUDGE`` and the judge's model id
    for a judged column, ``CODE`` and :data:`CODE_SOURCE_ID` for one computed by code."""
    if source is None:
        return AssessmentSourceType.CODE, CODE_SOURCE_ID
    return AssessmentSourceType.LLM_JUDGE, source.judge


def is_not_applicable(value: MetricValue) -> bool:
    """True for a NaN by design (its reason is not in :data:`FAILURE_REASONS`)."""
    return not value.is_valid and value.reason not in FAILURE_REASONS


def rationale(
    value: MetricValue, record: Mapping[str, Any] | None, rationale_key: str | None = None
) -> str | None:
    """A readable reason for one value: the explanation lines of the judge's audit record
    (its field ``rationale_key``), after ``NaN: <reason>`` for a NaN or ``flag: <reason>`` for
    a flagged value.

    Args:
        value: The cell.
        record: The judged metric's audit record of this question, or None for code metrics.
        rationale_key: The record's field holding the explanation lines
            (:attr:`~rag_experiments.records.ColumnSource.rationale_key`); None: no lines.

    Returns:
        One or more lines, or None when a code metric's value needs no reason.
    """
    lines: list[str] = []
    if not value.is_valid:
        lines.append(f"NaN: {value.reason}")
    elif value.reason:
        lines.append(f"flag: {value.reason}")
    if rationale_key is not None:
        lines.extend(str(line) for line in (record or {}).get(rationale_key) or [])
    return "\n".join(lines) or None


@dataclass
class SpanParts:
    """One span of a question's trace in plain values (the ``n``-th span made, 1 = the root,
    id :func:`otel_span_id`); its parent is the root."""

    n: int
    name: str
    span_type: str
    start_ns: int
    end_ns: int
    inputs: Any
    outputs: Any
    attributes: dict[str, Any]
    error: str | None = None


@dataclass
class AssessmentParts:
    """One assessment in plain values: a feedback (``value`` a float, or None with
    ``error_code``) or the expectation (``value`` the reference text)."""

    name: str
    value: Any
    expectation: bool
    error_code: str | None
    rationale: str | None
    source_type: str
    source_id: str


@dataclass
class TraceParts:
    """A question's trace in plain values: what MLflow's entities (:func:`entities`) and
    the store's rows (:func:`_insert_sql`) are both made from."""

    otel_trace_id: int
    trace_id: str
    request_time: int
    execution_duration: int
    failed: bool
    request_preview: str
    response_preview: str
    client_request_id: str
    run_id: str
    tags: dict[str, str]
    spans: list[SpanParts]
    assessments: list[AssessmentParts]


def assessment_id(trace_id: str, name: str) -> str:
    """The id of assessment ``name`` of a trace (``a-`` + 32 hex digits)."""
    return "a-" + hashlib.blake2b(f"{trace_id}/{name}".encode(), digest_size=16).hexdigest()


def question_parts(
    sample: Sample,
    response: RagResponse,
    values: Mapping[str, MetricValue],
    specs: Sequence[MetricSpec],
    *,
    audit: Mapping[str, Any] | None,
    run_id: str,
    model: str | None,
    start_ns: int,
    question_key: str | None = None,
    assessed: Sequence[str] | None = None,
) -> TraceParts:
    """The trace of one question in plain values (arguments as :func:`question_trace`)."""
    otel_trace_id = otel_trace_id_for(run_id, question_key or sample.id)
    trace_id = generate_mlflow_trace_id_from_otel_trace_id(otel_trace_id)
    total_ns = int(max(response.latency_ms, 0.0) * 1e6)
    end_ns = start_ns + total_ns
    generation_ns = int(float(response.metadata.get("generation_ms", 0.0)) * 1e6)
    split_ns = max(start_ns, end_ns - min(generation_ns, total_ns))
    failed = response.error is not None
    answer = None if response.no_response else response.response
    spans = [
        SpanParts(
            1,
            TRACE_NAME,
            SpanType.CHAIN,
            start_ns,
            end_ns,
            {"question": sample.user_input},
            answer,
            {"question_id": sample.id, "question_type": sample.question_type or ""},
            response.error,
        ),
        SpanParts(
            2,
            "retrieve",
            SpanType.RETRIEVER,
            start_ns,
            split_ns,
            {"query": sample.user_input},
            _documents(response),
            {},
        ),
    ]
    if response.response or "prompt_tokens" in response.metadata:
        usage = {
            TokenUsageKey.INPUT_TOKENS: int(response.metadata.get("prompt_tokens", 0)),
            TokenUsageKey.OUTPUT_TOKENS: int(response.metadata.get("completion_tokens", 0)),
        }
        usage[TokenUsageKey.TOTAL_TOKENS] = sum(usage.values())
        attributes: dict[str, Any] = {SpanAttributeKey.CHAT_USAGE: usage}
        if model:
            attributes[SpanAttributeKey.MODEL] = model
        for key in ("finish_reason", "cached", "generation_ms"):
            if key in response.metadata:
                attributes[key] = response.metadata[key]
        spans.append(
            SpanParts(
                3,
                "generate",
                SpanType.LLM,
                split_ns,
                end_ns,
                {"question": sample.user_input, "contexts": len(response.retrieved_contexts)},
                response.response,
                attributes,
            )
        )
    assessments: list[AssessmentParts] = []
    not_applicable: dict[str, list[str]] = {}
    source_of = {s.name: s.source for s in specs}
    for name in assessed if assessed is not None else assessed_columns(specs):
        value = values.get(name, MetricValue.nan("missing"))
        if is_not_applicable(value):
            not_applicable.setdefault(str(value.reason), []).append(name)
            continue
        source = source_of.get(name)
        record = (audit or {}).get(source.audit_key) if source is not None else None
        source_type, source_id = assessment_source(source)
        valid = value.is_valid
        assessments.append(
            AssessmentParts(
                name,
                float(value.value) if valid else None,
                False,
                None if valid else str(value.reason or "nan"),
                rationale(value, record, source.rationale_key if source is not None else None),
                source_type,
                source_id,
            )
        )
    if sample.reference:
        assessments.append(
            AssessmentParts(
                EXPECTATION_NAME,
                sample.reference,
                True,
                None,
                None,
                AssessmentSourceType.HUMAN,
                "dataset",
            )
        )
    tags = {TraceTagKey.TRACE_NAME: TRACE_NAME, "question_id": sample.id}
    if sample.question_type:
        tags["question_type"] = sample.question_type
    if not sample.answerable:  # metrics skip or score these differently (scorers read it)
        tags["answerable"] = "false"
    if failed:
        tags["error"] = f"{response.error}: {response.error_message or ''}"[:250]
    if not_applicable:
        tags[NOT_APPLICABLE_TAG] = "; ".join(
            f"{reason}: {', '.join(names)}" for reason, names in sorted(not_applicable.items())
        )[:_TAG_CHARS]
    return TraceParts(
        otel_trace_id=otel_trace_id,
        trace_id=trace_id,
        request_time=start_ns // 1_000_000,
        execution_duration=total_ns // 1_000_000,
        failed=failed,
        request_preview=json.dumps({"question": sample.user_input}, ensure_ascii=False)[
            :_PREVIEW_CHARS
        ],
        response_preview=(answer or "")[:_PREVIEW_CHARS],
        client_request_id=sample.id,
        run_id=run_id,
        tags=tags,
        spans=spans,
        assessments=assessments,
    )


def trace_metadata(parts: TraceParts) -> dict[str, str]:
    """A trace's metadata: MLflow's trace schema version and the run it belongs to."""
    return {
        TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
        TraceMetadataKey.SOURCE_RUN: parts.run_id,
    }


def _documents(response: RagResponse) -> list[dict[str, Any]]:
    """The retrieved contexts as :class:`mlflow.entities.Document` dicts (what its
    ``to_dict`` gives, built directly: ``asdict`` deep-copies), rank 1 = best."""
    chunk_ids = response.retrieved_ids or []
    doc_ids = response.retrieved_doc_ids or []
    sources = response.retrieved_sources or []
    docs = []
    for i, text in enumerate(response.retrieved_contexts):
        chunk_id = chunk_ids[i] if i < len(chunk_ids) else None
        if chunk_id and "#" in chunk_id:
            doc_id: str | None = chunk_id.rsplit("#", 1)[0]
        elif chunk_ids:
            doc_id = None  # chunk ids known but not ours: do not guess the document
        else:
            doc_id = doc_ids[i] if i < len(doc_ids) else None
        meta = {"rank": i + 1, "chunk_id": chunk_id, "doc_id": doc_id}
        if i < len(sources):  # which retriever ranked it where (rank.dense, rank.bm25, rerank)
            meta.update(sources[i])
        metadata = {k: v for k, v in meta.items() if v is not None}
        docs.append({"page_content": text, "metadata": metadata, "id": None})
    return docs


def question_keys(samples: Sequence[Sample]) -> list[str]:
    """Each sample's key in :func:`trace_id_for`: its id, with ``#<n>`` appended to the
    ``n``-th repeat of an id already seen (so repeated ids still get distinct traces)."""
    seen: dict[str, int] = {}
    keys = []
    for sample in samples:
        n = seen.get(sample.id, 0)
        seen[sample.id] = n + 1
        keys.append(sample.id if n == 0 else f"{sample.id}#{n}")
    return keys


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` in consecutive slices of at most ``size``."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
