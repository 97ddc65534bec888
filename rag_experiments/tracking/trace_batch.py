"""The trace batch endpoint of ``mlflow server --app-name rag-experiments``: its client
(:class:`PluginTraceWriter`) and its server side (:func:`batch_status`, :func:`write_batch`).

On a tracking server that runs our app (:mod:`~rag_experiments.tracking.server_app`; asked once
per server, :func:`has_batch_endpoint`) the plain values of the traces
(:class:`~rag_experiments.tracking.trace_shape.TraceParts`) go as gzip'd JSON,
:data:`~rag_experiments.tracking.trace_shape.TRACES_PER_TRANSACTION` questions per request and
:data:`BATCH_IN_FLIGHT` requests at once, to its batch endpoint (:data:`BATCH_PATH`), which
runs the multi-row INSERT path (:mod:`~rag_experiments.tracking.trace_sql`) on the server's own
database.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from rag_experiments.errors import TrackingError
from rag_experiments.tracking.batch_http import encode_gzip_json, post_gzip_json
from rag_experiments.tracking.trace_shape import (
    TRACES_PER_TRANSACTION,
    AssessmentParts,
    SpanParts,
    TraceParts,
)
from rag_experiments.tracking.trace_sql import SqlTraceWriter

log = logging.getLogger(__name__)

BATCH_IN_FLIGHT = 2
"""Batch requests in flight at once to a server running our app, so the server reads and
builds one chunk while the database writes the other (measured: the traces phase of
``bench/logging_throughput.py``'s logging, 345 questions, to the server+plugin over
PostgreSQL: 2.81 s with one request in flight, 1.93 s with two, 1.83 s with three; medians of
three rounds in turns with sqlite, 1.52 s, load ~4)."""


BATCH_PATH = "/ajax-api/3.0/rag-exp/traces/batch"
"""The batch endpoint of ``mlflow server --app-name rag-experiments``
(:mod:`~rag_experiments.tracking.server_app`): ``GET`` says whether it is there and can write
(:func:`batch_status`), ``POST`` writes a gzip'd JSON chunk of traces (:func:`write_batch`)."""
BATCH_PROTOCOL = 1
"""Version of the batch endpoint's JSON (the client and the server must agree; a server with
another version is not used: the client falls back to MLflow's own API)."""


def _message(response: Any) -> str:
    """The ``message`` of an error answer in MLflow's JSON shape, else its text (300 chars)."""
    try:
        return str(response.json().get("message", ""))[:300]
    except (ValueError, AttributeError):
        return str(response.text)[:300]


_PLUGIN_PROBED: dict[str, bool] = {}
_PLUGIN_LOCK = threading.Lock()


def has_batch_endpoint(store: Any) -> bool:
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


def parts_to_json(parts: TraceParts) -> dict[str, Any]:
    """One question's trace as the batch endpoint's JSON: the fields of :class:`TraceParts`
    by name, each span and assessment as the list of its fields in declaration order (a
    trace carries ~18 assessments: no repeated keys to encode, send and parse)."""
    out = dict(vars(parts))
    out["spans"] = [list(vars(span).values()) for span in parts.spans]
    out["assessments"] = [list(vars(a).values()) for a in parts.assessments]
    return out


def parts_from_json(data: Mapping[str, Any]) -> TraceParts:
    """The inverse of :func:`parts_to_json`.

    Raises:
        TypeError: A field is missing or unknown.
    """
    fields = dict(data)
    fields["spans"] = [SpanParts(*span) for span in fields["spans"]]
    fields["assessments"] = [AssessmentParts(*a) for a in fields["assessments"]]
    return TraceParts(**fields)


def batch_status(store: Any) -> dict[str, Any]:
    """What ``GET`` :data:`BATCH_PATH` answers: the protocol, and whether ``store`` (the
    server's backend store) is a database store the multi-row INSERT path knows."""
    import mlflow

    return {
        "protocol": BATCH_PROTOCOL,
        "writable": SqlTraceWriter.supports(store),
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
    writer = SqlTraceWriter.open(store, str(payload["experiment_id"]))
    if writer is None:
        raise ValueError("the server's backend store is not a database store this app can write")
    chunk = [parts_from_json(t) for t in payload["traces"]]
    if not chunk:
        return {"traces": 0, "replaced": 0}
    replaced = writer.delete_existing([p.trace_id for p in chunk])
    writer.write(chunk)
    return {"traces": len(chunk), "replaced": replaced}


class PluginTraceWriter:
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

    def write(self, chunk: Sequence[TraceParts]) -> None:
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
