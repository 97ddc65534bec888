"""Write one MLflow trace per evaluated question (:func:`log_traces`), with the fastest writer
the store allows.

After a run has scored every question, :func:`log_traces` writes one trace per question
(its shape: :mod:`~rag_experiments.tracking.trace_shape`) into the run's experiment, linked to
the run.

**Idempotent per (run, question).** The ids depend only on the run and the question
(:func:`~rag_experiments.tracking.trace_shape.trace_id_for`), so :func:`log_traces` first
deletes the traces with those ids that the store already holds (a run killed while writing
them, then resumed, or a retry after a partial write), then writes them all: whatever was
interrupted, one complete trace per question remains.

**Batching.** MLflow has no bulk call for assessments (``log_feedback`` is one transaction per
value, ``start_trace`` one per trace). Each question's trace is first built in plain values
(:func:`~rag_experiments.tracking.trace_shape.question_parts`). On a database store
(``sqlite:///…``, ``postgresql://…``) the rows of :data:`TRACES_PER_TRANSACTION` questions go
in one transaction as multi-row INSERTs on MLflow's own tables
(:mod:`~rag_experiments.tracking.trace_sql`, used only at the schema revision it was written
for). On a tracking server that runs our app (``mlflow server --app-name rag-experiments``,
:mod:`~rag_experiments.tracking.server_app`) the same plain values go to its batch endpoint
(:mod:`~rag_experiments.tracking.trace_batch`), which runs that INSERT path on the server's own
database. On any other tracking server (``http://…``), or a database at another schema
revision, the values become MLflow's entities and go through MLflow's own API
(:class:`ApiTraceWriter`): each trace with its assessments is one ``StartTraceV3`` request,
sent :data:`API_CONCURRENCY` at a time, and the spans go in ``log_spans`` calls (OTLP
``/v1/traces`` requests on a server) of :data:`SPANS_PER_CALL` spans.

Traces need a database-backed store (``sqlite:///…``) or a tracking server; a plain folder
store keeps no spans.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mlflow.tracing.client import TracingClient

from rag_experiments.errors import TrackingError
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.tracking.trace_batch import PluginTraceWriter, has_batch_endpoint
from rag_experiments.tracking.trace_entities import entities
from rag_experiments.tracking.trace_shape import (
    TRACES_PER_TRANSACTION,
    TraceParts,
    assessed_columns,
    chunks,
    question_keys,
    question_parts,
    trace_id_for,
)
from rag_experiments.tracking.trace_sql import SqlTraceWriter

log = logging.getLogger(__name__)

SPANS_PER_CALL = 600
"""Spans per ``log_spans`` call (one transaction, or one OTLP request on a server; contexts
make spans large)."""
API_CONCURRENCY = 8
"""Requests in flight at once to a tracking server (each trace is one ``StartTraceV3``)."""


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
    audit: Sequence[Mapping[str, Any]] = (),
    model: str | None = None,
    assessments: str = "key",
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
        specs: The metric columns (the key ones, or with ``assessments="all"`` also the judged
            ones, become feedback).
        audit: ``judge_audit.jsonl`` rows (matched to samples by ``id``).
        model: The generator's model id, for the LLM spans.
        assessments: ``key`` or ``all`` (:func:`~rag_experiments.tracking.selection.
            assessed_columns`).

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
    assessed = assessed_columns(specs, assessments)
    try:
        for first in range(0, len(rows), TRACES_PER_TRANSACTION):  # built and written in chunks
            chunk: list[TraceParts] = []
            for i, (sample, response, row_values, key) in enumerate(
                rows[first : first + TRACES_PER_TRANSACTION], start=first
            ):
                parts = question_parts(
                    sample,
                    response,
                    row_values,
                    specs,
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


class ApiTraceWriter:
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
                    chunks(trace_ids, TRACES_PER_TRANSACTION),
                )
            )
        )

    def write(self, chunk: Sequence[TraceParts]) -> None:
        """Trace infos (with assessments) first, then their spans."""
        built = [entities(parts, self.experiment_id) for parts in chunk]
        list(self.pool.map(self.client.start_trace, [info for info, _ in built]))
        flat = [span for _, trace_spans in built for span in trace_spans]
        list(
            self.pool.map(
                lambda spans: self.client.log_spans(self.experiment_id, list(spans)),
                chunks(flat, SPANS_PER_CALL),
            )
        )

    def close(self) -> None:
        """Stop the request threads."""
        self.pool.shutdown()


def _open_writer(
    tracking_uri: str, client: TracingClient, experiment_id: str
) -> SqlTraceWriter | PluginTraceWriter | ApiTraceWriter:
    """The fastest writer ``tracking_uri`` allows: multi-row INSERTs into a database store,
    the batch endpoint of a server running our app (:func:`has_batch_endpoint`), else MLflow's
    public per-trace API."""
    from mlflow.store.tracking.rest_store import RestStore

    store = client.store
    if isinstance(store, RestStore):
        if has_batch_endpoint(store):
            return PluginTraceWriter(store, experiment_id)
        return ApiTraceWriter(client, experiment_id)
    return SqlTraceWriter.open(store, experiment_id) or ApiTraceWriter(client, experiment_id)


def _is_folder_store(store: Any) -> bool:
    """True for MLflow's folder store (``./mlruns``), whose ``log_spans`` is not implemented."""
    try:
        from mlflow.store.tracking.file_store import FileStore
    except ImportError:  # removed from MLflow: no folder store
        return False
    return isinstance(store, FileStore)
