"""JSON over HTTP/1.1 for the model servers, with every transport failure turned into a typed
:class:`~rag_experiments.errors.LLMError`.

A judge at 32-128 slots sends hundreds of requests a second from one process, and the client's
CPU per call sets the floor there (issue 25), so this client is lean: kept-alive sockets from a
small pool, one ``sendall`` per request and httptools' C parser (llhttp, the parser of Node.js
and of uvicorn) for the answer. Measured on the fake OpenAI-compatible server, one request at a
time, a 3 kB body, client CPU per call (load 9 on 2 cores): httpx's ``Client`` 1.7 ms, its
``AsyncClient`` 3.5 ms, urllib3's ``urlopen`` 0.51 ms (most of it ``http.client``'s header
parsing through the ``email`` package), ``http.client`` alone 0.24 ms, this client 0.09 ms.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
from collections import deque
from typing import Any
from urllib.parse import urlsplit

import httptools

from rag_experiments.common.http import retry_after_s
from rag_experiments.llm.errors import (
    LLMBadBodyError,
    LLMConnectionDroppedError,
    LLMHTTPError,
    LLMTimeoutError,
    LLMUnreachableError,
)

CHECK_TIMEOUT_S = 10.0
"""Seconds a model check (``check()``, run once before a job answers anything) waits for one
answer of a server; a refused connection fails at once."""

_RECV_BYTES = 65536


class _Answer:
    """httptools callbacks: the status, headers (lower-case names) and body of one answer, and
    whether its connection can be reused (asked at the end of the message: the parser says
    False once it has finished)."""

    __slots__ = ("body", "complete", "headers", "keep", "parser", "status")

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.complete = False
        self.keep = False
        self.status = 0
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.status = self.parser.get_status_code()
        self.keep = self.parser.should_keep_alive()


class _Dropped(Exception):
    """The server closed the connection before a complete answer (internal)."""


class JsonHttp:
    """A small JSON client for one model server.

    One pool of kept-alive connections (thread-safe) is shared by all threads; a caller
    beyond ``max_connections`` waits for a free connection. A pooled connection that the
    server closed while it was idle is dropped before use (as urllib3 does). It reads no proxy
    settings from the environment, so a request goes only to ``base_url``; HTTPS certificates
    are checked against the system's CA store. Answers with ``Content-Length`` or chunked
    bodies (every JSON API server) are read; one without either, ended by closing the
    connection, is taken as dropped.

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:11434`` or ``https://host/v1`` (its
            path is prefixed to every request path).
        timeout_s: Limit in seconds for connecting, and for each read of one request (a
            non-streamed answer arrives in one read, so this bounds the whole call).
        where: Names the server in messages (``"ollama llama3.1:8b at http://…"``).
        unreachable_hint: The fix appended to "cannot connect" messages.
        headers: Extra headers (e.g. ``Authorization``); never logged or put in messages.
        max_connections: Most connections open at once (at least the requests kept in
            flight).
    """

    def __init__(
        self,
        base_url: str,
        timeout_s: float,
        *,
        where: str,
        unreachable_hint: str,
        headers: dict[str, str] | None = None,
        max_connections: int = 64,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.where = where
        self.unreachable_hint = unreachable_hint
        parts = urlsplit(self.base_url)
        self._prefix = parts.path
        self._tls = ssl.create_default_context() if parts.scheme == "https" else None
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._tls else 80)
        sent = {
            "Host": parts.netloc,
            "User-Agent": "rag-experiments",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "Content-Type": "application/json",
            **(headers or {}),
        }
        self._head = "".join(f"{k}: {v}\r\n" for k, v in sent.items()).encode("latin-1")
        self._idle: deque[socket.socket] = deque()  # append/pop are atomic: no lock
        self._free = threading.BoundedSemaphore(max(1, max_connections))

    def request(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Send one request (no retry) and decode the JSON answer.

        Args:
            method: ``GET`` or ``POST``.
            path: Path under ``base_url`` (``/api/chat``).
            payload: JSON body for POST.
            timeout_s: Limit of this request (None = the client's ``timeout_s``).

        Returns:
            The decoded JSON body.

        Raises:
            LLMTimeoutError: No connection or no complete answer within ``timeout_s``.
            LLMUnreachableError: No connection (refused, name not resolved).
            LLMConnectionDroppedError: The connection was made, then closed or reset before
                the answer (reason ``unreachable``, retried).
            LLMHTTPError: Status >= 400 (body kept on the error).
            LLMBadBodyError: A body that is not JSON (retried).
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        body = b"" if payload is None else json.dumps(payload).encode("utf-8")
        message = b"%s %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (
            method.encode("ascii"),
            (self._prefix + path).encode("utf-8"),
            self._head,
            len(body),
            body,
        )
        with self._free:
            sock = self._connection(limit)
            try:
                status, answer, keep = self._exchange(sock, message, limit)
            except TimeoutError as exc:
                sock.close()
                raise LLMTimeoutError(
                    f"{self.where}: no answer to {path} within timeout_s={limit:g} s "
                    f"({type(exc).__name__}); raise timeout_s in the llm/judge config or lower "
                    "max_tokens"
                ) from exc
            except (_Dropped, OSError, httptools.HttpParserError) as exc:
                sock.close()
                raise LLMConnectionDroppedError(
                    f"{self.where}: the connection was dropped before an answer to {path} "
                    f"({type(exc).__name__}: {_reason(exc)}); the server accepted it, then "
                    "closed it: it may have crashed or restarted, or a proxy cut it. Retried; "
                    "if it persists, read the server's log"
                ) from exc
            if keep:
                self._idle.append(sock)
            else:
                sock.close()
        data = b"".join(answer.body)
        if status >= 400:
            raise LLMHTTPError(
                f"{self.where}: {method} {path} failed",
                status=status,
                body=data.decode("utf-8", errors="replace"),
                retry_after_s=retry_after_s(answer.headers),
            )
        try:
            return json.loads(data)
        except ValueError as exc:
            raise LLMBadBodyError(
                f"{self.where}: {path} answered with a body that is not JSON (retried: a "
                "server under load may send a cut or garbled body; if every answer is like "
                "this, is base_url the right server?)",
                status=status,
                body=data.decode("utf-8", errors="replace"),
            ) from exc

    def _connection(self, limit: float) -> socket.socket:
        """An idle pooled connection the server has not closed, or a new one.

        Raises:
            LLMUnreachableError: Connection refused or name not resolved.
            LLMTimeoutError: No connection within ``limit``.
        """
        while True:
            try:
                sock = self._idle.pop()
            except IndexError:
                break
            # readable while idle = closed by the server (or stray bytes): not reusable
            idle = select.poll()  # not select(): file descriptors may be above 1024
            idle.register(sock, select.POLLIN)
            if idle.poll(0):
                sock.close()
                continue
            if sock.gettimeout() != limit:
                sock.settimeout(limit)
            return sock
        try:
            sock = socket.create_connection((self._host, self._port), timeout=limit)
        except TimeoutError as exc:
            raise LLMTimeoutError(
                f"{self.where}: no connection within timeout_s={limit:g} s "
                f"({type(exc).__name__}); {self.unreachable_hint}"
            ) from exc
        except OSError as exc:  # refused, name not resolved
            raise LLMUnreachableError(
                f"{self.where}: cannot connect ({type(exc).__name__}: {_reason(exc)}); "
                f"{self.unreachable_hint}"
            ) from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
            except OSError as exc:  # ssl.SSLError is an OSError
                sock.close()
                raise LLMUnreachableError(
                    f"{self.where}: cannot connect ({type(exc).__name__}: {_reason(exc)}); "
                    f"{self.unreachable_hint}"
                ) from exc
        return sock

    @staticmethod
    def _exchange(sock: socket.socket, message: bytes, limit: float) -> tuple[int, _Answer, bool]:
        """Send ``message``, read one answer: ``(status, answer, connection reusable)``.

        Raises:
            TimeoutError: No complete answer within ``limit`` per read.
            _Dropped: The server closed the connection before a complete answer.
            OSError: Reset or another socket error.
            httptools.HttpParserError: Not an HTTP answer.
        """
        sock.sendall(message)
        answer = _Answer()
        while not answer.complete:
            chunk = sock.recv(_RECV_BYTES)
            if not chunk:
                raise _Dropped("Remote end closed connection without response")
            answer.parser.feed_data(chunk)
        return answer.status, answer, answer.keep

    def close(self) -> None:
        """Close the pooled connections."""
        while True:
            try:
                self._idle.pop().close()
            except IndexError:
                return

    def probe(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """One request of a model check: :meth:`request` with :data:`CHECK_TIMEOUT_S` and no
        retry, a transport failure said as "cannot reach <url>".

        Raises:
            LLMUnreachableError: Connection refused or name not resolved.
            LLMConnectionDroppedError: The connection was closed before the answer.
            LLMTimeoutError: No answer within :data:`CHECK_TIMEOUT_S`.
            LLMHTTPError: Status >= 400, or a body that is not JSON.
        """
        url = f"{self.base_url}{path}"
        try:
            return self.request(method, path, payload, timeout_s=CHECK_TIMEOUT_S)
        except LLMConnectionDroppedError:
            raise
        except LLMUnreachableError as exc:
            cause = exc.__cause__
            raise LLMUnreachableError(
                f"cannot reach {url} ({type(cause).__name__}: {_reason(cause)}) for "
                f"{self.where}; "
                f"{self.unreachable_hint}"
            ) from cause
        except LLMTimeoutError as exc:
            raise LLMTimeoutError(
                f"cannot reach {url} (no answer within {CHECK_TIMEOUT_S:g} s) for {self.where}; "
                f"{self.unreachable_hint}"
            ) from exc.__cause__


def _reason(exc: BaseException) -> str:
    """The innermost useful text of a socket error (``[Errno 111] Connection refused``,
    ``Remote end closed connection without response``)."""
    return str(exc) or type(exc).__name__
