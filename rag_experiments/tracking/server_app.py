"""``mlflow server --app-name rag-experiments``: MLflow's tracking server plus one batch endpoint
for our traces.

MLflow's server (3.17) writes a trace per ``StartTraceV3`` request, about 31 ms of server CPU
each plus about 0.45 ms per assessment, and has no batch endpoint for trace infos or
assessments, so logging a run's traces through it costs 11-13x the multi-row INSERT path a
client with a database URI takes. This app is MLflow's documented extension point for the
server (entry point group ``mlflow.app``, like MLflow's own ``basic-auth``): it takes MLflow's
Flask app, adds :data:`~rag_experiments.tracking.trace_batch.BATCH_PATH`, and returns the app as
``mlflow server`` serves it (wrapped in MLflow's FastAPI app under uvicorn, the default; the
Flask app itself under gunicorn or waitress). Every MLflow route is unchanged.

* ``GET`` answers ``{"protocol": 1, "writable": bool, "mlflow": version}`` (``writable``: the
  server's backend store is a database store the multi-row INSERT path knows);
* ``POST`` takes ``{"protocol": 1, "experiment_id": …, "traces": [...]}`` (JSON, optionally
  gzip'd: ``Content-Encoding: gzip``) and writes those traces, their spans and assessments with
  :func:`~rag_experiments.tracking.trace_batch.write_batch` into the server's own backend store
  (``mlflow.server.handlers._get_tracking_store()``): clients need no database credentials.
  Answers ``{"traces": n, "replaced": k}``; 400 for a malformed request or another protocol,
  409 when a trace id of the batch belongs to ANOTHER experiment (never overwritten; a trace
  of the same experiment is replaced, which makes a retried request idempotent), 413 when
  the body, decompressed, exceeds :data:`MAX_MB_ENV` MB (the client halves its chunk), 503
  when the database cannot be reached (the client retries it as an outage), 500 otherwise.
* ``POST`` :data:`~rag_experiments.tracking.metric_batch.METRICS_PATH` takes a run's metrics in
  one request and writes the rows MLflow's ``log_batch`` writes
  (:func:`~rag_experiments.tracking.metric_batch.write_metrics`); errors as MLflow answers them.

Security: like MLflow's own REST API without ``basic-auth``, the endpoint is
unauthenticated: anyone who can reach the server can write traces into an experiment, and
replace the traces of a run there by their ids. Protect the server as you protect MLflow's
API (an authenticating reverse proxy; see docs/how-to/tracking-server.md).

Install it on the server host with ``pip install rag-experiments[server]`` and start the
server with ``mlflow server --app-name rag-experiments …``. Clients find the endpoint by
themselves; without it they use MLflow's public API (slower, the same rows).

Limit: ``--app-name`` takes ONE app, so this app cannot be combined with MLflow's
``basic-auth`` app by a flag; a server needing authentication runs MLflow's own app (clients
then fall back to the per-trace API), or sits behind an authenticating proxy.
"""

from __future__ import annotations

import json
import logging
import os
import zlib
from typing import Any

from flask import Flask, Response, jsonify, request

from rag_experiments.tracking.metric_batch import METRICS_PATH, write_metrics
from rag_experiments.tracking.trace_batch import BATCH_PATH, batch_status, write_batch
from rag_experiments.tracking.trace_sql import TraceIdConflictError

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_MB", "MAX_MB_ENV", "create_app", "max_body_bytes"]

MAX_MB_ENV = "RAG_EXP_TRACE_BATCH_MAX_MB"
"""Environment variable of the server: the largest batch body accepted, in MB (10**6 bytes)
after decompression; a larger one is answered 413 (the client halves its chunk)."""
DEFAULT_MAX_MB = 256.0
"""Default of :data:`MAX_MB_ENV`. A client request holds at most 100 traces. Measured: 100
questions of ``bench/logging_throughput.py`` (fake models, ``metrics=custom``) make 0.75 MB
of JSON (0.15 MB gzip'd; the biggest trace 8.7 KB); real traces with ten 2,000-character
contexts, long answers and judged rationales are about 7x that (~60 KB each, ~6 MB a
request). 256 MB is over 300x the measured request and over 40x the large one, and caps what
one small gzip'd request (gzip expands up to ~1000x) can make the server hold in memory."""


def max_body_bytes() -> int:
    """The cap on a batch body after decompression, in bytes, from :data:`MAX_MB_ENV`.

    Returns:
        ``MB * 10**6`` (at least 1 byte); :data:`DEFAULT_MAX_MB` when unset or not a
        positive number (logged).
    """
    raw = os.environ.get(MAX_MB_ENV, "").strip()
    if raw:
        try:
            mb = float(raw)
            if mb > 0:
                return max(1, int(mb * 1_000_000))
        except ValueError:
            pass
        log.warning(
            "%s=%r is not a positive number of MB: using %g", MAX_MB_ENV, raw, DEFAULT_MAX_MB
        )
    return int(DEFAULT_MAX_MB * 1_000_000)


class _TooLarge(Exception):
    """The request body exceeds :func:`max_body_bytes`."""


def _body(limit: int) -> bytes:
    """The request's body, gunzipped when ``Content-Encoding: gzip``, at most ``limit`` bytes.

    Raises:
        _TooLarge: The body (raw or decompressed) is larger than ``limit``.
        ValueError: A broken gzip stream, or data after it.
    """
    if (request.content_length or 0) > limit:
        raise _TooLarge
    body = request.get_data()
    if len(body) > limit:
        raise _TooLarge
    if request.headers.get("Content-Encoding", "").lower() != "gzip":
        return body
    inflater = zlib.decompressobj(wbits=31)  # 16 + 15: gzip header and trailer
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ValueError(f"not gzip: {exc}") from exc
    if len(out) > limit or inflater.unconsumed_tail:
        raise _TooLarge
    if not inflater.eof:
        raise ValueError("truncated gzip stream")
    if inflater.unused_data:
        raise ValueError("data after the gzip stream (one gzip member expected)")
    return out


def create_app(app: Flask | None = None) -> Any:
    """MLflow's server app with the trace batch endpoint added (the ``mlflow.app`` entry point
    ``rag-experiments``; ``mlflow server`` calls it with no argument).

    Args:
        app: The Flask app to extend; MLflow's own (``mlflow.server.app``) when None.

    Returns:
        MLflow's FastAPI app wrapping ``app`` when the server runs under uvicorn (MLflow's
        default), else ``app``.
    """
    from mlflow.environment_variables import _MLFLOW_SGI_NAME
    from mlflow.server import app as mlflow_app
    from mlflow.server.handlers import _add_static_prefix

    flask_app = app if app is not None else mlflow_app
    flask_app.add_url_rule(
        _add_static_prefix(BATCH_PATH),
        endpoint="rag_experiments_trace_batch",
        view_func=_trace_batch,
        methods=["GET", "POST"],
    )
    flask_app.add_url_rule(
        _add_static_prefix(METRICS_PATH),
        endpoint="rag_experiments_metric_batch",
        view_func=_metric_batch,
        methods=["POST"],
    )
    if _MLFLOW_SGI_NAME.get() == "uvicorn":
        from mlflow.server.fastapi_app import create_fastapi_app

        return create_fastapi_app(flask_app)
    return flask_app


def _error(status: int, code: str, message: str) -> Response:
    """An error in MLflow's REST shape (``error_code``, ``message``)."""
    response = jsonify({"error_code": code, "message": message})
    response.status_code = status
    return response


def _trace_batch() -> Response:
    """``GET``: the endpoint's status; ``POST``: write one batch of traces (module docstring)."""
    from mlflow.server.handlers import _get_tracking_store

    store = _get_tracking_store()
    if request.method == "GET":
        return jsonify(batch_status(store))
    limit = max_body_bytes()
    try:
        payload = json.loads(_body(limit))
    except _TooLarge:
        message = (
            f"trace batch: the request exceeds {limit / 1e6:g} MB decompressed: send fewer "
            f"traces per request, or raise {MAX_MB_ENV} on the server"
        )
        return _error(413, "REQUEST_LIMIT_EXCEEDED", message)
    except ValueError as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"trace batch: not gzip'd JSON: {exc}")
    try:
        return jsonify(write_batch(store, payload))
    except TraceIdConflictError as exc:
        return _error(409, "RESOURCE_ALREADY_EXISTS", f"trace batch: {exc}")
    except (ValueError, TypeError, KeyError) as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"trace batch: {type(exc).__name__}: {exc}")
    except _unavailable() as exc:
        log.warning("trace batch: database unavailable: %s", exc)
        text = f"trace batch: the server's database is unavailable: {str(exc)[:300]}"
        return Response(text, status=503, mimetype="text/plain")
    except Exception as exc:  # noqa: BLE001 - answered as MLflow answers an internal error
        log.exception("trace batch failed (pid %d)", os.getpid())
        return _error(500, "INTERNAL_ERROR", f"trace batch: {type(exc).__name__}: {exc}")


def _unavailable() -> tuple[type[BaseException], ...]:
    """The errors that mean "the database is unavailable" (answered 503, retried by the
    client): SQLAlchemy's, and psycopg's own, which the COPY path raises unwrapped
    (:func:`~rag_experiments.tracking.trace_sql.insert_rows` writes on the driver's cursor)."""
    import sqlalchemy.exc

    errors: tuple[type[BaseException], ...] = (
        sqlalchemy.exc.OperationalError,
        sqlalchemy.exc.InterfaceError,
    )
    try:
        import psycopg
    except ImportError:
        return errors
    return (*errors, psycopg.OperationalError, psycopg.InterfaceError)


def _metric_batch() -> Response:
    """``POST``: write one request's metrics (:func:`~rag_experiments.tracking.metric_batch.
    write_metrics`); MLflow's errors answered with MLflow's status (400 for an invalid metric
    or a deleted run), 503 while the database is unavailable (the client retries)."""
    from mlflow.exceptions import MlflowException
    from mlflow.server.handlers import _get_tracking_store

    limit = max_body_bytes()
    try:
        payload = json.loads(_body(limit))
    except _TooLarge:
        return _error(413, "REQUEST_LIMIT_EXCEEDED", f"metric batch: over {limit / 1e6:g} MB")
    except ValueError as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"metric batch: not gzip'd JSON: {exc}")
    try:
        return jsonify(write_metrics(_get_tracking_store(), payload))
    except MlflowException as exc:
        if isinstance(exc.__cause__, _unavailable()):
            log.warning("metric batch: database unavailable: %s", exc.__cause__)
            text = f"metric batch: the server's database is unavailable: {str(exc)[:300]}"
            return Response(text, status=503, mimetype="text/plain")
        return _error(exc.get_http_status_code(), exc.error_code, f"metric batch: {exc.message}")
    except (ValueError, TypeError, KeyError) as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"metric batch: {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - answered as MLflow answers an internal error
        log.exception("metric batch failed (pid %d)", os.getpid())
        return _error(500, "INTERNAL_ERROR", f"metric batch: {type(exc).__name__}: {exc}")
