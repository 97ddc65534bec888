"""One gzip'd JSON ``POST`` to an endpoint of ``mlflow server --app-name rag-experiments``
(:mod:`~rag_experiments.tracking.server_app`): the request both batch clients send, the traces
(:class:`~rag_experiments.tracking.trace_batch.PluginTraceWriter`) and the metrics
(:func:`~rag_experiments.tracking.metric_batch.send_metrics`).

The request goes through MLflow's own ``http_request`` with the client store's credentials,
so it is retried, timed out and authenticated exactly as MLflow's REST calls are
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``,
``MLFLOW_HTTP_REQUEST_TIMEOUT``, read at each call; the caller's
:class:`~rag_experiments.tracking.resilience.Outage` sets them while the server is away). The
answer is returned as is: each caller decides what its statuses mean.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["GZIP_JSON_HEADERS", "encode_gzip_json", "post_gzip_json"]

GZIP_JSON_HEADERS = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
"""Headers of a gzip'd JSON body (the server app gunzips ``Content-Encoding: gzip``)."""


def encode_gzip_json(payload: Mapping[str, Any]) -> bytes:
    """``payload`` as UTF-8 JSON (non-ASCII kept as is), gzip'd at level 1 (the fastest
    level: the body is built on the logging path, and the server is on the team's network).

    Args:
        payload: A JSON-serialisable mapping.

    Returns:
        One gzip member.

    Raises:
        TypeError, ValueError: A value JSON cannot encode (NaN and infinities are encoded as
            Python's ``json`` does; callers send finite values).
    """
    body = json.dumps(payload, ensure_ascii=False).encode()
    return gzip.compress(body, compresslevel=1)


def post_gzip_json(store: Any, path: str, data: bytes) -> Any:
    """``POST`` ``data`` (from :func:`encode_gzip_json`) to ``path`` of the server behind
    ``store``.

    Args:
        store: The client's ``RestStore`` (its ``get_host_creds()`` give the host and auth).
        path: The endpoint, e.g. ``/ajax-api/3.0/rag-exp/traces/batch``.
        data: The gzip'd JSON body.

    Returns:
        The ``requests.Response``, whatever its status (MLflow's retries of connection errors
        and of 429/5xx answers done).

    Raises:
        MlflowException: The server could not be reached after MLflow's retries.
    """
    from mlflow.utils.rest_utils import http_request

    return http_request(
        store.get_host_creds(), path, "POST", data=data, extra_headers=dict(GZIP_JSON_HEADERS)
    )
