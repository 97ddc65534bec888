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
* one :class:`mlflow.entities.Feedback` per metric value: name = canonical metric name, value =
  the float (None with an ``error`` carrying the reason when NaN), rationale = the judge's
  reasons from the audit record or the NaN reason, source = ``LLM_JUDGE`` with the judge's model
  id for judged columns, ``CODE`` (``rag-experiments``) for the others;
* the reference answer as the :class:`mlflow.entities.Expectation` ``expected_response``.

**Batching.** MLflow has no bulk call for assessments: ``mlflow.log_feedback`` is one
transaction per value (about 25 ms on a sqlite store: 65 metric columns x 1,000 questions would
take half an hour), and ``start_trace`` one transaction per trace with its assessments (40-80
ms each with 65 assessments). So on a database store (``sqlite:///…``) the trace, tag,
metadata and assessment rows of 100 questions go in one transaction (:func:`_insert_sql`,
with MLflow's own row classes and value mapping; 100, so that parallel sweep jobs sharing the
sqlite file never wait long for its write lock), and the spans of all traces in a few
``log_spans`` calls; on a server, traces go through ``start_trace`` one by one. Spans are
built offline with a private OpenTelemetry tracer (never MLflow's global one), so nothing here
touches the caller's own tracing.

Traces need a database-backed store (``sqlite:///…``) or a tracking server; a plain folder
store keeps no spans.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlflow.entities import (
    AssessmentError,
    AssessmentSource,
    AssessmentSourceType,
    Document,
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
    TokenUsageKey,
    TraceMetadataKey,
    TraceTagKey,
)
from mlflow.tracing.utils import generate_mlflow_trace_id_from_otel_trace_id
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider

from rag_experiments.errors import TrackingError
from rag_experiments.metrics.scheduler import JudgedRowMetric
from rag_experiments.protocols import Metric
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

log = logging.getLogger(__name__)

CODE_SOURCE_ID = "rag-experiments"
"""Source id of assessments computed by code (retrieval metrics, keyword metrics, refusal)."""

EXPECTATION_NAME = "expected_response"
"""MLflow's conventional expectation name for a reference answer."""

TRACE_NAME = "question"
TRACES_PER_TRANSACTION = 100
"""Traces (with their assessments) per database transaction: short enough that parallel sweep
jobs sharing a sqlite file never wait long for its write lock."""
SPANS_PER_CALL = 600
"""Spans per ``log_spans`` call (each call is one transaction; contexts make spans large)."""

_PREVIEW_CHARS = 1000
_TRACER = TracerProvider().get_tracer("rag_experiments.tracking.traces")
"""A tracer with no span processor: spans built here are never exported by OpenTelemetry."""


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


def column_sources(metrics: Sequence[Metric]) -> dict[str, ColumnSource]:
    """The source of every metric column: the judge model of LLM-judged metrics, code otherwise.

    Args:
        metrics: The run's metrics.

    Returns:
        ``{column: ColumnSource}`` for every declared column.
    """
    out: dict[str, ColumnSource] = {}
    for metric in metrics:
        judged = isinstance(metric, JudgedRowMetric)
        model = ""
        if judged and metric.judge is not None:
            model = str(metric.judge.describe().get("model", ""))
        for spec in metric.specs():
            if judged:
                out[spec.name] = ColumnSource(
                    AssessmentSourceType.LLM_JUDGE, model or "judge", str(metric.name)
                )
            else:
                out[spec.name] = ColumnSource(AssessmentSourceType.CODE, CODE_SOURCE_ID)
    return out


def rationale(value: MetricValue, record: Mapping[str, Any] | None) -> str | None:
    """A readable reason for one value: the judge's verdicts from its audit record, or why the
    value is NaN.

    Args:
        value: The cell.
        record: The judged metric's audit record of this question (claims, verdicts, generated
            questions, feedback, the raw judgement), or None for code metrics.

    Returns:
        One or more lines, or None when a code metric's value needs no reason.
    """
    lines: list[str] = []
    judgement = (record or {}).get("judgement") or {}
    if not value.is_valid:
        lines.append(f"NaN: {value.reason}")
        if judgement.get("error_message"):
            lines.append(str(judgement["error_message"]))
    elif value.reason:
        lines.append(f"flag: {value.reason}")
    if record and value.is_valid:  # a NaN's verdicts (if any) are another column's
        lines.extend(_verdict_lines(record))
    return "\n".join(lines) or None


def _verdict_lines(record: Mapping[str, Any]) -> list[str]:
    """The verdicts of an audit record, one line each (see the metrics' ``_score``)."""
    lines = []
    for claim in record.get("claims") or []:
        ok = claim.get("supported", claim.get("attributed"))
        where = f"context {claim.get('context')}" if claim.get("context") else "no context"
        lines.append(f"{'✓' if ok else '✗'} {claim.get('claim')} ({where})")
    for verdict in record.get("verdicts") or []:
        useful = "relevant" if verdict.get("relevant") else "not relevant"
        lines.append(f"context {verdict.get('rank')}: {useful}")
    for q in record.get("questions") or []:
        lines.append(f"generated question: {q.get('question')} (cosine {q.get('cosine')})")
    if record.get("noncommittal"):
        lines.append("the answer is noncommittal")
    if record.get("scores"):
        lines.append("scores: " + ", ".join(f"{k} {v}" for k, v in record["scores"].items()))
    if record.get("feedback"):
        lines.append(str(record["feedback"]))
    return lines


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
) -> tuple[TraceInfo, list[Span]]:
    """The trace of one question (see the module docstring for its layout).

    Args:
        sample: The question.
        response: The target's answer.
        values: Its metric values by column.
        specs: The run's metric columns, in output order (one feedback each).
        sources: Who computed each column (:func:`column_sources`).
        audit: The question's row of ``judge_audit.jsonl`` (``{metric name: record}``), if any.
        experiment_id: The run's experiment.
        run_id: The run the trace belongs to.
        model: The generator's model id (None: unknown).
        start_ns: Start time of the trace, ns since the epoch; the spans last
            ``response.latency_ms`` (split into retrieval and generation when the target
            recorded ``generation_ms``).

    Returns:
        ``(trace info with assessments, spans)``.
    """
    total_ns = int(max(response.latency_ms, 0.0) * 1e6)
    end_ns = start_ns + total_ns
    generation_ns = int(float(response.metadata.get("generation_ms", 0.0)) * 1e6)
    split_ns = max(start_ns, end_ns - min(generation_ns, total_ns))
    failed = response.error is not None
    answer = None if response.no_response else response.response
    root_raw, root = _span(
        TRACE_NAME,
        SpanType.CHAIN,
        None,
        None,
        start_ns,
        end_ns,
        {"question": sample.user_input},
        answer,
        {"question_id": sample.id, "question_type": sample.question_type or ""},
        response.error,
    )
    trace_id = root.trace_id
    docs = _documents(response)
    spans = [root]
    _, retrieve = _span(
        "retrieve",
        SpanType.RETRIEVER,
        trace_id,
        root_raw,
        start_ns,
        split_ns,
        {"query": sample.user_input},
        [d.to_dict() for d in docs],
    )
    spans.append(retrieve)
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
        _, generate = _span(
            "generate",
            SpanType.LLM,
            trace_id,
            root_raw,
            split_ns,
            end_ns,
            {"question": sample.user_input, "contexts": len(response.retrieved_contexts)},
            response.response,
            attributes,
        )
        spans.append(generate)
    assessments: list[Any] = []
    for spec in specs:
        value = values.get(spec.name, MetricValue.nan("missing"))
        source = sources.get(spec.name, ColumnSource(AssessmentSourceType.CODE, CODE_SOURCE_ID))
        record = (audit or {}).get(source.audit_key) if source.audit_key else None
        assessments.append(feedback(spec.name, value, source, record))
    if sample.reference:
        assessments.append(
            Expectation(
                name=EXPECTATION_NAME,
                value=sample.reference,
                source=AssessmentSource(
                    source_type=AssessmentSourceType.HUMAN, source_id="dataset"
                ),
            )
        )
    for a in assessments:
        a.trace_id = trace_id
        a.span_id = root.span_id
    tags = {TraceTagKey.TRACE_NAME: TRACE_NAME, "question_id": sample.id}
    if sample.question_type:
        tags["question_type"] = sample.question_type
    if not sample.answerable:  # metrics skip or score these differently (scorers read it)
        tags["answerable"] = "false"
    if failed:
        tags["error"] = f"{response.error}: {response.error_message or ''}"[:250]
    info = TraceInfo(
        trace_id=trace_id,
        trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=start_ns // 1_000_000,
        execution_duration=total_ns // 1_000_000,
        state=TraceState.ERROR if failed else TraceState.OK,
        request_preview=json.dumps({"question": sample.user_input}, ensure_ascii=False)[
            :_PREVIEW_CHARS
        ],
        response_preview=(answer or "")[:_PREVIEW_CHARS],
        client_request_id=sample.id,
        trace_metadata={
            TRACE_SCHEMA_VERSION_KEY: str(TRACE_SCHEMA_VERSION),
            TraceMetadataKey.SOURCE_RUN: run_id,
        },
        tags=tags,
        assessments=assessments,
    )
    return info, spans


def _documents(response: RagResponse) -> list[Document]:
    """The retrieved contexts as MLflow documents (rank 1 = best)."""
    chunk_ids = response.retrieved_ids or []
    doc_ids = response.retrieved_doc_ids or []
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
        docs.append(
            Document(page_content=text, metadata={k: v for k, v in meta.items() if v is not None})
        )
    return docs


@dataclass(frozen=True)
class TraceLogStats:
    """What :func:`log_traces` wrote and how long it took.

    Attributes:
        traces: Traces written.
        spans: Spans written.
        assessments: Feedback and expectations written.
        seconds: Wall time of building and writing, seconds.
    """

    traces: int
    spans: int
    assessments: int
    seconds: float


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
    """Write one trace per question into ``experiment_id``, linked to ``run_id``.

    Args:
        tracking_uri: Resolved tracking URI (a database store or a server).
        experiment_id: The run's experiment id.
        run_id: The run the traces belong to.
        samples: The questions, in row order.
        responses: One response per sample.
        values: One ``{column: MetricValue}`` per sample.
        specs: The metric columns (one feedback per column per question).
        sources: Who computed each column (:func:`column_sources`).
        audit: ``judge_audit.jsonl`` rows (matched to samples by ``id``).
        model: The generator's model id, for the LLM spans.

    Returns:
        The counts and the wall time.

    Raises:
        TrackingError: ``tracking_uri`` is a folder store (it keeps no spans).
        MlflowException: The store refused a trace or the spans (the caller decides whether
            that fails the run).
    """
    started = time.perf_counter()
    by_id = {str(row.get("id")): row for row in audit}
    client = TracingClient(tracking_uri)
    if _is_folder_store(client.store):
        raise TrackingError(
            f"the folder store {tracking_uri} keeps no trace spans: log to a database store "
            "(tracking.uri=sqlite:///mlruns.db) or a server, or set tracking.traces=false"
        )
    now_ns = time.time_ns()
    infos: list[TraceInfo] = []
    spans: list[Span] = []
    offset_ns = 0
    for sample, response, row_values in zip(samples, responses, values, strict=True):
        info, trace_spans = question_trace(
            sample,
            response,
            row_values,
            specs,
            sources=sources,
            audit=by_id.get(sample.id),
            experiment_id=experiment_id,
            run_id=run_id,
            model=model,
            start_ns=now_ns + offset_ns,
        )
        offset_ns += 1_000  # keep the questions' order in the UI's time-sorted list
        infos.append(info)
        spans.extend(trace_spans)
    for i in range(0, len(infos), TRACES_PER_TRANSACTION):
        chunk = infos[i : i + TRACES_PER_TRANSACTION]
        if not _insert_sql(client, experiment_id, chunk):
            for info in chunk:  # trace + its assessments: one transaction each
                client.start_trace(info)
    for i in range(0, len(spans), SPANS_PER_CALL):
        client.log_spans(experiment_id, spans[i : i + SPANS_PER_CALL])
    n_assessments = sum(len(info.assessments) for info in infos)
    elapsed = time.perf_counter() - started
    log.info(
        "logged %d traces (%d spans, %d assessments) in %.1f s",
        len(infos),
        len(spans),
        n_assessments,
        elapsed,
    )
    return TraceLogStats(len(infos), len(spans), n_assessments, elapsed)


def _is_folder_store(store: Any) -> bool:
    """True for MLflow's folder store (``./mlruns``), whose ``log_spans`` is not implemented."""
    try:
        from mlflow.store.tracking.file_store import FileStore
    except ImportError:  # removed from MLflow: no folder store
        return False
    return isinstance(store, FileStore)


def _insert_sql(client: TracingClient, experiment_id: str, infos: Sequence[TraceInfo]) -> bool:
    """Write trace infos with their assessments in ONE transaction of a database store.

    MLflow's ``start_trace`` writes one trace per transaction; this inserts the rows
    ``SqlAlchemyStore.start_trace`` inserts (trace info, tags with the artifact location,
    metadata marked finalized, and the assessments as ``SqlAssessments.from_mlflow_entity``
    maps them) in one session, assessments with one multi-row INSERT. The rollup rebuild
    queue (off unless ``MLFLOW_SQL_TRACE_ROLLUPS_ENABLED``) is not maintained, so with rollups
    on the API is used. ``tests/test_traces.py`` checks that both paths store the same traces
    (re-run it when MLflow is upgraded: this relies on the store's row classes).

    Returns:
        False when the store is not one this code knows (a server, another MLflow layout,
        rollups on): the caller then uses the API.
    """
    try:
        import sqlalchemy
        from mlflow.store.tracking.dbmodels.models import (
            SqlAssessments,
            SqlTraceInfo,
            SqlTraceMetadata,
            SqlTraceTag,
        )
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.store.tracking.utils.sql_trace_rollups import rollups_enabled
    except ImportError:  # another MLflow layout
        return False
    store = client.store
    if type(store) is not SqlAlchemyStore or rollups_enabled():
        return False
    experiment = store.get_experiment(experiment_id)
    columns = {a.key: a.columns[0].key for a in sqlalchemy.inspect(SqlAssessments).column_attrs}
    assessment_rows: list[dict[str, Any]] = []
    with store.ManagedSessionMaker(read_only=False) as session, session.no_autoflush:
        for info in infos:
            trace_id = info.trace_id
            row = SqlTraceInfo(
                request_id=trace_id,
                experiment_id=experiment_id,
                timestamp_ms=info.request_time,
                execution_time_ms=info.execution_duration,
                status=info.state.value,
                client_request_id=info.client_request_id,
                request_preview=info.request_preview,
                response_preview=info.response_preview,
                trace_name=info.tags.get(TraceTagKey.TRACE_NAME),
            )
            row.tags = [
                SqlTraceTag(request_id=trace_id, key=k, value=v)
                for k, v in info.tags.items()
                if k != TraceTagKey.TRACE_NAME
            ] + [store._get_trace_artifact_location_tag(experiment, trace_id)]
            metadata = {**info.trace_metadata, TraceMetadataKey.TRACE_INFO_FINALIZED: "true"}
            row.request_metadata = [
                SqlTraceMetadata(request_id=trace_id, key=k, value=v)
                for k, v in sorted(metadata.items())
            ]
            for a in info.assessments:  # MLflow's own mapping, inserted in bulk below
                sql = SqlAssessments.from_mlflow_entity(a)
                sql.trace_id = trace_id
                sql.experiment_id = int(experiment_id)
                sql.trace_timestamp_ms = info.request_time
                assessment_rows.append({col: getattr(sql, attr) for attr, col in columns.items()})
            session.add(row)
        session.flush()  # the trace rows exist before their assessments
        if assessment_rows:
            session.execute(SqlAssessments.__table__.insert(), assessment_rows)
    return True
