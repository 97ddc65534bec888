"""A fake Ollama server on 127.0.0.1 for tests, benchmarks and dry runs of the HTTP path.

It speaks ``/api/chat``, ``/api/embed``, ``/api/tags`` and ``/api/show`` (non-streamed), on a
real socket (``http.server.ThreadingHTTPServer``, one thread per connection), and counts every
request. Its behaviour is chosen by markers in the first user message, so a test scripts each
request on its own and concurrency cannot mix them up:

===================  ==================================================================
marker               reply
===================  ==================================================================
(none)               ``{"answer": "<question>"}`` with a ``format``, else ``echo: <question>``
``[slow]``           sleeps ``slow_s`` first (set it past the client's timeout)
``[fenced]``         the JSON inside a ```` ```json ```` fence
``[prose]``          prose before and after the JSON
``[trailing-comma]`` ``{"answer": "…",}``
``[cut]``            JSON cut mid-string, ``done_reason = "length"``
``[bad-once]``       not JSON, unless the conversation already holds a repair request
``[overflow]``       ``prompt_eval_count`` equal to the request's ``num_ctx``
===================  ==================================================================

With ``thinking`` the models are reasoning models as Ollama serves them (``server/routes.go``,
``api/types.go``): ``/api/show`` lists ``"thinking"`` in ``capabilities``; a chat request
thinks unless it says ``"think": false``, and the thoughts come back in ``message.thinking``
apart from ``message.content``; with ``cut_thinking`` every reply is cut while thinking
(``done_reason: "length"``, half a thought, empty content). Without ``thinking``, a request
with ``think`` set gets HTTP 400 ``"<model>" does not support thinking``. ``judge=True``
answers a ``format`` with the smallest instance of that schema (a judge's verdicts) instead of
``{"answer": …}``.

A model not in ``models`` gets HTTP 404 ``{"error": "model \\"x\\" not found, try pulling it
first"}`` as Ollama answers. Every ``/api/chat`` also sleeps ``latency_s`` (for throughput
benchmarks).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.fakes.local_server import LocalServer
from rag_experiments.fakes.openai_server import THOUGHT, schema_instance
from rag_experiments.llm.ollama import canonical_model_name

DEFAULT_MODELS: dict[str, str] = {
    "fake-llm:latest": "a" * 64,
    "fake-embed:latest": "b" * 64,
}
"""Model name → digest of the models the fake server "has"."""


class FakeOllamaServer(LocalServer):
    """A scripted Ollama on a free port of 127.0.0.1.

    Args:
        models: Model name → digest (names without a tag mean ``:latest``).
        latency_s: Sleep of every ``/api/chat`` in seconds.
        slow_s: Extra sleep of ``[slow]`` requests in seconds.
        embed_dim: Dimension of ``/api/embed`` vectors (hashing-trick vectors of the text).
        context_length: ``model_info.<arch>.context_length`` reported by ``/api/show``.
        thinking: The models are reasoning models (see the module docs).
        family: ``details.family`` of ``/api/show`` (``gptoss`` takes think levels).
        cut_thinking: Every thinking reply is cut while thinking.
        judge: Answer a ``format`` with the schema's smallest instance.

    Attributes:
        peak_in_flight: Most ``/api/chat`` requests being served at once (a client's
            concurrency as the server saw it).

    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        models: dict[str, str] | None = None,
        latency_s: float = 0.0,
        slow_s: float = 3.0,
        embed_dim: int = 16,
        context_length: int = 8192,
        thinking: bool = False,
        family: str = "llama",
        cut_thinking: bool = False,
        judge: bool = False,
    ) -> None:
        self.thinking = thinking
        self.family = family
        self.cut_thinking = cut_thinking
        self.judge = judge
        self.models = {canonical_model_name(k): v for k, v in (models or DEFAULT_MODELS).items()}
        self.latency_s = latency_s
        self.slow_s = slow_s
        self.context_length = context_length
        self.embedder = HashEmbedder(dim=embed_dim)
        self.counts: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return self.root

    @property
    def total(self) -> int:
        """Requests received so far, all paths."""
        with self._lock:
            return sum(self.counts.values())

    def reset_counts(self) -> None:
        """Forget the counts and recorded bodies."""
        with self._lock:
            self.counts.clear()
            self.bodies.clear()

    # --- behaviour ------------------------------------------------------------------------
    def _record(self, path: str, body: dict[str, Any]) -> None:
        with self._lock:
            self.counts[path] += 1
            self.bodies.append({"path": path, **body})

    def has(self, model: str) -> bool:
        """Whether the server "has pulled" ``model``."""
        return canonical_model_name(model) in self.models

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The ``/api/chat`` answer for a request body: ``(status, json)``."""
        model = str(body.get("model", ""))
        if not self.has(model):
            return 404, {"error": f'model "{model}" not found, try pulling it first'}
        messages = body.get("messages") or []
        first_user = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
        options = body.get("options") or {}
        num_ctx = int(options.get("num_ctx", 2048))
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            time.sleep(self.latency_s)
            if "[slow]" in first_user:
                time.sleep(self.slow_s)
        finally:
            with self._lock:
                self.in_flight -= 1
        question = first_user
        done_reason = "stop"
        prompt_eval = min(num_ctx - 1, max(1, len(json.dumps(messages)) // 4))
        think = body.get("think")
        if think and not self.thinking:
            return 400, {"error": f'"{model}" does not support thinking'}
        if body.get("format") is None:
            text = f"echo: {question}"
        elif self.judge:
            text = json.dumps(schema_instance(body["format"]))
        else:
            obj = json.dumps({"answer": question})
            if "[fenced]" in first_user:
                text = f"```json\n{obj}\n```"
            elif "[prose]" in first_user:
                text = f"Sure! Here is the JSON you asked for: {obj} Let me know if you need more."
            elif "[trailing-comma]" in first_user:
                text = obj[:-1] + ",}"
            elif "[cut]" in first_user:
                text = obj[: len(obj) // 2]
                done_reason = "length"
            elif "[bad-once]" in first_user and len(messages) <= 2:
                text = "I think the answer is yes."
            else:
                text = obj
        if "[overflow]" in first_user:
            prompt_eval = num_ctx
        message = {"role": "assistant", "content": text}
        if self.thinking and think is not False:
            thought = THOUGHT
            if self.cut_thinking:
                thought, message["content"], done_reason = (
                    thought[: len(thought) // 2],
                    "",
                    "length",
                )
            message["thinking"] = thought
        return 200, {
            "model": model,
            "created_at": "2025-01-01T00:00:00Z",
            "message": message,
            "done": True,
            "done_reason": done_reason,
            "prompt_eval_count": prompt_eval,
            "eval_count": max(1, (len(message["content"]) + len(message.get("thinking", ""))) // 4),
        }

    def embed(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The ``/api/embed`` answer: hashing-trick vectors of each input."""
        model = str(body.get("model", ""))
        if not self.has(model):
            return 404, {"error": f'model "{model}" not found, try pulling it first'}
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        vectors = self.embedder.embed_documents(texts)
        return 200, {
            "model": model,
            "embeddings": vectors.tolist(),
            "prompt_eval_count": sum(len(t) // 4 for t in texts),
        }

    def tags(self) -> dict[str, Any]:
        """The ``/api/tags`` answer."""
        return {
            "models": [
                {
                    "name": n,
                    "model": n,
                    "digest": d,
                    "size": 1,
                    "details": {"quantization_level": "Q4_0"},
                }
                for n, d in self.models.items()
            ]
        }

    def show(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The ``/api/show`` answer."""
        model = str(body.get("model") or body.get("name") or "")
        if not self.has(model):
            return 404, {"error": f"model '{model}' not found"}
        return 200, {
            "capabilities": ["completion", *(["thinking"] if self.thinking else [])],
            "details": {
                "family": self.family,
                "parameter_size": "1B",
                "quantization_level": "Q4_0",
            },
            "model_info": {
                "general.architecture": "llama",
                "llama.context_length": self.context_length,
            },
        }


def _make_handler(server: FakeOllamaServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms ACK wait)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return

        def _send(self, status: int, payload: dict[str, Any] | str) -> None:
            data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout): nothing to answer

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw or b"{}")

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            server._record(self.path, {})
            if self.path == "/api/tags":
                self._send(200, server.tags())
            elif self.path == "/api/version":
                self._send(200, {"version": "0.0.0-fake"})
            else:
                self._send(404, "404 page not found")

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self._body()
            server._record(self.path, body)
            if self.path == "/api/chat":
                self._send(*server.chat(body))
            elif self.path == "/api/embed":
                self._send(*server.embed(body))
            elif self.path == "/api/show":
                self._send(*server.show(body))
            else:
                self._send(404, "404 page not found")

    return Handler
