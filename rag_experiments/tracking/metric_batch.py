"""A run's metrics in one request to ``mlflow server --app-name rag-experiments``.

MLflow's ``log_batch`` takes at most 1,000 metrics a request and its server writes them through
the ORM, one pipelined ``INSERT`` per row into ``metrics`` and into ``latest_metrics``: about
0.5 s of server CPU per 1,000 metrics over PostgreSQL (cProfile of ``SqlAlchemyStore.log_batch``,
load ~7), most of the params/metrics phase of ``bench/logging_throughput.py`` (a run logs ~2,300
aggregates). Our server app (:mod:`~rag_experiments.tracking.server_app`) adds :data:`METRICS_PATH`:
the client sends all of a run's new metrics in one gzip'd JSON request
(:func:`send_metrics`) and the server writes the rows ``log_batch`` would write, with one
``COPY`` per table on PostgreSQL (:func:`write_metrics`).

Only the case without history goes the fast way: when none of the keys has a value in the run
yet (a first logging). Otherwise, or when the insert collides with a concurrent writer, the
server calls MLflow's own ``log_batch`` (which merges ``latest_metrics`` and skips rows already
stored), so a request retried after its answer was lost writes nothing twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.utils.validation import MAX_METRICS_PER_BATCH

from rag_experiments.tracking.batch_http import encode_gzip_json, post_gzip_json
from rag_experiments.tracking.trace_batch import has_batch_endpoint
from rag_experiments.tracking.trace_sql import SqlTraceWriter, insert_rows

__all__ = ["METRICS_PATH", "send_metrics", "write_metrics"]

log = logging.getLogger(__name__)

METRICS_PATH = "/ajax-api/3.0/rag-exp/metrics/batch"
"""``POST {"run_id": str, "metrics": [[key, value, timestamp ms, step], ...]}`` (JSON, optionally
gzip'd); answers ``{"metrics": rows written, "fast": bool}``."""

_MISSING: set[str] = set()
"""Server URLs whose app has the trace endpoint but not this one (an older rag-experiments)."""
_LOCK = threading.Lock()


def send_metrics(store: Any, run_id: str, metrics: Sequence[Metric]) -> bool:
    """Send ``metrics`` of ``run_id`` in one request when the server behind ``store`` runs our
    app with a database store; False when it does not (the caller uses ``log_batch``).

    Args:
        store: The client's ``RestStore``.
        run_id: The run.
        metrics: Finite metrics (the tracker skips NaN and infinities).

    Returns:
        Whether the server wrote them: False also when the endpoint answered MLflow's JSON
        500 (the endpoint failed; nothing was written, ``log_batch`` takes them).

    Raises:
        MlflowException: The request failed (5xx and connection errors are retried by the
            caller's :class:`~rag_experiments.tracking.resilience.Outage`).
    """
    from mlflow.utils.rest_utils import verify_rest_response

    creds = store.get_host_creds()
    with _LOCK:
        if creds.host in _MISSING:
            return False
    if not has_batch_endpoint(store):
        return False
    rows = [[m.key, m.value, m.timestamp, m.step] for m in metrics]
    response = post_gzip_json(
        store, METRICS_PATH, encode_gzip_json({"run_id": run_id, "metrics": rows})
    )
    if response.status_code in (404, 405) and not _is_mlflow_error(response):
        with _LOCK:  # no such route: an older app, or none (an unknown run is MLflow JSON)
            _MISSING.add(creds.host)
        return False
    if response.status_code == 500 and _is_mlflow_error(response):
        # the endpoint itself failed (its transaction rolled back; e.g. an MLflow whose store
        # internals it no longer matches): MLflow's log_batch still takes these metrics
        log.warning(
            "the server's metric batch endpoint failed (%s); logging these metrics with "
            "MLflow's log_batch",
            response.text[:300],
        )
        return False
    verify_rest_response(response, METRICS_PATH)
    return True


def write_metrics(store: Any, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Write one request's metrics into ``store`` (the server side of :data:`METRICS_PATH`): the
    rows ``store.log_batch(run_id, metrics, [], [])`` writes (``metrics`` and
    ``latest_metrics``: per key the value of the greatest ``(step, timestamp, value)``, NaN
    stored as 0 with ``is_nan``), validated as MLflow validates them.

    Args:
        store: The server's backend store.
        payload: ``{"run_id": str, "metrics": [[key, value, timestamp, step], ...]}``.

    Returns:
        ``{"metrics": rows given, "fast": whether the COPY/multi-row path was taken}``.

    Raises:
        ValueError: The store is not a database store this app can write.
        TypeError, KeyError: A malformed request.
        MlflowException: An invalid metric, an unknown or finished run (as ``log_batch``).
    """
    import sqlalchemy.exc
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
    from mlflow.utils.validation import _validate_metric, _validate_run_id

    if not SqlTraceWriter.supports(store):
        raise ValueError("the server's backend store is not a database store this app can write")
    run_id = str(payload["run_id"])
    _validate_run_id(run_id)
    metrics = [Metric(str(k), float(v), int(t), int(s)) for k, v, t, s in payload["metrics"]]
    rows: list[dict[str, Any]] = []
    latest: dict[str, dict[str, Any]] = {}
    seen: set[Metric] = set()
    for idx, m in enumerate(metrics):
        _validate_metric(m.key, m.value, m.timestamp, m.step, path=f"metrics[{idx}]")
        if m in seen:
            continue
        seen.add(m)
        is_nan, value = store.sanitize_metric_value(m.value)
        row = {
            "key": m.key,
            "value": value,
            "timestamp": m.timestamp,
            "step": m.step,
            "is_nan": is_nan,
            "run_uuid": run_id,
        }
        rows.append(row)
        old = latest.get(m.key)
        if old is None or (m.step, m.timestamp, value) > (
            old["step"],
            old["timestamp"],
            old["value"],
        ):
            latest[m.key] = row
    if not rows:
        return {"metrics": 0, "fast": False}
    table = SqlLatestMetric.__table__
    keys = sorted(latest)
    try:
        with store.ManagedSessionMaker(read_only=False) as session:
            store._check_run_is_active(store._get_run(run_uuid=run_id, session=session))
            history = any(
                session.execute(
                    sqlalchemy.select(table.c.key)
                    .where(table.c.run_uuid == run_id, table.c.key.in_(keys[i : i + 500]))
                    .limit(1)
                ).first()
                for i in range(0, len(keys), 500)
            )
            if not history:
                insert_rows(session, SqlMetric.__table__, rows)
                insert_rows(session, table, list(latest.values()))
                return {"metrics": len(metrics), "fast": True}
    except MlflowException as exc:  # the session wraps a concurrent writer's key collision
        if not _is_integrity_error(exc.__cause__):
            raise
    for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):  # log_batch's own limit
        store.log_batch(run_id, metrics[i : i + MAX_METRICS_PER_BATCH], [], [])
    return {"metrics": len(metrics), "fast": False}


def _is_mlflow_error(response: Any) -> bool:
    """Whether a response body is MLflow's JSON error (``{"error_code": …}``), e.g. the 404 of
    an unknown run, rather than a web server's page for a route it does not have."""
    try:
        return "error_code" in response.json()
    except (ValueError, TypeError):
        return False


def _is_integrity_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a key collision: SQLAlchemy's ``IntegrityError`` (multi-row INSERT)
    or psycopg's (the COPY path of :func:`~rag_experiments.tracking.trace_sql.insert_rows` runs
    on the driver's cursor, so its errors are not wrapped by SQLAlchemy)."""
    import sqlalchemy.exc

    if isinstance(exc, sqlalchemy.exc.IntegrityError):
        return True
    try:
        import psycopg
    except ImportError:
        return False
    return isinstance(exc, psycopg.IntegrityError)
