"""Serve a target (the built-in baseline) over HTTP, behind the API that
:class:`~rag_experiments.targets.http.HttpTarget` calls by default.

API (JSON in and out)::

    POST /ask     {"question": "…", "id": "optional"}
                  → 200 {"answer": "…", "contexts": ["…", …], "context_ids": ["doc#0", …],
                         "doc_ids": ["doc", …], "latency_ms": 12.3}
                  → 400 {"error": "bad_request", "message": …}   (no question)
                  → 413 {"error": "http_413", "message": …}      (body over the size limit)
                  → 500 / 504 {"error": <reason>, "message": …}   (the target failed; 504 for
                                                                  a timeout)
    GET  /health  → 200 {"status": "ok", "target": {…describe()…}}

``contexts`` are the ``top_k`` chunk texts the generator saw and ``context_ids`` their chunk ids;
``doc_ids`` is the deeper document ranking the baseline keeps for retrieval metrics
(``retriever.depth``), so an evaluation through HTTP sees exactly what ``target=baseline``
sees.

The server is werkzeug's threaded WSGI server (Flask's production-safe building block, no debug
mode, no reloader) in a background thread; requests to the target are serialised by a lock,
because the embedded model and the vector index are not meant for concurrent calls. It binds
127.0.0.1 by default: it has no authentication. Bound to a loopback interface it answers only
requests whose ``Host`` is a loopback name (400 otherwise), as ``rag-exp review`` does. A
request body over ``max_request_bytes`` (:data:`MAX_REQUEST_BYTES` by default, ``rag-exp serve
--max-request-mb``) is refused with 413 before it is read.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

from flask import Flask, jsonify, request
from werkzeug.exceptions import HTTPException

from rag_experiments.common.wsgi_server import LOOPBACK_BINDS, LOOPBACK_HOSTS, BackgroundServer
from rag_experiments.protocols import Target
from rag_experiments.records import Sample

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1_000_000
"""Default limit of a request body (1 MB: a question of a few hundred thousand characters)."""


def create_app(
    target: Target, loopback_only: bool = True, max_request_bytes: int = MAX_REQUEST_BYTES
) -> Flask:
    """The Flask app serving ``target`` (see the module docstring for the API).

    Args:
        target: A prepared target.
        loopback_only: Accept only loopback ``Host`` headers
            (:data:`~rag_experiments.common.wsgi_server.LOOPBACK_HOSTS`; others get 400), as the
            review app does: set False when serving on another interface.
        max_request_bytes: Largest request body accepted; a larger one gets 413 (Flask's
            ``MAX_CONTENT_LENGTH``, checked against ``Content-Length`` before reading).

    Returns:
        The WSGI application.
    """
    app = Flask("rag_experiments.serve")
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.config.update(
        TRUSTED_HOSTS=LOOPBACK_HOSTS if loopback_only else None,
        MAX_CONTENT_LENGTH=int(max_request_bytes),
    )
    lock = threading.Lock()
    numbers = itertools.count(1)

    @app.post("/ask")
    def ask() -> Any:
        data = request.get_json(silent=True)
        question = data.get("question") if isinstance(data, dict) else None
        if not isinstance(question, str) or not question.strip():
            return jsonify(
                error="bad_request",
                message='send a JSON object {"question": "<text>"} with a non-empty question',
            ), 400
        qid = data.get("id") if isinstance(data.get("id"), str) and data.get("id") else None
        sample = Sample(id=qid or f"http-{next(numbers)}", user_input=question)
        try:
            with lock:
                resp = target.answer(sample)
        except Exception as exc:  # noqa: BLE001 - answer with an error, keep serving
            log.exception("target crashed on %s", sample.id)
            return jsonify(error="target_exception", message=f"{type(exc).__name__}: {exc}"), 500
        if resp.error:
            status = 504 if resp.error == "timeout" else 500
            return jsonify(error=resp.error, message=resp.error_message), status
        return jsonify(
            answer=resp.response,
            contexts=resp.retrieved_contexts,
            context_ids=resp.retrieved_ids,
            doc_ids=resp.retrieved_doc_ids,
            latency_ms=round(resp.latency_ms, 3),
        )

    @app.get("/health")
    def health() -> Any:
        return jsonify(status="ok", target=target.describe())

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        message = exc.description
        if exc.code == 413:
            message = (
                f"the request body is over {max_request_bytes:,} bytes; send a shorter question "
                "(or start the server with a larger --max-request-mb)"
            )
        return jsonify(error=f"http_{exc.code}", message=message), exc.code

    return app


class TargetServer(BackgroundServer):
    """Run :func:`create_app` on a werkzeug server in a background thread.

    Args:
        target: A prepared target.
        host: Interface to bind (127.0.0.1: this machine only).
        port: TCP port; 0 = any free port (read :attr:`port` after :meth:`start`).
        max_request_bytes: Largest request body accepted (413 beyond).

    Raises:
        ConfigError: The port is outside 0..65535.
    """

    def __init__(
        self,
        target: Target,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_request_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        super().__init__(host, port, "serve")
        self.target = target
        self.max_request_bytes = int(max_request_bytes)

    def wsgi_app(self) -> Any:
        """The API of the module docstring over :attr:`target`; bound to a loopback
        interface, it answers only loopback ``Host`` headers."""
        return create_app(
            self.target,
            loopback_only=self.host in LOOPBACK_BINDS,
            max_request_bytes=self.max_request_bytes,
        )

    def start(self) -> str:
        """Bind and serve in a background thread (see :meth:`BackgroundServer.start`)."""
        url = super().start()
        log.info("serving on %s (POST /ask, GET /health)", url)
        return url
