"""A fake rerank server on 127.0.0.1 that scores by word overlap, for tests and dry runs of
``reranker=http``.

``POST /v1/rerank`` and ``POST /rerank`` score each document with
:func:`~rag_experiments.retrieval.rerank.word_overlap` (the share of the query's words it
holds) and answer best first (ties in the order sent), as llama.cpp's server does:

- ``{"query", "documents", "model"?, "top_n"?}`` → ``{"model", "object": "list", "results":
  [{"index", "relevance_score"}]}``, cut to ``top_n`` when one is sent (the shape of
  llama.cpp, vLLM and Infinity);
- ``{"query", "texts"}`` → ``[{"index", "score"}]`` (Hugging Face TEI's shape).

A ``model`` other than the served one gets HTTP 404; a body without a query or documents gets
422. ``GET /health`` answers 200. Faults are scripted per rerank request, in arrival order
(``faults[n]`` for request ``n``; None or past the end = a normal answer): ``"429"`` (at
once, with ``Retry-After: retry_after_s``), ``"500"``, ``"slow"`` (the answer after
``slow_s`` seconds: set it past the client's timeout) or ``"html"`` (a 200 whose body is an
HTML page, not JSON: a proxy's or another server's answer). The server counts requests and keeps
their bodies.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any

from rag_experiments.fakes.local_server import LocalServer
from rag_experiments.retrieval.rerank import word_overlap

RERANK_PATHS = ("/v1/rerank", "/rerank")
"""Paths the fake serves the rerank API on."""

FAULTS = ("429", "500", "slow", "html")
"""Fault kinds :class:`FakeRerankServer` can inject."""


class FakeRerankServer(LocalServer):
    """A word-overlap rerank server on a free port of 127.0.0.1.

    Args:
        model: The model it serves (a request naming another gets 404).
        faults: Fault of each rerank request in arrival order (:data:`FAULTS` or None).
        retry_after_s: ``Retry-After`` of a ``429``, in seconds.
        slow_s: Delay of a ``"slow"`` request, in seconds.

    Attributes:
        requests: Rerank requests received (faulted ones included).
        bodies: Their JSON bodies, in arrival order.
        arrivals: ``time.monotonic()`` of each rerank request.
        headers: The request headers of each rerank request (names lower-cased).
        peak_in_flight: Most rerank requests being served at once.

    Raises:
        ValueError: An unknown fault kind.

    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        model: str = "fake-reranker",
        faults: Sequence[str | None] = (),
        retry_after_s: float = 0.2,
        slow_s: float = 2.0,
    ) -> None:
        unknown = sorted({f for f in faults if f is not None and f not in FAULTS})
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; choose from {list(FAULTS)}")
        self.model = model
        self.faults = list(faults)
        self.retry_after_s = retry_after_s
        self.slow_s = slow_s
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/v1/rerank``."""
        return f"{self.root}/v1/rerank"

    def _arrive(self, body: dict[str, Any], headers: dict[str, str]) -> str | None:
        """Count one rerank request (in flight until :meth:`_leave`); its scripted fault."""
        with self._lock:
            n = self.requests
            self.requests += 1
            self.bodies.append(body)
            self.headers.append(headers)
            self.arrivals.append(time.monotonic())
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        return self.faults[n] if n < len(self.faults) else None

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def rerank(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The answer to a rerank body: ``(status, json)``."""
        model = body.get("model")
        if model is not None and model != self.model:
            return 404, {"error": {"message": f"model {model!r} not found", "code": 404}}
        tei = "texts" in body
        query = body.get("query")
        docs = body.get("texts" if tei else "documents")
        if (
            not isinstance(query, str)
            or not isinstance(docs, list)
            or not docs
            or not all(isinstance(d, str) for d in docs)
        ):
            return 422, {"error": '"query" must be a string and "documents" a non-empty list'}
        scores = [word_overlap(query, d) for d in docs]
        order = sorted(range(len(docs)), key=lambda i: -scores[i])
        if tei:
            return 200, [{"index": i, "score": scores[i]} for i in order]
        top_n = body.get("top_n")
        if isinstance(top_n, int) and top_n > 0:
            order = order[:top_n]
        results = [{"index": i, "relevance_score": scores[i]} for i in order]
        return 200, {"model": self.model, "object": "list", "results": results}


def _make_handler(server: FakeRerankServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout): nothing to answer

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._send(200, {"status": "ok"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path not in RERANK_PATHS:
                self._send(404, {"error": "not found"})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": "body is not JSON"})
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            fault = server._arrive(body if isinstance(body, dict) else {}, headers)
            try:
                self._answer(body if isinstance(body, dict) else {}, fault)
            finally:
                server._leave()

        def _answer(self, body: dict[str, Any], fault: str | None) -> None:
            if fault == "429":
                self._send(
                    429,
                    {"error": "too many requests"},
                    {"Retry-After": f"{server.retry_after_s:g}"},
                )
                return
            if fault == "500":
                self._send(500, {"error": "internal error"})
                return
            if fault == "html":
                page = b"<html><body>Welcome</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
                return
            if fault == "slow":
                time.sleep(server.slow_s)
            self._send(*server.rerank(body))

    return Handler
