"""JSON over HTTP for the model servers, with every transport failure turned into a typed
:class:`~rag_experiments.errors.LLMError`.

Built on urllib3's connection pool rather than the package's shared httpx transport
(:class:`~rag_experiments.common.http.HttpTransport`): a judge at 32-128 slots sends hundreds
of requests a second from one process, and the client's CPU per call sets the floor there.
Measured on the fake OpenAI-compatible server (one request at a time, same body): httpx's
``Client`` 1.7 ms of CPU per call, its ``AsyncClient`` 3.5 ms, urllib3's ``urlopen`` 0.4 ms.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import urllib3
from urllib3 import exceptions as u3

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


class JsonHttp:
    """A small JSON client for one model server.

    One pool of kept-alive connections (thread-safe) is shared by all threads; a caller
    beyond ``max_connections`` waits for a free connection. It reads no proxy settings from the
    environment, so a request goes only to ``base_url``; HTTPS certificates are checked against
    the system's CA store.

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:11434`` or ``https://host/v1`` (its
            path is prefixed to every request path).
        timeout_s: Limit in seconds for connecting, and for each read of one request (a
            non-streamed answer arrives in one read, so this bounds the whole call).
        where: Names the server in messages (``"ollama llama3.1:8b at http://…"``).
        unreachable_hint: The fix appended to "cannot connect" messages.
        headers: Extra headers (e.g. ``Authorization``); never logged or put in messages.
        max_connections: Connection pool size (at least the requests kept in flight).
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
        self._prefix = urlsplit(self.base_url).path
        self._headers = {"Content-Type": "application/json", **(headers or {})}
        self._pool = urllib3.connection_from_url(
            self.base_url, maxsize=max(1, max_connections), block=True, retries=False
        )

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
        body = None if payload is None else json.dumps(payload).encode("utf-8")
        try:
            response = self._pool.urlopen(
                method,
                self._prefix + path,
                body=body,
                headers=self._headers,
                timeout=urllib3.Timeout(connect=limit, read=limit),
                retries=False,
                redirect=False,
            )
        except u3.NewConnectionError as exc:  # refused, name not resolved
            raise LLMUnreachableError(
                f"{self.where}: cannot connect ({type(exc).__name__}: {_reason(exc)}); "
                f"{self.unreachable_hint}"
            ) from exc
        except u3.TimeoutError as exc:
            raise LLMTimeoutError(
                f"{self.where}: no answer to {path} within timeout_s={limit:g} s "
                f"({type(exc).__name__}); raise timeout_s in the llm/judge config or lower "
                "max_tokens"
            ) from exc
        except (u3.HTTPError, OSError) as exc:  # reset, closed without an answer, TLS …
            raise LLMConnectionDroppedError(
                f"{self.where}: the connection was dropped before an answer to {path} "
                f"({type(exc).__name__}: {_reason(exc)}); the server accepted it, then "
                "closed it: it may have crashed or restarted, or a proxy cut it. Retried; if it "
                "persists, read the server's log"
            ) from exc
        if response.status >= 400:
            raise LLMHTTPError(
                f"{self.where}: {method} {path} failed",
                status=response.status,
                body=response.data.decode("utf-8", errors="replace"),
                retry_after_s=retry_after_s(response.headers),
            )
        try:
            return json.loads(response.data)
        except ValueError as exc:
            raise LLMBadBodyError(
                f"{self.where}: {path} answered with a body that is not JSON (retried: a "
                "server under load may send a cut or garbled body; if every answer is like "
                "this, is base_url the right server?)",
                status=response.status,
                body=response.data.decode("utf-8", errors="replace"),
            ) from exc

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.close()

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
    """The innermost useful text of a urllib3 error (``Connection refused``, ``Remote end
    closed connection without response``)."""
    inner = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], BaseException) else exc
    return str(inner) or type(inner).__name__
