"""JSON over HTTP for the model servers, with every transport failure turned into a typed
:class:`~rag_experiments.errors.LLMError` (the shared
:class:`~rag_experiments.common.http.HttpTransport` underneath)."""

from __future__ import annotations

from typing import Any

import httpx

from rag_experiments.common.http import HttpTransport, retry_after_s
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


class JsonHttp(HttpTransport):
    """A small JSON client for one model server.

    One pooled transport (thread-safe, keeps connections alive) is shared by all threads. It
    ignores proxy settings from the environment, so a request goes only to ``base_url``.

    Args:
        base_url: Server root, e.g. ``http://127.0.0.1:11434``.
        timeout_s: Limit in seconds for connecting, and for each read or write of one request
            (a non-streamed answer arrives in one read, so this bounds the whole call).
        where: Names the server in messages (``"ollama llama3.1:8b at http://…"``).
        unreachable_hint: The fix appended to "cannot connect" messages.
        headers: Extra headers (e.g. ``Authorization``); never logged or put in messages.
        max_connections: Connection pool size (at least the batch concurrency).
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
        super().__init__(
            base_url, timeout_s=timeout_s, headers=headers, max_connections=max_connections
        )
        self.where = where
        self.unreachable_hint = unreachable_hint

    def request(
        self,
        method: str,
        path: str,
        payload: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Send one request and decode the JSON answer.

        Args:
            method: ``GET`` or ``POST``.
            path: Path under ``base_url`` (``/api/chat``).
            payload: JSON body for POST.
            timeout_s: Limit of this request (None = the client's ``timeout_s``).

        Returns:
            The decoded JSON body.

        Raises:
            LLMTimeoutError: No complete answer within ``timeout_s``.
            LLMUnreachableError: No connection (refused, name not resolved).
            LLMConnectionDroppedError: The connection was made, then closed or reset before
                the answer (reason ``unreachable``, retried).
            LLMHTTPError: Status >= 400 (body kept on the error).
            LLMBadBodyError: A body that is not JSON (retried).
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            response = self.send(method, path, json=payload, timeout_s=limit)
        except httpx.TimeoutException as exc:
            raise LLMTimeoutError(
                f"{self.where}: no answer to {path} within timeout_s={limit:g} s "
                f"({type(exc).__name__}); raise timeout_s in the llm/judge config or lower "
                "max_tokens"
            ) from exc
        except httpx.ConnectError as exc:
            raise LLMUnreachableError(
                f"{self.where}: cannot connect ({type(exc).__name__}: {exc}); "
                f"{self.unreachable_hint}"
            ) from exc
        except httpx.TransportError as exc:
            raise LLMConnectionDroppedError(
                f"{self.where}: the connection was dropped before an answer to {path} "
                f"({type(exc).__name__}: {exc or 'no detail'}); the server accepted it, then "
                "closed it: it may have crashed or restarted, or a proxy cut it. Retried; if it "
                "persists, read the server's log"
            ) from exc
        if response.status_code >= 400:
            raise LLMHTTPError(
                f"{self.where}: {method} {path} failed",
                status=response.status_code,
                body=response.text,
                retry_after_s=retry_after_s(response.headers),
            )
        try:
            return response.json()
        except ValueError as exc:
            raise LLMBadBodyError(
                f"{self.where}: {path} answered with a body that is not JSON (retried: a "
                "server under load may send a cut or garbled body; if every answer is like "
                "this, is base_url the right server?)",
                status=response.status_code,
                body=response.text,
            ) from exc

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
                f"cannot reach {url} ({type(cause).__name__}: {cause}) for {self.where}; "
                f"{self.unreachable_hint}"
            ) from cause
        except LLMTimeoutError as exc:
            raise LLMTimeoutError(
                f"cannot reach {url} (no answer within {CHECK_TIMEOUT_S:g} s) for {self.where}; "
                f"{self.unreachable_hint}"
            ) from exc.__cause__
