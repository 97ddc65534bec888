"""People's labels on a run's traces: MLflow feedback assessments with a ``HUMAN`` source.

A label a person gives in ``rag-exp review --run`` (:mod:`rag_experiments.review.grading`)
lands on the question's trace as a :class:`~mlflow.entities.Feedback` named after the metric
(the judge's own feedback carries the same name with an ``LLM_JUDGE`` or ``CODE`` source), with
``source_type="HUMAN"`` and ``source_id`` = the grader's name, so MLflow's trace view shows the
people's verdicts beside the judge's. The trace is found by id: the one the tracker gave the
question (:func:`~rag_experiments.tracking.trace_shape.trace_id_for` of the run id and the
question key). Writing is idempotent per (trace, metric, grader): the same label again changes
nothing, a changed label updates that grader's assessment (no second one), so a restarted grader
can replay its log safely.

Reading (:func:`human_feedback`) goes through :func:`mlflow.search_traces` on the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import mlflow
from mlflow.entities import AssessmentSource, Feedback
from mlflow.exceptions import MlflowException
from mlflow.tracing.client import TracingClient
from mlflow.tracking._tracking_service.utils import _use_tracking_uri

from rag_experiments.errors import TrackingError
from rag_experiments.tracking.trace_shape import trace_id_for

HUMAN = "HUMAN"
"""MLflow's source type of a person's assessment."""


@dataclass(frozen=True)
class HumanFeedback:
    """One person's label on a trace, as read back from MLflow.

    Attributes:
        trace_id: The trace (``tr-…``).
        sample_id: The question's id (the trace's request preview is not parsed: the id comes
            from the caller's mapping, None when the trace is not one of them).
        metric: The assessment name (the metric column).
        value: The label (1.0 or 0.0 for a verdict).
        grader: The source id (the grader's name).
    """

    trace_id: str
    sample_id: str | None
    metric: str
    value: float
    grader: str


@contextmanager
def _uri(uri: str) -> Iterator[None]:
    with _use_tracking_uri(uri):
        yield


def log_human_label(
    uri: str, run_id: str, question_key: str, metric: str, value: float, grader: str
) -> str:
    """Put a person's label on the question's trace (idempotent per metric and grader).

    Args:
        uri: The tracking URI (resolved).
        run_id: The run whose trace it is.
        question_key: The question's key (its sample id; ``id#n`` for a repeated id).
        metric: The metric column (the assessment name).
        value: The label, a float in [0, 1].
        grader: Who gave it (the assessment's ``source_id``).

    Returns:
        ``"logged"`` (new), ``"updated"`` (the grader's earlier, different label replaced) or
        ``"kept"`` (the same label was already there).

    Raises:
        TrackingError: The trace does not exist (the run logged no traces: ``tracking.traces``
            off) or the store refuses the write.
    """
    trace_id = trace_id_for(run_id, question_key)
    client = TracingClient(uri)
    try:
        info = client.get_trace_info(trace_id)
        mine = [
            a
            for a in info.assessments
            if a.name == metric
            and a.source.source_type == HUMAN
            and a.source.source_id == grader
            and a.valid is not False
        ]
        source = AssessmentSource(source_type=HUMAN, source_id=grader)
        if mine:
            if mine[-1].value == float(value):
                return "kept"
            updated = Feedback(name=metric, value=float(value), source=source)
            client.update_assessment(trace_id, mine[-1].assessment_id, updated)
            return "updated"
        client.log_assessment(trace_id, Feedback(name=metric, value=float(value), source=source))
        return "logged"
    except MlflowException as exc:
        raise TrackingError(
            f"cannot put {grader}'s {metric} label on trace {trace_id} of run {run_id} "
            f"(question {question_key}): {exc.message}; the run must have logged its traces"
        ) from exc


def human_feedback(uri: str, run_id: str, question_keys: list[str]) -> list[HumanFeedback]:
    """Every ``HUMAN`` feedback on the run's traces, read with :func:`mlflow.search_traces`.

    Args:
        uri: The tracking URI (resolved).
        run_id: The run.
        question_keys: The run's question keys (to name each trace's sample).

    Returns:
        One :class:`HumanFeedback` per valid human feedback, in trace then assessment order.

    Raises:
        TrackingError: The store cannot be searched.
    """
    by_trace = {trace_id_for(run_id, k): k for k in question_keys}
    try:
        with _uri(uri):
            experiment_id = mlflow.get_run(run_id).info.experiment_id
            traces = mlflow.search_traces(
                locations=[experiment_id], run_id=run_id, return_type="list"
            )
    except MlflowException as exc:
        raise TrackingError(f"cannot read the traces of run {run_id}: {exc.message}") from exc
    out = []
    for trace in traces:
        for a in trace.info.assessments:
            if a.source.source_type != HUMAN or a.valid is False or not isinstance(a, Feedback):
                continue
            out.append(
                HumanFeedback(
                    trace.info.trace_id,
                    by_trace.get(trace.info.trace_id),
                    a.name,
                    float(a.value),
                    a.source.source_id,
                )
            )
    return out
