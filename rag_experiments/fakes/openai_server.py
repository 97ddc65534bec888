"""A fake OpenAI-compatible chat server on 127.0.0.1 with a fixed latency and a number of
parallel slots, like a vLLM or llama.cpp server: for throughput benchmarks and for tests of
back pressure and faults.

``POST /v1/chat/completions`` sleeps ``latency_s`` inside one of ``slots`` slots (a request
beyond that waits for a free slot, as a server's queue does) and answers:

- with a JSON schema in ``response_format`` (``json_schema``): the smallest instance of that
  schema (:func:`schema_instance`: arrays as short as allowed but not empty, the first enum
  value, numbers at their minimum, strings of their minimum length), so any structured
  request of ours or of DeepEval parses;
- otherwise the text ``ok``.

``GET /v1/models`` lists ``model``; ``GET /stats`` returns ``{"requests", "faults",
"peak_in_flight"}``. ``python -m rag_experiments.fakes.openai_server --latency 0.2 --slots 8``
serves it in its own process (so a benchmark's client does not share a GIL with it) and prints
its URL on the first line. Faults are injected on a deterministic share of the chat
requests (request ``n`` is faulted when ``floor((n + 1) * share) > floor(n * share)``):
``429`` (with ``Retry-After: retry_after_s``), ``500``, ``garbage`` (a 200 whose content is
not JSON), ``badbody`` (a 200 whose HTTP body is not JSON) or ``drop`` (the connection is
closed without an answer). The server counts requests and the peak number in flight.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from rag_experiments.fakes.local_server import LocalServer

FAULTS = ("429", "500", "garbage", "badbody", "drop")
"""Fault kinds :class:`FakeOpenAIServer` can inject."""


def schema_instance(
    schema: dict[str, Any],
    root: dict[str, Any] | None = None,
    pick: Callable[[int], int] | None = None,
) -> Any:
    """A small JSON value valid against ``schema`` (the subset pydantic emits).

    Args:
        schema: A JSON schema node.
        root: The document holding ``$defs`` (default: ``schema``).
        pick: Chooses among ``n`` allowed values (returns ``0 .. n-1``) for enums, booleans
            and bounded integers; None = always the first (the smallest instance).

    Returns:
        A JSON-ready value: objects with every required property, arrays of
        ``max(minItems, 1)`` items (0 only when ``maxItems`` is 0), an ``enum`` value or the
        ``const``, numbers from ``minimum`` (else 1), strings of ``minLength`` ``"x"``
        characters (at least one when allowed), booleans.
    """
    root = root if root is not None else schema
    choose = pick or (lambda n: 0)
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return schema_instance(root.get("$defs", {})[name], root, pick)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][choose(len(schema["enum"]))]
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return schema_instance(options[0], root, pick)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {k: schema_instance(props[k], root, pick) for k in schema.get("required", props)}
    if kind == "array":
        n = max(int(schema.get("minItems", 1)), 1)
        if "maxItems" in schema:
            n = min(n, int(schema["maxItems"]))
        return [schema_instance(schema.get("items", {}), root, pick) for _ in range(n)]
    if kind in ("integer", "number"):
        low = int(schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1))
        if kind == "integer" and "maximum" in schema:
            low += choose(int(schema["maximum"]) - low + 1)
        return low if kind == "integer" else float(low)
    if kind == "boolean":
        return choose(2) == 0
    if kind == "null":
        return None
    n = max(int(schema.get("minLength", 1)), 1)
    return "x" * min(n, int(schema.get("maxLength", n)))


class FakeOpenAIServer(LocalServer):
    """A fake OpenAI-compatible server on a free port of 127.0.0.1.

    Args:
        latency_s: Time each chat request spends in a slot, in seconds.
        slots: Requests served at once; more wait for a slot (>= 1).
        model: The model id it serves.
        fault: One of :data:`FAULTS`, or None.
        fault_share: Share of chat requests that get the fault (0..1).
        retry_after_s: ``Retry-After`` of a ``429``, in seconds.
        vary: Replies differ per call: request ``n`` picks its enum values, booleans and
            bounded integers with ``pick(k) = n mod k`` (as a sampling server at a
            temperature above 0, or a batched one whose numerics change with its load) —
            for tests of what must not depend on which call answered.

    Attributes:
        requests: Chat requests received.
        faults: Chat requests that got the fault.
        peak_in_flight: Most chat requests being served or waiting at once.
        seen: Per chat request in arrival order: ``(id_slot, cache_prompt, last message's
            content)`` as sent (None for a field not sent).

    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        latency_s: float = 0.2,
        slots: int = 8,
        *,
        model: str = "fake-judge",
        fault: str | None = None,
        fault_share: float = 0.0,
        retry_after_s: float = 0.1,
        vary: bool = False,
    ) -> None:
        if slots < 1 or not 0.0 <= fault_share <= 1.0 or (fault and fault not in FAULTS):
            raise ValueError(
                f"slots >= 1, fault_share in [0, 1], fault in {FAULTS}; got "
                f"{slots}, {fault_share}, {fault!r}"
            )
        self.latency_s = latency_s
        self.model = model
        self.fault = fault
        self.fault_share = fault_share
        self.retry_after_s = retry_after_s
        self.vary = vary
        self.requests = 0
        self.faults = 0
        self.gone = False
        self.in_flight = 0
        self.peak_in_flight = 0
        self.seen: list[tuple[Any, Any, str]] = []
        self._slots = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def stop(self) -> None:
        """Stop serving and close the socket; requests on kept-alive connections are then
        dropped unanswered, as by a server that died."""
        self.gone = True
        super().stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (an OpenAI ``base_url``)."""
        return f"{self.root}/v1"

    def _next(self, body: dict[str, Any]) -> tuple[int, str | None]:
        """Count a chat request: its number and the fault it gets, or None."""
        messages = body.get("messages") or [{}]
        with self._lock:
            self.seen.append(
                (body.get("id_slot"), body.get("cache_prompt"), str(messages[-1].get("content")))
            )
            n = self.requests
            self.requests += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            if self.gone:
                return n, "drop"
            share = self.fault_share
            if self.fault and math.floor((n + 1) * share) > math.floor(n * share):
                self.faults += 1
                return n, self.fault
        return n, None

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def chat(self, body: dict[str, Any], n: int = 0) -> str:
        """The content of the reply to chat request number ``n`` (after its latency)."""
        with self._slots:
            time.sleep(self.latency_s)
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not schema:
            return "ok"
        pick = (lambda k: n % k) if self.vary else None
        return json.dumps(schema_instance(schema, pick=pick))


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
        # client's delayed ACK hold the body back ~40 ms on a kept-alive connection.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") == "/stats":
                self._send(
                    200,
                    {
                        "requests": server.requests,
                        "faults": server.faults,
                        "peak_in_flight": server.peak_in_flight,
                    },
                )
            elif self.path.rstrip("/").endswith("/models"):
                self._send(
                    200, {"object": "list", "data": [{"id": server.model, "object": "model"}]}
                )
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            n, fault = server._next(body)  # noqa: SLF001 - the handler is part of the server
            try:
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fault == "badbody":
                    data = b"<html>upstream cut"
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if fault in ("429", "500"):
                    headers = {"Retry-After": f"{server.retry_after_s:g}"} if fault == "429" else {}
                    self._send(int(fault), {"error": {"message": f"injected {fault}"}}, headers)
                    return
                content = "<html>not json" if fault == "garbage" else server.chat(body, n)
                prompt_tokens = sum(
                    len(str(m.get("content", "")).split()) for m in body.get("messages", [])
                )
                self._send(
                    200,
                    {
                        "id": "fake",
                        "object": "chat.completion",
                        "model": server.model,
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": len(content.split()),
                        },
                    },
                )
            finally:
                server._done()  # noqa: SLF001

    return Handler


def main() -> None:
    """``python -m rag_experiments.fakes.openai_server``: serve until killed; print the URL."""
    import argparse

    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible chat server.")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per chat request")
    parser.add_argument("--slots", type=int, default=8, help="requests served at once")
    parser.add_argument("--fault", choices=FAULTS, default=None)
    parser.add_argument("--fault-share", type=float, default=0.0)
    args = parser.parse_args()
    with FakeOpenAIServer(
        args.latency, args.slots, fault=args.fault, fault_share=args.fault_share
    ) as server:
        print(server.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
