"""``mlflow server --app-name rag-experiments``: MLflow's tracking server plus one batch endpoint
for our traces.

MLflow's server (3.17) writes a trace per ``StartTraceV3`` request, about 31 ms of server CPU
each plus about 0.45 ms per assessment, and has no batch endpoint for trace infos or
assessments, so logging a run's traces through it costs 11-13x the multi-row INSERT path a
client with a database URI takes. This app is MLflow's documented extension point for the
server (entry point group ``mlflow.app``, like MLflow's own ``basic-auth``): it takes MLflow's
Flask app, adds :data:`~rag_experiments.tracking.traces.BATCH_PATH`, and returns the app as
``mlflow server`` serves it (wrapped in MLflow's FastAPI app under uvicorn, the default; the
Flask app itself under gunicorn or waitress). Every MLflow route is unchanged.

* ``GET`` answers ``{"protocol": 1, "writable": bool, "mlflow": version}`` (``writable``: the
  server's backend store is a database store the multi-row INSERT path knows);
* ``POST`` takes ``{"protocol": 1, "experiment_id": …, "traces": [...]}`` (JSON, optionally
  gzip'd: ``Content-Encoding: gzip``) and writes those traces, their spans and assessments with
  :func:`~rag_experiments.tracking.traces.write_batch` into the server's own backend store
  (``mlflow.server.handlers._get_tracking_store()``): clients need no database credentials.
  Answers ``{"traces": n, "replaced": k}``; 400 for a malformed request or another protocol,
  503 when the database cannot be reached (the client retries it as an outage), 500 otherwise.

Install it on the server host with ``pip install rag-experiments[server]`` and start the
server with ``mlflow server --app-name rag-experiments …``. Clients find the endpoint by
themselves; without it they use MLflow's public API (slower, the same rows).

Limit: ``--app-name`` takes ONE app, so this app cannot be combined with MLflow's
``basic-auth`` app by a flag; a server needing authentication runs MLflow's own app (clients
then fall back to the per-trace API), or sits behind an authenticating proxy.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from typing import Any

from flask import Flask, Response, jsonify, request

from rag_experiments.tracking.traces import BATCH_PATH, batch_status, write_batch

log = logging.getLogger(__name__)

__all__ = ["create_app"]


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
    import sqlalchemy.exc
    from mlflow.server.handlers import _get_tracking_store

    store = _get_tracking_store()
    if request.method == "GET":
        return jsonify(batch_status(store))
    try:
        body = request.get_data()
        if request.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        payload = json.loads(body)
    except (OSError, ValueError) as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"trace batch: not gzip'd JSON: {exc}")
    try:
        return jsonify(write_batch(store, payload))
    except (ValueError, TypeError, KeyError) as exc:
        return _error(400, "INVALID_PARAMETER_VALUE", f"trace batch: {type(exc).__name__}: {exc}")
    except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError) as exc:
        log.warning("trace batch: database unavailable: %s", exc)
        text = f"trace batch: the server's database is unavailable: {str(exc)[:300]}"
        return Response(text, status=503, mimetype="text/plain")
    except Exception as exc:  # noqa: BLE001 - answered as MLflow answers an internal error
        log.exception("trace batch failed (pid %d)", os.getpid())
        return _error(500, "INTERNAL_ERROR", f"trace batch: {type(exc).__name__}: {exc}")
