"""One MLflow trace per evaluated question, with the judges' verdicts as assessments.

MLflow 3's GenAI view shows traces: a tree of spans (inputs, outputs, timing) and assessments
on the trace (feedback with a rationale per judge, expectations). After a run has scored every
question, :func:`log_traces` writes one trace per question into the run's experiment, linked to
the run (trace metadata ``mlflow.sourceRun``):

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
  record (:data:`~rag_experiments.metrics.audit.RATIONALE_KEY`, the same shape for every
  backend) after a ``flag: <reason>`` line for a flagged value, source = ``LLM_JUDGE`` with
  the judge's model id for judged columns, ``CODE`` (``rag-experiments``) for the others.

**Which values become assessments.** A trace carries the columns of the LLM-judged metrics
(both backends) and the key metrics (:data:`~rag_experiments.metrics.keys.KEY_METRICS`, e.g.
``nDCG@10``, ``keyword_coverage``) the run computed; every other column stays in the run's
per-query table, which keeps all of them. Of those values:

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

**Idempotent per (run, question).** The trace id is derived from the run id and the question id
(:func:`trace_id_for`), span and assessment ids from the trace id, so the same question of the
same run always makes the same rows. :func:`log_traces` first deletes the traces with those
ids that the store already holds (a run killed while writing them, then resumed, or a retry
after a partial write), then writes them all: whatever was interrupted, one complete trace per
question remains.

**Batching.** MLflow has no bulk call for assessments (``log_feedback`` is one transaction per
value, ``start_trace`` one per trace). Each question's trace is first built in plain values
(:func:`_question_parts`). On a database store (``sqlite:///…``, ``postgresql://…``) the trace,
tag, metadata, assessment and span rows of :data:`TRACES_PER_TRANSACTION` questions are made
from those values directly (no OpenTelemetry span, no MLflow entity: the span content is what
MLflow's ``translate_span_when_storing`` gives for our spans, the LLM cost looked up only for a
model MLflow has a price for) and go in one transaction as multi-row INSERTs on MLflow's own
tables (:func:`_insert_sql`; one ``COPY`` per table on PostgreSQL, :func:`_insert_rows`;
``tests/test_traces.py`` checks both paths store the same rows, column for column). On a
tracking server that runs our app (``mlflow server --app-name rag-experiments``,
:mod:`~rag_experiments.tracking.server_app`; asked once per server,
:func:`_has_batch_endpoint`) the same plain values go as gzip'd JSON,
:data:`TRACES_PER_TRANSACTION` questions per request and :data:`BATCH_IN_FLIGHT` requests at
once, to its batch endpoint (:data:`BATCH_PATH`), which runs that INSERT path on the server's
own database. On any other
tracking server (``http://…``) the values become MLflow's entities (:func:`_entities`; spans
built offline with a private OpenTelemetry tracer, never MLflow's global one, so nothing here
touches the caller's own tracing): each trace with its assessments is one ``StartTraceV3``
request (the server has no batch endpoint for assessments), sent :data:`API_CONCURRENCY` at a
time, and the spans go in ``log_spans`` calls (OTLP ``/v1/traces`` requests) of
:data:`SPANS_PER_CALL` spans.

Traces need a database-backed store (``sqlite:///…``) or a tracking server; a plain folder
store keeps no spans.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, cast

from mlflow.entities import (
    AssessmentError,
    AssessmentSource,
    AssessmentSourceType,
    Expectation,
    Feedback,
    LiveSpan,
    Span,
    SpanType,
    TraceInfo,
    TraceLocation,
    TraceState,
)
from mlflow.tracing.client import TracingClient
from mlflow.tracing.constant import (
    TRACE_SCHEMA_VERSION,
    TRACE_SCHEMA_VERSION_KEY,
    SpanAttributeKey,
    SpansLocation,
    TokenUsageKey,
    TraceMetadataKey,
    TraceTagKey,
)
from mlflow.tracing.otel.translation import sanitize_attributes
from mlflow.tracing.utils import (
    calculate_cost_by_model_and_token_usage,
    dump_span_attribute_value,
    encode_span_id,
    generate_mlflow_trace_id_from_otel_trace_id,
)
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator

from rag_experiments.errors import TrackingError
from rag_experiments.llm.errors import JUDGE_ERROR_REASONS
from rag_experiments.metrics.audit import RATIONALE_KEY
from rag_experiments.metrics.keys import KEY_METRICS
from rag_experiments.metrics.scheduler import JudgedRowMetric
from rag_experiments.protocols import Metric
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.tracking.batch_http import encode_gzip_json, post_gzip_json

log = logging.getLogger(__name__)

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
SPANS_PER_CALL = 600
"""Spans per ``log_spans`` call (one transaction, or one OTLP request on a server; contexts
make spans large)."""
API_CONCURRENCY = 8
"""Requests in flight at once to a tracking server (each trace is one ``StartTraceV3``)."""
BATCH_IN_FLIGHT = 2
"""Batch requests in flight at once to a server running our app, so the server reads and
builds one chunk while the database writes the other (measured: the traces phase of
``bench/logging_throughput.py``'s logging, 345 questions, to the server+plugin over
PostgreSQL: 2.81 s with one request in flight, 1.93 s with two, 1.83 s with three; medians of
three rounds in turns with sqlite, 1.52 s, load ~4)."""

_PREVIEW_CHARS = 1000
_TAG_CHARS = 4000


class _SeededIds(IdGenerator):
    """OpenTelemetry ids derived from a seed: the trace id set by :meth:`seed` (per thread),
    span ids hashed from it and a counter, so a trace rebuilt from the same question has the
    same ids."""

    def __init__(self) -> None:
        self._local = threading.local()

    def seed(self, otel_trace_id: int) -> None:
        self._local.trace_id = otel_trace_id
        self._local.spans = 0

    def generate_trace_id(self) -> int:
        return int(self._local.trace_id)

    def generate_span_id(self) -> int:
        self._local.spans += 1
        return _span_id(self._local.trace_id, self._local.spans)


def _span_id(otel_trace_id: int, n: int) -> int:
    """The OpenTelemetry id of the ``n``-th span (1 = the root) of a trace."""
    digest = hashlib.blake2b(f"{otel_trace_id:032x}/{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


_IDS = _SeededIds()
_TRACER = TracerProvider(id_generator=_IDS, resource=Resource.get_empty()).get_tracer(
    "rag_experiments.tracking.traces"
)
"""A tracer with no span processor (spans built here are never exported by OpenTelemetry) and
no resource attributes (MLflow would store them as trace tags: ``service.name`` …)."""


def _otel_trace_id(run_id: str, question_key: str) -> int:
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
    return generate_mlflow_trace_id_from_otel_trace_id(_otel_trace_id(run_id, question_key))


@dataclass(frozen=True)
class ColumnSource:
    """Who computed a metric column.

    Attributes:
        source_type: ``LLM_JUDGE`` or ``CODE`` (:class:`mlflow.entities.AssessmentSourceType`).
        source_id: The judge's model id, or :data:`CODE_SOURCE_ID`.
        audit_key: Name of the metric whose judge audit record explains the column (the key
            in ``judge_audit.jsonl`` rows), or None.
    """

    source_type: str
    source_id: str
    audit_key: str | None = None


_CODE = ColumnSource(AssessmentSourceType.CODE, CODE_SOURCE_ID)


def column_sources(metrics: Sequence[Metric]) -> dict[str, ColumnSource]:
    """The source of every metric column: the judge model of LLM-judged metrics, code otherwise.

    Args:
        metrics: The run's metrics.

    Returns:
        ``{column: ColumnSource}`` for every declared column.
    """
    out: dict[str, ColumnSource] = {}
    for metric in metrics:
        judged = metric.per_row
        model = ""
        judge = cast(JudgedRowMetric, metric).judge if judged else None
        if judge is not None:
            model = str(judge.describe().get("model", ""))
        for spec in metric.specs():
            if judged:
                out[spec.name] = ColumnSource(
                    AssessmentSourceType.LLM_JUDGE, model or "judge", str(metric.name)
                )
            else:
                out[spec.name] = _CODE
    return out


def assessed_columns(specs: Sequence[MetricSpec], sources: Mapping[str, ColumnSource]) -> list[str]:
    """The columns that become trace assessments: LLM-judged ones and the key metrics.

    Args:
        specs: The run's metric columns, in output order.
        sources: Who computed each column (:func:`column_sources`).

    Returns:
        Column names in ``specs`` order.
    """
    keys = set(KEY_METRICS)
    return [
        s.name
        for s in specs
        if s.name in keys
        or sources.get(s.name, _CODE).source_type == AssessmentSourceType.LLM_JUDGE
    ]


def is_not_applicable(value: MetricValue) -> bool:
    """True for a NaN by design (its reason is not in :data:`FAILURE_REASONS`)."""
    return not value.is_valid and value.reason not in FAILURE_REASONS


def rationale(value: MetricValue, record: Mapping[str, Any] | None) -> str | None:
    """A readable reason for one value: the explanation lines of the judge's audit record
    (:data:`~rag_experiments.metrics.audit.RATIONALE_KEY`), after ``NaN: <reason>`` for a NaN
    or ``flag: <reason>`` for a flagged value.

    Args:
        value: The cell.
        record: The judged metric's audit record of this question, or None for code metrics.

    Returns:
        One or more lines, or None when a code metric's value needs no reason.
    """
    lines: list[str] = []
    if not value.is_valid:
        lines.append(f"NaN: {value.reason}")
    elif value.reason:
        lines.append(f"flag: {value.reason}")
    lines.extend(str(line) for line in (record or {}).get(RATIONALE_KEY) or [])
    return "\n".join(lines) or None


def feedback(
    name: str, value: MetricValue, source: ColumnSource, record: Mapping[str, Any] | None
) -> Feedback:
    """One metric value as an MLflow feedback: the float, or no value and an error whose code
    is the NaN reason; rationale from :func:`rationale`; source from ``source``."""
    why = rationale(value, record)
    src = AssessmentSource(source_type=source.source_type, source_id=source.source_id)
    if value.is_valid:
        return Feedback(name=name, value=float(value.value), source=src, rationale=why)
    error = AssessmentError(error_code=str(value.reason or "nan"), error_message=why)
    return Feedback(name=name, value=None, error=error, source=src, rationale=why)


def _span(
    name: str,
    span_type: str,
    trace_id: str | None,
    parent: Any,
    start_ns: int,
    end_ns: int,
    inputs: Any,
    outputs: Any,
    attributes: Mapping[str, Any] | None = None,
    error: str | None = None,
) -> tuple[Any, Span]:
    """One finished span (its OpenTelemetry span, to parent children on, and MLflow's copy);
    ``trace_id`` None for a root span (the trace id is then made from its OpenTelemetry id)."""
    context = otel_trace.set_span_in_context(parent) if parent is not None else None
    raw = _TRACER.start_span(name, context=context, start_time=start_ns)
    if trace_id is None:
        trace_id = generate_mlflow_trace_id_from_otel_trace_id(raw.get_span_context().trace_id)
    span = LiveSpan(raw, trace_id, span_type)
    span.set_inputs(inputs)
    span.set_outputs(outputs)
    span.set_attributes(dict(attributes or {}))
    span.set_status("ERROR" if error else "OK")
    raw.end(end_time=end_ns)
    return raw, span.to_immutable_span()


def question_trace(
    sample: Sample,
    response: RagResponse,
    values: Mapping[str, MetricValue],
    specs: Sequence[MetricSpec],
    *,
    sources: Mapping[str, ColumnSource],
    audit: Mapping[str, Any] | None,
    experiment_id: str,
    run_id: str,
    model: str | None,
    start_ns: int,
    question_key: str | None = None,
    assessed: Sequence[str] | None = None,
) -> tuple[TraceInfo, list[Span]]:
    """The trace of one question (see the module docstring for its layout and which values
    become assessments).

    Args:
        sample: The question.
        response: The target's answer.
        values: Its metric values by column.
        specs: The run's metric columns, in output order (the assessed ones become feedback).
        sources: Who computed each column (:func:`column_sources`).
        audit: The question's row of ``judge_audit.jsonl`` (``{metric name: record}``), if any.
        experiment_id: The run's experiment.
        run_id: The run the trace belongs to.
        model: The generator's model id (None: unknown).
        start_ns: Start time of the trace, ns since the epoch; the spans last
            ``response.latency_ms`` (split into retrieval and generation when the target
            recorded ``generation_ms``).
        question_key: The question's key in :func:`trace_id_for` (default ``sample.id``).
        assessed: :func:`assessed_columns` of ``specs`` and ``sources`` (computed when None;
            :func:`log_traces` computes it once per run).

    Returns:
        ``(trace info with assessments, spans)``; the ids depend only on ``run_id`` and the
        question key.
    """
    parts = _question_parts(
        sample,
        response,
        values,
        specs,
        sources=sources,
        audit=audit,
        run_id=run_id,
        model=model,
        start_ns=start_ns,
        question_key=question_key,
        assessed=assessed,
    )
    return _entities(parts, experiment_id)


@dataclass
class _SpanParts:
    """One span of a question's trace in plain values (the ``n``-th span made, 1 = the root,
    id :func:`_span_id`); its parent is the root."""

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
class _AssessmentParts:
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
class _TraceParts:
    """A question's trace in plain values: what MLflow's entities (:func:`_entities`) and
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
    spans: list[_SpanParts]
    assessments: list[_AssessmentParts]


def _assessment_id(trace_id: str, name: str) -> str:
    return "a-" + hashlib.blake2b(f"{trace_id}/{name}".encode(), digest_size=16).hexdigest()


def _question_parts(
    sample: Sample,
    response: RagResponse,
    values: Mapping[str, MetricValue],
    specs: Sequence[MetricSpec],
    *,
    sources: Mapping[str, ColumnSource],
    audit: Mapping[str, Any] | None,
    run_id: str,
    model: str | None,
    start_ns: int,
    question_key: str | None = None,
    assessed: Sequence[str] | None = None,
) -> _TraceParts:
    """The trace of one question in plain values (arguments as :func:`question_trace`)."""
    otel_trace_id = _otel_trace_id(run_id, question_key or sample.id)
    trace_id = generate_mlflow_trace_id_from_otel_trace_id(otel_trace_id)
    total_ns = int(max(response.latency_ms, 0.0) * 1e6)
    end_ns = start_ns + total_ns
    generation_ns = int(float(response.metadata.get("generation_ms", 0.0)) * 1e6)
    split_ns = max(start_ns, end_ns - min(generation_ns, total_ns))
    failed = response.error is not None
    answer = None if response.no_response else response.response
    spans = [
        _SpanParts(
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
        _SpanParts(
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
            _SpanParts(
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
    assessments: list[_AssessmentParts] = []
    not_applicable: dict[str, list[str]] = {}
    for name in assessed if assessed is not None else assessed_columns(specs, sources):
        value = values.get(name, MetricValue.nan("missing"))
        if is_not_applicable(value):
            not_applicable.setdefault(str(value.reason), []).append(name)
            continue
        source = sources.get(name, _CODE)
        record = (audit or {}).get(source.audit_key) if source.audit_key else None
        valid = value.is_valid
        assessments.append(
            _AssessmentParts(
                name,
                float(value.value) if valid else None,
                False,
                None if valid else str(value.reason or "nan"),
                rationale(value, record),
                source.source_type,
                source.source_id,
            )
        )
    if sample.reference:
        assessments.append(
            _AssessmentParts(
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
    return _TraceParts(
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


def _metadata(parts: _TraceParts) -> dict[str, str]:
    return {
        TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
        TraceMetadataKey.SOURCE_RUN: parts.run_id,
    }


def _entities(parts: _TraceParts, experiment_id: str) -> tuple[TraceInfo, list[Span]]:
    """MLflow's trace info (with assessments) and spans of one question's trace."""
    _IDS.seed(parts.otel_trace_id)
    root_raw = None
    spans: list[Span] = []
    for part in parts.spans:  # made in order: the ids follow _span_id(trace, part.n)
        raw, span = _span(
            part.name,
            part.span_type,
            parts.trace_id,
            root_raw,
            part.start_ns,
            part.end_ns,
            part.inputs,
            part.outputs,
            part.attributes,
            part.error,
        )
        root_raw = root_raw or raw
        spans.append(span)
    assessments: list[Any] = []
    for a in parts.assessments:
        src = AssessmentSource(source_type=a.source_type, source_id=a.source_id)
        entity: Any
        if a.expectation:
            entity = Expectation(name=a.name, value=a.value, source=src)
        elif a.error_code is None:
            entity = Feedback(name=a.name, value=a.value, source=src, rationale=a.rationale)
        else:
            error = AssessmentError(error_code=a.error_code, error_message=a.rationale)
            entity = Feedback(
                name=a.name, value=None, error=error, source=src, rationale=a.rationale
            )
        entity.trace_id = parts.trace_id
        entity.span_id = spans[0].span_id
        entity.assessment_id = _assessment_id(parts.trace_id, a.name)
        assessments.append(entity)
    info = TraceInfo(
        trace_id=parts.trace_id,
        trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=parts.request_time,
        execution_duration=parts.execution_duration,
        state=TraceState.ERROR if parts.failed else TraceState.OK,
        request_preview=parts.request_preview,
        response_preview=parts.response_preview,
        client_request_id=parts.client_request_id,
        trace_metadata=_metadata(parts),
        tags=dict(parts.tags),
        assessments=assessments,
    )
    return info, spans


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


@dataclass(frozen=True)
class TraceLogStats:
    """What :func:`log_traces` wrote and how long it took.

    Attributes:
        traces: Traces written.
        spans: Spans written.
        assessments: Feedback and expectations written.
        seconds: Wall time of building and writing, seconds.
        replaced: Traces of the same questions found in the store and replaced (a resumed or
            retried run), 0 normally.
    """

    traces: int
    spans: int
    assessments: int
    seconds: float
    replaced: int = 0


def log_traces(
    tracking_uri: str,
    experiment_id: str,
    run_id: str,
    samples: Sequence[Sample],
    responses: Sequence[RagResponse],
    values: Sequence[Mapping[str, MetricValue]],
    specs: Sequence[MetricSpec],
    *,
    sources: Mapping[str, ColumnSource],
    audit: Sequence[Mapping[str, Any]] = (),
    model: str | None = None,
) -> TraceLogStats:
    """Write one trace per question into ``experiment_id``, linked to ``run_id``, replacing
    the traces of the same (run, question) already in the store (see the module docstring:
    layout, assessed values, idempotency, batching per store).

    Args:
        tracking_uri: Resolved tracking URI (a database store or a server).
        experiment_id: The run's experiment id.
        run_id: The run the traces belong to.
        samples: The questions, in row order.
        responses: One response per sample.
        values: One ``{column: MetricValue}`` per sample.
        specs: The metric columns (the judged and key ones become feedback).
        sources: Who computed each column (:func:`column_sources`).
        audit: ``judge_audit.jsonl`` rows (matched to samples by ``id``).
        model: The generator's model id, for the LLM spans.

    Returns:
        The counts and the wall time.

    Raises:
        TrackingError: ``tracking_uri`` is a folder store (it keeps no spans).
        MlflowException: The store refused a trace or the spans (the caller decides whether
            that fails the run); calling again writes everything again, without duplicates.
    """
    started = time.perf_counter()
    by_id = {str(row.get("id")): row for row in audit}
    client = TracingClient(tracking_uri)
    if _is_folder_store(client.store):
        raise TrackingError(
            f"the folder store {tracking_uri} keeps no trace spans: log to a database store "
            "(tracking.uri=sqlite:///mlruns.db) or a server, or set tracking.traces=false"
        )
    keys = question_keys(samples)
    writer = _open_writer(tracking_uri, client, experiment_id)
    replaced = writer.delete_existing([trace_id_for(run_id, key) for key in keys])
    now_ns = time.time_ns()
    n_spans = n_assessments = 0
    rows = list(zip(samples, responses, values, keys, strict=True))
    assessed = assessed_columns(specs, sources)
    try:
        for first in range(0, len(rows), TRACES_PER_TRANSACTION):  # built and written in chunks
            chunk: list[_TraceParts] = []
            for i, (sample, response, row_values, key) in enumerate(
                rows[first : first + TRACES_PER_TRANSACTION], start=first
            ):
                parts = _question_parts(
                    sample,
                    response,
                    row_values,
                    specs,
                    sources=sources,
                    audit=by_id.get(sample.id),
                    run_id=run_id,
                    model=model,
                    start_ns=now_ns + 1_000 * i,  # keep the questions' order in the UI's list
                    question_key=key,
                    assessed=assessed,
                )
                chunk.append(parts)
                n_spans += len(parts.spans)
                n_assessments += len(parts.assessments)
            writer.write(chunk)
    finally:
        writer.close()
    replaced += writer.replaced
    elapsed = time.perf_counter() - started
    log.info(
        "logged %d traces (%d spans, %d assessments%s) in %.1f s",
        len(rows),
        n_spans,
        n_assessments,
        f", {replaced} replaced" if replaced else "",
        elapsed,
    )
    return TraceLogStats(len(rows), n_spans, n_assessments, elapsed, replaced)


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class _ApiTraceWriter:
    """Writes traces with MLflow's client API (a tracking server, or a store this module does
    not know), :data:`API_CONCURRENCY` requests at a time: one ``StartTraceV3`` per trace
    (with its assessments), then the chunk's spans in ``log_spans`` calls (OTLP on a
    server)."""

    replaced = 0
    """Traces replaced while writing (none: :meth:`delete_existing` replaces them first)."""

    def __init__(self, client: TracingClient, experiment_id: str) -> None:
        self.client = client
        self.experiment_id = experiment_id
        self.pool = ThreadPoolExecutor(API_CONCURRENCY, thread_name_prefix="traces")

    def delete_existing(self, trace_ids: Sequence[str]) -> int:
        """Delete the traces with these ids (none on a first write); returns how many."""
        client = self.client
        return int(
            sum(
                self.pool.map(
                    lambda chunk: client.delete_traces(self.experiment_id, trace_ids=list(chunk)),
                    _chunks(trace_ids, TRACES_PER_TRANSACTION),
                )
            )
        )

    def write(self, chunk: Sequence[_TraceParts]) -> None:
        """Trace infos (with assessments) first, then their spans."""
        built = [_entities(parts, self.experiment_id) for parts in chunk]
        list(self.pool.map(self.client.start_trace, [info for info, _ in built]))
        flat = [span for _, trace_spans in built for span in trace_spans]
        list(
            self.pool.map(
                lambda spans: self.client.log_spans(self.experiment_id, list(spans)),
                _chunks(flat, SPANS_PER_CALL),
            )
        )

    def close(self) -> None:
        """Stop the request threads."""
        self.pool.shutdown()


BATCH_PATH = "/ajax-api/3.0/rag-exp/traces/batch"
"""The batch endpoint of ``mlflow server --app-name rag-experiments``
(:mod:`~rag_experiments.tracking.server_app`): ``GET`` says whether it is there and can write
(:func:`batch_status`), ``POST`` writes a gzip'd JSON chunk of traces (:func:`write_batch`)."""
BATCH_PROTOCOL = 1
"""Version of the batch endpoint's JSON (the client and the server must agree; a server with
another version is not used: the client falls back to MLflow's own API)."""


class TraceIdConflictError(TrackingError):
    """A trace id to write already belongs to another experiment of the store (the batch
    endpoint answers it with 409); traces are never overwritten across experiments."""


def _message(response: Any) -> str:
    """The ``message`` of an error answer in MLflow's JSON shape, else its text (300 chars)."""
    try:
        return str(response.json().get("message", ""))[:300]
    except (ValueError, AttributeError):
        return str(response.text)[:300]


_PLUGIN_PROBED: dict[str, bool] = {}
_PLUGIN_LOCK = threading.Lock()


def _open_writer(
    tracking_uri: str, client: TracingClient, experiment_id: str
) -> _SqlTraceWriter | _PluginTraceWriter | _ApiTraceWriter:
    """The fastest writer ``tracking_uri`` allows: multi-row INSERTs into a database store,
    the batch endpoint of a server running our app (:func:`_has_batch_endpoint`), else MLflow's
    public per-trace API."""
    from mlflow.store.tracking.rest_store import RestStore

    store = client.store
    if isinstance(store, RestStore):
        if _has_batch_endpoint(store):
            return _PluginTraceWriter(store, experiment_id)
        return _ApiTraceWriter(client, experiment_id)
    return _SqlTraceWriter.open(store, experiment_id) or _ApiTraceWriter(client, experiment_id)


def _has_batch_endpoint(store: Any) -> bool:
    """Whether the server behind ``store`` (a ``RestStore``) runs our app with a store it can
    write to (``GET`` :data:`BATCH_PATH`); asked once per server URL and process.

    Raises:
        MlflowException: The server did not answer (a connection error or HTTP 5xx: retried by
            the caller's :class:`~rag_experiments.tracking.resilience.Outage`).
    """
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    creds = store.get_host_creds()
    with _PLUGIN_LOCK:
        known = _PLUGIN_PROBED.get(creds.host)
    if known is not None:
        return known
    response = http_request(creds, BATCH_PATH, "GET")
    if response.status_code >= 500:
        verify_rest_response(response, BATCH_PATH)  # raises: transient, asked again later
    found = False
    if response.status_code == 200:
        try:
            body = response.json()
        except ValueError:
            body = {}
        found = body.get("protocol") == BATCH_PROTOCOL and bool(body.get("writable"))
        if not found:
            log.info("MLflow server %s: batch endpoint %s not usable here", creds.host, body)
    with _PLUGIN_LOCK:
        _PLUGIN_PROBED[creds.host] = found
    log.info(
        "MLflow server %s: %s",
        creds.host,
        "trace batch endpoint found (mlflow server --app-name rag-experiments)"
        if found
        else "no trace batch endpoint; traces go through MLflow's per-trace API (slower)",
    )
    return found


def parts_to_json(parts: _TraceParts) -> dict[str, Any]:
    """One question's trace as the batch endpoint's JSON: the fields of :class:`_TraceParts`
    by name, each span and assessment as the list of its fields in declaration order (a
    trace carries ~18 assessments: no repeated keys to encode, send and parse)."""
    out = dict(vars(parts))
    out["spans"] = [list(vars(span).values()) for span in parts.spans]
    out["assessments"] = [list(vars(a).values()) for a in parts.assessments]
    return out


def parts_from_json(data: Mapping[str, Any]) -> _TraceParts:
    """The inverse of :func:`parts_to_json`.

    Raises:
        TypeError: A field is missing or unknown.
    """
    fields = dict(data)
    fields["spans"] = [_SpanParts(*span) for span in fields["spans"]]
    fields["assessments"] = [_AssessmentParts(*a) for a in fields["assessments"]]
    return _TraceParts(**fields)


def batch_status(store: Any) -> dict[str, Any]:
    """What ``GET`` :data:`BATCH_PATH` answers: the protocol, and whether ``store`` (the
    server's backend store) is a database store the multi-row INSERT path knows."""
    import mlflow

    return {
        "protocol": BATCH_PROTOCOL,
        "writable": _SqlTraceWriter.supports(store),
        "mlflow": mlflow.__version__,
    }


def write_batch(store: Any, payload: Mapping[str, Any]) -> dict[str, int]:
    """Write one batch request's traces into ``store`` (the server side of the batch endpoint):
    the traces of the same ids already stored are deleted first, so a request retried after
    its answer was lost writes the same rows again, not twice; then all of them go in ONE
    transaction of multi-row INSERTs (:func:`_insert_sql`, the path of a client logging to
    the database directly).

    Args:
        store: The server's backend store (``mlflow.server.handlers._get_tracking_store()``).
        payload: ``{"protocol": 1, "experiment_id": str, "traces": [parts_to_json(...)]}``.

    Returns:
        ``{"traces": written, "replaced": deleted first}``.

    Raises:
        ValueError: Another protocol, or the store is not a database store.
        TypeError, KeyError: A malformed trace.
        TraceIdConflictError: A trace id belongs to another experiment (nothing written).
    """
    if payload.get("protocol") != BATCH_PROTOCOL:
        raise ValueError(
            f"batch protocol {payload.get('protocol')!r}, this server speaks {BATCH_PROTOCOL}: "
            "install the same rag-experiments version on the server and the clients"
        )
    writer = _SqlTraceWriter.open(store, str(payload["experiment_id"]))
    if writer is None:
        raise ValueError("the server's backend store is not a database store this app can write")
    chunk = [parts_from_json(t) for t in payload["traces"]]
    if not chunk:
        return {"traces": 0, "replaced": 0}
    replaced = writer.delete_existing([p.trace_id for p in chunk])
    writer.write(chunk)
    return {"traces": len(chunk), "replaced": replaced}


class _PluginTraceWriter:
    """Sends chunks of traces to the batch endpoint of a server running our app
    (:mod:`~rag_experiments.tracking.server_app`): one gzip'd JSON request per chunk, which the
    server writes in one transaction, up to :data:`BATCH_IN_FLIGHT` requests at once while the
    next chunk is built.
    Each request replaces the traces of its ids, so :meth:`delete_existing` has nothing to do
    and a retried request doubles nothing (the chunks of one call hold distinct ids, so
    requests in flight together never write the same trace)."""

    replaced = 0

    def __init__(self, store: Any, experiment_id: str) -> None:
        self.store = store
        self.experiment_id = experiment_id
        self.pool = ThreadPoolExecutor(BATCH_IN_FLIGHT, thread_name_prefix="trace-batch")
        self.pending: deque[Future[dict[str, Any]]] = deque()
        self.per_request = TRACES_PER_TRANSACTION
        """Traces per request: halved each time the server answers 413."""

    def delete_existing(self, trace_ids: Sequence[str]) -> int:
        """Nothing: each batch request replaces the traces of its own ids."""
        return 0

    def write(self, chunk: Sequence[_TraceParts]) -> None:
        """Send ``chunk`` in the background, once fewer than :data:`BATCH_IN_FLIGHT` earlier
        requests are unanswered (the server writes one chunk while it reads the next and the
        caller builds a third); a failed earlier request raises here, once the other requests
        in flight have ended (:meth:`_settle`)."""
        traces = [parts_to_json(p) for p in chunk]
        self._drain(BATCH_IN_FLIGHT - 1)
        self.pending.append(self.pool.submit(self._send, traces))

    def _send(self, traces: list[dict[str, Any]]) -> dict[str, Any]:
        """POST ``traces`` in requests of at most :attr:`per_request` traces; a request the
        server answers 413 (over its ``RAG_EXP_TRACE_BATCH_MAX_MB``) is sent again in halves,
        and later requests keep the smaller size.

        Returns:
            ``{"traces": written, "replaced": deleted first}`` summed over the requests.

        Raises:
            TrackingError: The server refused ONE trace as too large.
            MlflowException: Any other failed request (5xx and connection errors are retried
                by the caller as an outage; 409: a trace id of another experiment).
        """
        from mlflow.utils.rest_utils import verify_rest_response

        total = {"traces": 0, "replaced": 0}
        first = 0
        size = self.per_request
        while first < len(traces):
            piece = traces[first : first + size]
            response = self._post(self._encode(piece))
            if response.status_code == 413:
                if len(piece) == 1:
                    raise TrackingError(
                        f"the MLflow server at {self.store.get_host_creds().host} refused one "
                        f"trace as too large ({_message(response)}): raise "
                        "RAG_EXP_TRACE_BATCH_MAX_MB in the server's environment and restart it"
                    )
                size = max(1, len(piece) // 2)
                with _PLUGIN_LOCK:  # the later chunks too (two threads may both halve)
                    self.per_request = min(self.per_request, size)
                log.info(
                    "trace batch of %d traces too large for the server (413): sending %d at a time",
                    len(piece),
                    size,
                )
                continue
            answer = verify_rest_response(response, BATCH_PATH).json()
            total["traces"] += int(answer.get("traces", 0))
            total["replaced"] += int(answer.get("replaced", 0))
            first += len(piece)
        return total

    def _encode(self, traces: list[dict[str, Any]]) -> bytes:
        """The gzip'd JSON body of one request."""
        payload = {
            "protocol": BATCH_PROTOCOL,
            "experiment_id": str(self.experiment_id),
            "traces": traces,
        }
        return encode_gzip_json(payload)

    def _post(self, data: bytes) -> Any:
        """One POST of ``data`` (a ``requests.Response``; MLflow's retries of connection
        errors and 5xx apply)."""
        return post_gzip_json(self.store, BATCH_PATH, data)

    def _drain(self, keep: int) -> None:
        """Wait for the oldest requests in flight, in the order they were sent, until at most
        ``keep`` are left; the first failure is raised once the others have ended
        (:meth:`_settle`)."""
        try:
            while len(self.pending) > keep:
                future = self.pending.popleft()
                self.replaced += int(future.result().get("replaced", 0))
        except BaseException as exc:
            self._settle(exc)
            raise

    def _settle(self, exc: BaseException) -> None:
        """After a failure ``exc`` of the oldest request: wait for the requests still in flight
        and drop their outcome, so ``exc`` alone is raised (a later failure chained onto it
        would change what the caller's retry decides: :func:`~rag_experiments.tracking.
        resilience.is_transient` reads the chain) and nothing is left running when the caller
        retries the call. On Ctrl-C (not an ``Exception``) nothing is waited for: requests not
        yet started are cancelled."""
        if isinstance(exc, Exception):
            wait(self.pending)
        else:
            for future in self.pending:
                future.cancel()
        self.pending.clear()

    def close(self) -> None:
        """Wait for every request in flight, then raise the first failure among them, in the
        order they were sent (none is left running: a retry of the whole call never races a
        request of this one)."""
        try:
            self._drain(0)
        finally:
            self.pool.shutdown(wait=False, cancel_futures=True)  # settled: nothing runs


def _is_folder_store(store: Any) -> bool:
    """True for MLflow's folder store (``./mlruns``), whose ``log_spans`` is not implemented."""
    try:
        from mlflow.store.tracking.file_store import FileStore
    except ImportError:  # removed from MLflow: no folder store
        return False
    return isinstance(store, FileStore)


class _SqlTraceWriter:
    """Multi-row INSERTs of trace infos, tags, metadata and assessments into the tables of
    MLflow's database store (see :func:`_insert_sql`)."""

    replaced = 0
    """Traces replaced while writing (none: :meth:`delete_existing` replaces them first)."""

    def __init__(self, store: Any, experiment: Any, models: Any) -> None:
        import sqlalchemy

        self.store = store
        self.experiment = experiment
        self.models = models
        self._sqlalchemy = sqlalchemy
        assessments = models.SqlAssessments
        self._assessment_columns = {
            a.key: a.columns[0].key for a in sqlalchemy.inspect(assessments).column_attrs
        }

    @staticmethod
    def _models(store: Any) -> Any:
        """MLflow's table models when ``store`` is a database store this code knows, else None
        (a server, another MLflow layout, trace rollups on)."""
        from mlflow.store.tracking.rest_store import RestStore

        if isinstance(store, RestStore):  # a server: skip the SQL store's imports
            return None
        try:
            from mlflow.store.tracking.dbmodels import models
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
            from mlflow.store.tracking.utils.sql_trace_rollups import rollups_enabled
            from mlflow.store.tracking.utils.trace_analytics import (  # noqa: F401 - layout check
                PROMOTED_TRACE_METADATA_KEYS,
                analytics_columns_from_metadata,
                assessment_aggregate,
                validate_trace_name,
            )
        except ImportError:  # another MLflow layout
            return None
        if type(store) is not SqlAlchemyStore or rollups_enabled():
            return None
        return models

    @classmethod
    def supports(cls, store: Any) -> bool:
        """Whether ``store`` is a database store this writer can write to."""
        return cls._models(store) is not None

    @classmethod
    def open(cls, store: Any, experiment_id: str) -> _SqlTraceWriter | None:
        """A writer for ``store`` (a client's store, or a tracking server's own backend store
        in :mod:`~rag_experiments.tracking.server_app`), or None when :meth:`supports` says no:
        then the API is used."""
        models = cls._models(store)
        if models is None:
            return None
        return cls(store, store.get_experiment(experiment_id), models)

    def delete_existing(self, trace_ids: Sequence[str]) -> int:
        """Delete the traces among ``trace_ids`` that this writer's experiment holds (with
        MLflow's own ``delete_traces``, which removes their spans and assessments); returns
        how many.

        Raises:
            TraceIdConflictError: One of ``trace_ids`` belongs to another experiment (it is
                never overwritten; nothing is deleted).
        """
        table = self.models.SqlTraceInfo.__table__
        experiment_id = int(self.experiment.experiment_id)
        found: list[str] = []
        elsewhere: dict[str, int] = {}
        with self.store.ManagedSessionMaker() as session:
            for chunk in _chunks(trace_ids, 500):
                query = self._sqlalchemy.select(table.c.request_id, table.c.experiment_id).where(
                    table.c.request_id.in_(list(chunk))
                )
                for trace_id, owner in session.execute(query):
                    if int(owner) == experiment_id:
                        found.append(trace_id)
                    else:
                        elsewhere[trace_id] = int(owner)
        if elsewhere:
            trace_id, owner = next(iter(elsewhere.items()))
            raise TraceIdConflictError(
                f"{len(elsewhere)} trace id(s) of experiment {experiment_id} already exist in "
                f"another experiment (e.g. {trace_id} in experiment {owner}); traces are never "
                "overwritten across experiments: log the run into its own experiment"
            )
        for chunk in _chunks(found, TRACES_PER_TRANSACTION):
            self.store.delete_traces(
                experiment_id=self.experiment.experiment_id,
                max_timestamp_millis=None,
                max_traces=None,
                trace_ids=list(chunk),
            )
        return len(found)

    def write(self, chunk: Sequence[_TraceParts]) -> None:
        """Write the traces of ``chunk`` with their assessments and spans in ONE transaction
        (:func:`_insert_sql`)."""
        _insert_sql(self, chunk)

    def close(self) -> None:
        """Nothing to release (the store's engine is MLflow's)."""


def _insert_sql(writer: _SqlTraceWriter, chunk: Sequence[_TraceParts]) -> None:
    """Write the traces of ``chunk`` with their assessments and spans in ONE transaction of a
    database store.

    MLflow writes one trace per transaction through ORM objects (``start_trace``), then its
    spans (``log_spans``: an upsert, then per-trace updates and tag merges). Here the rows the
    two calls leave behind for a new trace are inserted with one multi-row INSERT per table,
    built from the plain values of each trace (no OpenTelemetry span, no MLflow entity): the
    trace info (with the analytics columns ``start_trace`` derives from metadata and the
    token usage and cost ``log_spans`` aggregates from the spans; payload generation 1, as
    after one ``log_spans``), tags with the artifact location and the spans' location,
    metadata marked finalized, the assessments as ``SqlAssessments.from_mlflow_entity`` maps
    them, and the spans as ``log_spans`` stores them (:func:`_span_rows`). The rollup rebuild
    queue (off unless ``MLFLOW_SQL_TRACE_ROLLUPS_ENABLED``) is not maintained, so with
    rollups on the API is used. ``tests/test_traces.py`` checks that both paths store the
    same rows (re-run it when MLflow is upgraded: this relies on the store's tables and value
    mapping).
    """
    from mlflow.store.tracking.utils.trace_analytics import (
        PROMOTED_TRACE_METADATA_KEYS,
        analytics_columns_from_metadata,
        assessment_aggregate,
        validate_trace_name,
    )

    m = writer.models
    store = writer.store
    span_rows: list[dict[str, Any]] = []
    experiment = writer.experiment
    experiment_id = int(experiment.experiment_id)
    info_rows: list[dict[str, Any]] = []
    tag_rows: list[dict[str, Any]] = []
    metadata_rows: list[dict[str, Any]] = []
    assessment_rows: list[dict[str, Any]] = []
    analytics_keys: set[str] = set()
    columns = writer._assessment_columns
    now_ms = int(time.time() * 1000)
    spans_location = SpansLocation.TRACKING_STORE.value
    for parts in chunk:
        trace_id = parts.trace_id
        metadata = _metadata(parts)
        analytics = analytics_columns_from_metadata(metadata)
        analytics_keys.update(analytics)
        for key in PROMOTED_TRACE_METADATA_KEYS:
            metadata.pop(key, None)
        metadata[TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
        usage = _span_rows(parts, experiment_id, span_rows)
        analytics = {**usage, **analytics}  # start_trace's values take precedence
        analytics_keys.update(usage)
        info_rows.append(
            {
                "db_payload_generation": 1,
                "request_id": trace_id,
                "experiment_id": experiment_id,
                "timestamp_ms": parts.request_time,
                "execution_time_ms": parts.execution_duration,
                "status": (TraceState.ERROR if parts.failed else TraceState.OK).value,
                "client_request_id": parts.client_request_id,
                "request_preview": parts.request_preview,
                "response_preview": parts.response_preview,
                "trace_name": validate_trace_name(parts.tags.get(TraceTagKey.TRACE_NAME)),
                **analytics,
            }
        )
        location = store._get_trace_artifact_location_tag(experiment, trace_id)
        tags = {k: v for k, v in parts.tags.items() if k != TraceTagKey.TRACE_NAME}
        tags[location.key] = location.value
        tags[TraceTagKey.SPANS_LOCATION] = spans_location
        tag_rows.extend({"request_id": trace_id, "key": k, "value": v} for k, v in tags.items())
        metadata_rows.extend(
            {"request_id": trace_id, "key": k, "value": v} for k, v in sorted(metadata.items())
        )
        root_span_id = encode_span_id(_span_id(parts.otel_trace_id, 1))
        for a in parts.assessments:
            row = _assessment_row(a, parts, root_span_id, experiment_id, now_ms)
            row["aggregate_value"], row["is_numeric_value"] = assessment_aggregate(a.value)
            assessment_rows.append({columns[k]: v for k, v in row.items()})
    for row in info_rows:  # one column set for the multi-row INSERT
        for key in analytics_keys:
            row.setdefault(key, None)
    with store.ManagedSessionMaker(read_only=False) as session:
        _insert_rows(session, m.SqlTraceInfo.__table__, info_rows)
        _insert_rows(session, m.SqlTraceTag.__table__, tag_rows)
        _insert_rows(session, m.SqlTraceMetadata.__table__, metadata_rows)
        _insert_rows(session, m.SqlAssessments.__table__, assessment_rows)
        _insert_rows(session, m.SqlSpan.__table__, span_rows)


def _insert_rows(session: Any, table: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (all with the same keys) into ``table`` in ``session``'s transaction.

    On PostgreSQL through psycopg 3 the rows go in one ``COPY table (columns) FROM STDIN``
    (text format, ``psycopg.Copy.write_row``), the values passed through the columns' own
    SQLAlchemy bind processors first: the same rows as the INSERT, in one stream instead of
    one pipelined ``INSERT`` per row, which was half the server's trace time (measured:
    ``bench/logging_throughput.py``). Elsewhere (sqlite), or when a column left out of the rows
    has a Python-side default that ``COPY`` would not apply, one multi-row ``INSERT``.
    """
    if not rows:
        return
    connection = session.connection()
    keys = list(rows[0])
    omitted_defaults = any(c.default is not None for c in table.columns if c.name not in keys)
    dialect = connection.dialect
    if dialect.name != "postgresql" or dialect.driver != "psycopg" or omitted_defaults:
        session.execute(table.insert(), rows)
        return
    processors = [table.c[k].type.bind_processor(dialect) for k in keys]
    columns = ", ".join(dialect.identifier_preparer.quote(table.c[k].name) for k in keys)
    name = dialect.identifier_preparer.format_table(table)
    cursor = connection.connection.driver_connection.cursor()
    with cursor.copy(f"COPY {name} ({columns}) FROM STDIN") as copy:  # noqa: S608 - our names
        for row in rows:
            values = [row[k] for k in keys]
            for i, process in enumerate(processors):
                if process is not None and values[i] is not None:
                    values[i] = process(values[i])
            copy.write_row(values)


@functools.lru_cache(maxsize=64)
def _model_has_price(model: str) -> bool:
    """Whether MLflow's cost lookup knows ``model`` (a probe of 1 prompt token: the lookup
    returns no cost for a model it does not know, whatever the token counts)."""
    usage = {TokenUsageKey.INPUT_TOKENS: 1, TokenUsageKey.OUTPUT_TOKENS: 0}
    return calculate_cost_by_model_and_token_usage(model, usage) is not None


def _span_content(parts: _TraceParts, span: _SpanParts) -> dict[str, Any]:
    """A span as ``translate_span_when_storing`` gives it for our spans: ``Span.to_dict`` of
    the span :func:`_entities` makes (attributes dumped as ``LiveSpan`` dumps them), with
    MLflow's own double-dump sanitising and the LLM cost when the model has a price (none of
    the other OpenTelemetry conventions it translates occur in our attributes)."""
    attributes = {
        SpanAttributeKey.REQUEST_ID: dump_span_attribute_value(parts.trace_id),
        SpanAttributeKey.SPAN_TYPE: dump_span_attribute_value(span.span_type),
        SpanAttributeKey.INPUTS: dump_span_attribute_value(span.inputs),
        SpanAttributeKey.OUTPUTS: dump_span_attribute_value(span.outputs),
    }
    for key, value in span.attributes.items():
        attributes[key] = dump_span_attribute_value(value)
    attributes = sanitize_attributes(attributes)
    usage = span.attributes.get(SpanAttributeKey.CHAT_USAGE)
    model = span.attributes.get(SpanAttributeKey.MODEL)
    if usage and isinstance(model, str) and _model_has_price(model):
        if cost := calculate_cost_by_model_and_token_usage(model, usage):
            attributes[SpanAttributeKey.LLM_COST] = dump_span_attribute_value(cost)
    return {
        "trace_id": base64.b64encode(parts.otel_trace_id.to_bytes(16, "big")).decode(),
        "span_id": base64.b64encode(
            _span_id(parts.otel_trace_id, span.n).to_bytes(8, "big")
        ).decode(),
        "parent_span_id": None
        if span.n == 1
        else base64.b64encode(_span_id(parts.otel_trace_id, 1).to_bytes(8, "big")).decode(),
        "name": span.name,
        "start_time_unix_nano": span.start_ns,
        "end_time_unix_nano": span.end_ns,
        "events": [],
        "status": {
            "code": "STATUS_CODE_ERROR" if span.error else "STATUS_CODE_OK",
            "message": "",
        },
        "attributes": attributes,
        "links": [],
    }


def _span_rows(parts: _TraceParts, experiment_id: int, out: list[dict[str, Any]]) -> dict[str, Any]:
    """Append the ``spans`` rows of one trace to ``out``, as ``SqlAlchemyStore.log_spans``
    writes them; return the trace info's token and cost columns it aggregates from them
    (tree-aware, MLflow's own aggregation)."""
    from mlflow.store.tracking.sqlalchemy_store import (
        _span_aggregation_node,
        _try_parse_json_string,
    )
    from mlflow.store.tracking.utils.trace_analytics import (
        COST_COLUMN_BY_KEY,
        TOKEN_COLUMN_BY_KEY,
        bounded_model_dimension,
        finite_float_or_none,
        token_count_or_none,
    )
    from mlflow.tracing.utils import (
        TraceJSONEncoder,
        aggregate_cost_from_span_nodes,
        aggregate_usage_from_span_nodes,
    )

    usage_nodes = []
    cost_nodes = []
    root_id = encode_span_id(_span_id(parts.otel_trace_id, 1))
    for span in parts.spans:
        span_dict = _span_content(parts, span)
        attributes = span_dict["attributes"]
        span_id = encode_span_id(_span_id(parts.otel_trace_id, span.n))
        parent_id = None if span.n == 1 else root_id
        usage_nodes.append(
            _span_aggregation_node(span_id, parent_id, attributes, SpanAttributeKey.CHAT_USAGE)
        )
        cost_nodes.append(
            _span_aggregation_node(span_id, parent_id, attributes, SpanAttributeKey.LLM_COST)
        )
        cost: dict[str, Any] = {}
        if attributes.get(SpanAttributeKey.LLM_COST):
            try:
                cost = json.loads(attributes[SpanAttributeKey.LLM_COST])
            except (TypeError, ValueError):
                cost = {}
        out.append(
            {
                "trace_id": parts.trace_id,
                "experiment_id": experiment_id,
                "span_id": span_id,
                "parent_span_id": parent_id,
                "name": span.name,
                "type": span.span_type,
                "status": "ERROR" if span.error else "OK",
                "start_time_unix_nano": span.start_ns,
                "end_time_unix_nano": span.end_ns,
                "content": json.dumps(span_dict, cls=TraceJSONEncoder, ensure_ascii=False),
                "input_cost": finite_float_or_none(cost.get("input_cost")),
                "output_cost": finite_float_or_none(cost.get("output_cost")),
                "total_cost": finite_float_or_none(cost.get("total_cost")),
                "model_name": bounded_model_dimension(
                    _try_parse_json_string(attributes.get(SpanAttributeKey.MODEL))
                ),
                "model_provider": bounded_model_dimension(
                    _try_parse_json_string(attributes.get(SpanAttributeKey.MODEL_PROVIDER))
                ),
            }
        )
    columns: dict[str, Any] = {}
    usage = aggregate_usage_from_span_nodes(usage_nodes) or {}
    for key, column in TOKEN_COLUMN_BY_KEY.items():
        if (value := token_count_or_none(usage.get(key))) is not None:
            columns[column] = value
    total_cost = aggregate_cost_from_span_nodes(cost_nodes) or {}
    for key, column in COST_COLUMN_BY_KEY.items():
        if (value := finite_float_or_none(total_cost.get(key))) is not None:
            columns[column] = value
    return columns


def _assessment_row(
    a: _AssessmentParts, parts: _TraceParts, span_id: str, experiment_id: int, now_ms: int
) -> dict[str, Any]:
    """The ``assessments`` row of one assessment, keyed by ``SqlAssessments`` attribute, as
    ``SqlAssessments.from_mlflow_entity`` maps the entity :func:`_entities` makes of it."""
    error = None
    if a.error_code is not None:
        error = json.dumps(
            {"error_code": a.error_code, "error_message": a.rationale, "stack_trace": None}
        )
    return {
        "assessment_id": _assessment_id(parts.trace_id, a.name),
        "trace_id": parts.trace_id,
        "name": a.name,
        "assessment_type": "expectation" if a.expectation else "feedback",
        "value": json.dumps(a.value),
        "error": error,
        "created_timestamp": now_ms,
        "last_updated_timestamp": now_ms,
        "source_type": a.source_type,
        "source_id": a.source_id,
        "run_id": None,
        "span_id": span_id,
        "rationale": None if a.expectation else a.rationale,
        "overrides": None,
        "valid": True,
        "assessment_metadata": None,
        "experiment_id": experiment_id,
        "trace_timestamp_ms": parts.request_time,
    }
