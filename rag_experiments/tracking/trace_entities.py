"""A question's trace as MLflow's entities: trace info with assessments, and spans.

The plain values of a trace (:class:`~rag_experiments.tracking.trace_shape.TraceParts`) become
MLflow's :class:`~mlflow.entities.TraceInfo` (with its :class:`~mlflow.entities.Feedback` and
:class:`~mlflow.entities.Expectation` assessments) and :class:`~mlflow.entities.Span` objects
(:func:`entities`), for MLflow's own API writer and for readers that want entities
(:func:`question_trace`). Spans are built offline with a private OpenTelemetry tracer, never
MLflow's global one, so nothing here touches the caller's own tracing; their ids are the ones
:func:`~rag_experiments.tracking.trace_shape.otel_span_id` gives, so the API and the SQL writer
store the same ids.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow.entities import (
    AssessmentError,
    AssessmentSource,
    Expectation,
    Feedback,
    LiveSpan,
    Span,
    TraceInfo,
    TraceLocation,
    TraceState,
)
from mlflow.tracing.utils import (
    generate_mlflow_trace_id_from_otel_trace_id,
)
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator

from rag_experiments.records import ColumnSource, MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.tracking.trace_shape import (
    TraceParts,
    assessment_id,
    assessment_source,
    otel_span_id,
    question_parts,
    rationale,
    trace_metadata,
)


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
        return otel_span_id(self._local.trace_id, self._local.spans)


_IDS = _SeededIds()
_TRACER = TracerProvider(id_generator=_IDS, resource=Resource.get_empty()).get_tracer(
    "rag_experiments.tracking.trace_entities"
)
"""A tracer with no span processor (spans built here are never exported by OpenTelemetry) and
no resource attributes (MLflow would store them as trace tags: ``service.name`` …)."""


def feedback(
    name: str, value: MetricValue, source: ColumnSource | None, record: Mapping[str, Any] | None
) -> Feedback:
    """One metric value as an MLflow feedback: the float, or no value and an error whose code
    is the NaN reason; rationale from :func:`~rag_experiments.tracking.trace_shape.rationale`
    (the lines of ``record``'s field ``source.rationale_key``); source the judge of ``source``,
    or code when ``source`` is None."""
    why = rationale(value, record, source.rationale_key if source is not None else None)
    source_type, source_id = assessment_source(source)
    src = AssessmentSource(source_type=source_type, source_id=source_id)
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
    audit: Mapping[str, Any] | None,
    experiment_id: str,
    run_id: str,
    model: str | None,
    start_ns: int,
    question_key: str | None = None,
    assessed: Sequence[str] | None = None,
) -> tuple[TraceInfo, list[Span]]:
    """The trace of one question as MLflow's entities (its layout and which values become
    assessments: :mod:`~rag_experiments.tracking.trace_shape`).

    Args:
        sample: The question.
        response: The target's answer.
        values: Its metric values by column.
        specs: The run's metric columns, in output order (the assessed ones become feedback;
            each spec's ``source`` says who computed it).
        audit: The question's row of ``judge_audit.jsonl`` (``{metric name: record}``), if any.
        experiment_id: The run's experiment.
        run_id: The run the trace belongs to.
        model: The generator's model id (None: unknown).
        start_ns: Start time of the trace, ns since the epoch; the spans last
            ``response.latency_ms`` (split into retrieval and generation when the target
            recorded ``generation_ms``).
        question_key: The question's key in :func:`~rag_experiments.tracking.trace_shape.
            trace_id_for` (default ``sample.id``).
        assessed: :func:`~rag_experiments.tracking.selection.assessed_columns` of ``specs``
            (computed when None).

    Returns:
        ``(trace info with assessments, spans)``; the ids depend only on ``run_id`` and the
        question key.
    """
    parts = question_parts(
        sample,
        response,
        values,
        specs,
        audit=audit,
        run_id=run_id,
        model=model,
        start_ns=start_ns,
        question_key=question_key,
        assessed=assessed,
    )
    return entities(parts, experiment_id)


def entities(parts: TraceParts, experiment_id: str) -> tuple[TraceInfo, list[Span]]:
    """MLflow's trace info (with assessments) and spans of one question's trace."""
    _IDS.seed(parts.otel_trace_id)
    root_raw = None
    spans: list[Span] = []
    for part in parts.spans:  # made in order: the ids follow otel_span_id(trace, part.n)
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
        entity.assessment_id = assessment_id(parts.trace_id, a.name)
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
        trace_metadata=trace_metadata(parts),
        tags=dict(parts.tags),
        assessments=assessments,
    )
    return info, spans
