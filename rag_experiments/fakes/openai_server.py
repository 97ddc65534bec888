"""A fake OpenAI-compatible chat server on 127.0.0.1 with a fixed latency and a number of
parallel slots, like a vLLM or llama.cpp server: for throughput benchmarks and for tests of
back pressure and faults.

It serves from one asyncio event loop (in a daemon thread) with httptools' request parser, not
from :mod:`http.server`'s thread per connection: in ``bench/judge_throughput.py`` it shares two
cores with the client it measures, and the threaded server spent 0.6-1.0 ms of CPU per request
(header parsing through the ``email`` package, a GIL hand-off per request), as much as the
client itself.

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
``429`` (at once, with ``Retry-After: retry_after_s``), ``500`` (after ``latency_s``),
``garbage`` (a 200 whose content is not JSON), ``badbody`` (a 200 whose HTTP body is not
JSON) or ``drop`` (the connection is closed without an answer). The server counts requests
and the peak number in flight. With ``reasoning`` it answers as a reasoning model in one
server's shape (:data:`REASONING_SHAPES`), thinking unless asked not to, and with
``cut_thinking`` every such reply is cut while thinking.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import httptools

from rag_experiments.fakes.local_server import LoopbackServer

FAULTS = ("429", "500", "garbage", "badbody", "drop")
"""Fault kinds :class:`FakeOpenAIServer` can inject."""

REASONING_SHAPES = ("vllm", "vllm_legacy", "llama_cpp", "inline", "harmony")
"""How :class:`FakeOpenAIServer` returns a reasoning model's thoughts, as each server does:
``vllm`` ``message.reasoning`` (vLLM with ``--reasoning-parser``, ``protocol.py``
``ChatMessage.reasoning``), ``vllm_legacy`` ``message.reasoning_content`` (vLLM before the
rename), ``llama_cpp`` ``message.reasoning_content`` (``llama-server --reasoning-format
deepseek``), ``inline`` ``<think>…</think>`` in the content (no parser / ``--reasoning-format
none``), ``harmony`` gpt-oss channel markers left in the content."""

THOUGHT = (
    "The user asks for one JSON object of the given schema. I check each field in turn, "
    "compare the answer with the contexts, and then write the object."
)
"""The fake's reasoning text (28 words, 147 characters)."""


def reasoning_reply(
    shape: str, answer: str, thought: str = THOUGHT, cut: bool = False
) -> tuple[dict[str, Any], str]:
    """The ``message`` and ``finish_reason`` of a reasoning model's reply in a server's
    ``shape`` (:data:`REASONING_SHAPES`); ``cut`` = the token limit was reached while it was
    still thinking (half the thought, no answer, ``finish_reason: length``)."""
    if cut:
        thought, answer = thought[: len(thought) // 2], ""
    finish = "length" if cut else "stop"
    if shape in ("vllm", "vllm_legacy", "llama_cpp"):
        field = "reasoning" if shape == "vllm" else "reasoning_content"
        content: Any = answer if answer or shape == "llama_cpp" else None
        return {"role": "assistant", "content": content, field: thought}, finish
    if shape == "inline":
        text = f"<think>{thought}" + ("" if cut else f"</think>\n\n{answer}")
        return {"role": "assistant", "content": text}, finish
    if shape == "harmony":
        text = f"<|channel|>analysis<|message|>{thought}"
        if not cut:
            text += f"<|end|><|start|>assistant<|channel|>final<|message|>{answer}<|return|>"
        return {"role": "assistant", "content": text}, finish
    raise ValueError(f"reasoning shape {shape!r} is not one of {REASONING_SHAPES}")


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


class FakeOpenAIServer(LoopbackServer):
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
        reasoning: Answer as a reasoning model in one server's shape
            (:data:`REASONING_SHAPES`), or None. It thinks unless the request says
            ``chat_template_kwargs: {"enable_thinking": false}`` (a Qwen3 template).
        cut_thinking: Every reasoning reply is cut while thinking (``finish_reason:
            length``, no answer).
        report_reasoning_tokens: Report ``usage.completion_tokens_details.reasoning_tokens``
            (the thought's words) as OpenAI does; otherwise not (vLLM, llama.cpp).

    Attributes:
        requests: Chat requests received.
        faults: Chat requests that got the fault.
        peak_in_flight: Most chat requests being served or waiting at once.
        connections: Connections clients opened.
        seen: Per chat request in arrival order: ``(id_slot, cache_prompt, last message's
            content)`` as sent (None for a field not sent).
        reasoning_sent: Per chat request, its ``chat_template_kwargs`` and
            ``reasoning_effort`` as sent (keys absent when not sent).

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
        reasoning: str | None = None,
        cut_thinking: bool = False,
        report_reasoning_tokens: bool = False,
    ) -> None:
        if reasoning is not None and reasoning not in REASONING_SHAPES:
            raise ValueError(f"reasoning shape {reasoning!r} is not one of {REASONING_SHAPES}")
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
        self.reasoning = reasoning
        self.cut_thinking = cut_thinking
        self.report_reasoning_tokens = report_reasoning_tokens
        self.reasoning_sent: list[dict[str, Any]] = []
        self.requests = 0
        self.connections = 0
        self.faults = 0
        self.gone = False
        self.in_flight = 0
        self.peak_in_flight = 0
        self.seen: list[tuple[Any, Any, str]] = []
        self.slots = slots
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._conns: set[_Connection] = set()
        self._port = 0

    def start(self) -> FakeOpenAIServer:
        """Listen on a free port of 127.0.0.1 and serve from an event loop in a daemon
        thread."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._sem = asyncio.Semaphore(self.slots)
        self._server = loop.run_until_complete(
            loop.create_server(
                lambda: _Connection(self), "127.0.0.1", 0, backlog=2048, reuse_address=True
            )
        )
        self._port = self._server.sockets[0].getsockname()[1]
        self._thread = threading.Thread(target=loop.run_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; requests on kept-alive connections are then
        dropped unanswered, as by a server that died."""
        self.gone = True
        loop, self._loop = self._loop, None
        if loop is None:
            return

        def close() -> None:
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns):
                conn.abort()
            loop.stop()

        loop.call_soon_threadsafe(close)
        if self._thread is not None:
            self._thread.join(timeout=10)
        tasks = asyncio.all_tasks(loop)  # requests still waiting for their latency
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    def close_connections(self) -> None:
        """Close every open client connection, unanswered, and keep serving (as a server that
        closes idle kept-alive connections); returns once they are closed."""
        loop = self._loop
        if loop is None:
            return
        closed = threading.Event()

        def close() -> None:
            for conn in list(self._conns):
                conn.abort()
            closed.set()

        loop.call_soon_threadsafe(close)
        closed.wait(10)

    def _bound_port(self) -> int | None:
        return self._port or None

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
            self.reasoning_sent.append(
                {k: body[k] for k in ("chat_template_kwargs", "reasoning_effort") if k in body}
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

    async def chat(self, body: dict[str, Any], n: int = 0) -> str:
        """The content of the reply to chat request number ``n`` (after its latency, in one
        of the slots)."""
        async with self._sem:
            await asyncio.sleep(self.latency_s)
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not schema:
            return "ok"
        pick = (lambda k: n % k) if self.vary else None
        return json.dumps(schema_instance(schema, pick=pick))


def _response(status: int, payload: Any, headers: dict[str, str] | None = None) -> bytes:
    """One HTTP/1.1 answer with a JSON body, as bytes."""
    data = json.dumps(payload).encode("utf-8")
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + data


class _Connection(asyncio.Protocol):
    """One client connection of a :class:`FakeOpenAIServer` (kept alive; one request at a
    time, answered in order)."""

    def __init__(self, server: FakeOpenAIServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.body: list[bytes] = []
        self.pending: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.connections += 1
        self.server._conns.add(self)  # noqa: SLF001 - part of the server

    def connection_lost(self, exc: Exception | None) -> None:
        self.server._conns.discard(self)  # noqa: SLF001

    def abort(self) -> None:
        """Close the connection at once, unanswered."""
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.abort()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method().decode("ascii")
        path = self.url.decode("utf-8").rstrip("/")
        body = b"".join(self.body)
        self.url, self.body = b"", []
        previous = self.pending
        self.pending = asyncio.get_running_loop().create_task(
            self._answer(previous, method, path, body)
        )

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(_response(status, payload, headers))

    async def _answer(
        self, previous: asyncio.Task[None] | None, method: str, path: str, raw: bytes
    ) -> None:
        if previous is not None:  # a pipelined request: answers go out in order
            await previous
        server = self.server
        if method == "GET":
            if path == "/stats":
                self._send(
                    200,
                    {
                        "requests": server.requests,
                        "faults": server.faults,
                        "peak_in_flight": server.peak_in_flight,
                    },
                )
            elif path.endswith("/models"):
                self._send(
                    200, {"object": "list", "data": [{"id": server.model, "object": "model"}]}
                )
            else:
                self._send(404, {"error": {"message": f"no route {path}"}})
            return
        if not path.endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {path}"}})
            return
        body = json.loads(raw or b"{}")
        n, fault = server._next(body)  # noqa: SLF001 - the connection is part of the server
        try:
            if fault == "drop":
                self.abort()
                return
            if fault == "badbody":
                data = b"<html>upstream cut"
                if self.transport is not None and not self.transport.is_closing():
                    self.transport.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                return
            if fault == "500":  # a server error comes after the work failed, not at once
                await asyncio.sleep(server.latency_s)
            if fault in ("429", "500"):
                headers = {"Retry-After": f"{server.retry_after_s:g}"} if fault == "429" else {}
                self._send(int(fault), {"error": {"message": f"injected {fault}"}}, headers)
                return
            content = "<html>not json" if fault == "garbage" else await server.chat(body, n)
            prompt_tokens = sum(
                len(str(m.get("content", "")).split()) for m in body.get("messages", [])
            )
            message: dict[str, Any] = {"role": "assistant", "content": content}
            finish = "stop"
            thinks = (body.get("chat_template_kwargs") or {}).get("enable_thinking") is not False
            usage: dict[str, Any] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(content.split()),
            }
            if server.reasoning and thinks and fault is None:
                message, finish = reasoning_reply(
                    server.reasoning, content, cut=server.cut_thinking
                )
                thought = message.get("reasoning") or message.get("reasoning_content") or ""
                thought_words = len((thought or str(message["content"])).split())
                usage["completion_tokens"] = len(str(message["content"] or "").split())
                if thought:
                    usage["completion_tokens"] += thought_words
                if server.report_reasoning_tokens:
                    usage["completion_tokens_details"] = {"reasoning_tokens": thought_words}
            self._send(
                200,
                {
                    "id": "fake",
                    "object": "chat.completion",
                    "model": server.model,
                    "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                    "usage": usage,
                },
            )
        finally:
            server._done()  # noqa: SLF001


def main() -> None:
    """``python -m rag_experiments.fakes.openai_server``: serve until killed; print the URL."""
    import argparse

    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible chat server.")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per chat request")
    parser.add_argument("--slots", type=int, default=8, help="requests served at once")
    parser.add_argument("--fault", choices=FAULTS, default=None)
    parser.add_argument("--fault-share", type=float, default=0.0)
    parser.add_argument("--reasoning", choices=REASONING_SHAPES, default=None)
    parser.add_argument("--cut-thinking", action="store_true", help="cut every reply thinking")
    parser.add_argument("--report-reasoning-tokens", action="store_true")
    parser.add_argument("--retry-after", type=float, default=0.1, help="Retry-After of a 429 (s)")
    args = parser.parse_args()
    with FakeOpenAIServer(
        args.latency,
        args.slots,
        fault=args.fault,
        fault_share=args.fault_share,
        reasoning=args.reasoning,
        cut_thinking=args.cut_thinking,
        report_reasoning_tokens=args.report_reasoning_tokens,
        retry_after_s=args.retry_after,
    ) as server:
        print(server.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
