r"""Typed errors of the model layer, one per failure reason, each naming the fix.

Every class derives from :class:`~rag_experiments.errors.LLMError` and carries a short
machine-readable ``reason`` that ends up in ``RagResponse.error`` and in metric NaN reasons:

===================================  ====================  ========  ===============================
class                                ``reason``            retried   typical fix
===================================  ====================  ========  ===============================
:class:`LLMTimeoutError`             ``timeout``           yes       raise ``timeout_s``
:class:`LLMUnreachableError`         ``unreachable``       yes\*     start the server / fix base_url
:class:`LLMConnectionDroppedError`   ``unreachable``       yes       read the server's log
:class:`ModelNotFoundError`          ``model_not_found``   no        ``ollama pull <model>``
:class:`LLMHTTPError`                ``http_error``        429, 5xx  read the body snippet
:class:`LLMBadBodyError`             ``http_error``        yes       check ``base_url``
:class:`ContextOverflowError`        ``context_overflow``  no        raise num_ctx / fewer contexts
:class:`LLMTruncatedError`           ``truncated``         no        raise ``max_tokens``
:class:`ReasoningTruncatedError`     ``reasoning_trunc…``  no        ``max_tokens``, reasoning=off
:class:`LLMParseError`               ``parse_error``       N times   a larger model / clearer prompt
===================================  ====================  ========  ===============================

(\* not at a model check, ``check()``: a refused connection there fails at once.
``parse_error`` is retried ``parse_retries`` times by asking the model to repair its reply; the
others marked "yes" say ``retryable`` and are retried ``max_retries`` times with exponential
backoff and jitter: :class:`~rag_experiments.common.http.RetryPolicy`,
:func:`~rag_experiments.common.http.is_retryable`.)
"""

from __future__ import annotations

from rag_experiments.common.http import RETRYABLE_STATUS, is_retryable
from rag_experiments.errors import LLMError
from rag_experiments.llm.parsing import LLMParseError, LLMTruncatedError
from rag_experiments.llm.reasoning import ReasoningTruncatedError

__all__ = [
    "RETRYABLE_STATUS",
    "ContextOverflowError",
    "LLMError",
    "LLMBadBodyError",
    "LLMConnectionDroppedError",
    "LLMHTTPError",
    "LLMParseError",
    "LLMTimeoutError",
    "LLMTruncatedError",
    "LLMUnreachableError",
    "ModelNotFoundError",
    "ReasoningTruncatedError",
    "is_retryable",
]

BODY_SNIPPET_CHARS = 300
"""How much of an error response body an :class:`LLMHTTPError` message quotes."""


class LLMTimeoutError(LLMError):
    """The call took longer than ``timeout_s``."""

    reason = "timeout"
    retryable = True


class LLMUnreachableError(LLMError):
    """No connection to the model server (refused, reset, DNS failure)."""

    reason = "unreachable"
    retryable = True


class LLMConnectionDroppedError(LLMUnreachableError):
    """The server accepted the connection, then closed or reset it before answering (a crash,
    a restart, a proxy's cut). Reason ``unreachable`` (no answer came), retried; the message
    says what happened instead of "cannot connect"."""


class ModelNotFoundError(LLMError):
    """The server answers but does not have the configured model."""

    reason = "model_not_found"


class LLMHTTPError(LLMError):
    """The server answered with an HTTP error status.

    Args:
        message: What failed and how to fix it (the body snippet is appended).
        status: The HTTP status code.
        body: The response body (only its first :data:`BODY_SNIPPET_CHARS` characters are
            quoted in the message).
        retry_after_s: The server's ``Retry-After`` in seconds, if it sent one.
    """

    reason = "http_error"

    def __init__(
        self, message: str, *, status: int, body: str = "", retry_after_s: float | None = None
    ) -> None:
        self.status = status
        self.retryable = status in RETRYABLE_STATUS
        self.body = body
        self.retry_after_s = retry_after_s
        snippet = " ".join(body.split())[:BODY_SNIPPET_CHARS]
        super().__init__(f"{message} (HTTP {status}: {snippet or '<empty body>'})")


class LLMBadBodyError(LLMHTTPError):
    """A success status whose body is not JSON (cut or garbled under load, or not a model
    server at all). Reason ``http_error``; retried like other transient failures."""

    def __init__(self, message: str, *, status: int, body: str = "") -> None:
        super().__init__(message, status=status, body=body)
        self.retryable = True


class ContextOverflowError(LLMError):
    """The prompt does not fit the model's context window.

    Args:
        message: What failed and how to fix it.
        prompt_tokens: The prompt's size in tokens (estimated or reported), if known.
        context_window: The window in tokens, if known.
    """

    reason = "context_overflow"

    def __init__(
        self, message: str, *, prompt_tokens: int | None = None, context_window: int | None = None
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.context_window = context_window
        super().__init__(message)


SERVICE_ERROR_REASONS = frozenset(
    {"unreachable", "timeout", "http_error", "model_not_found", "unexpected_error"}
)
"""Reasons that say the model service failed (down, overloaded, misconfigured), not that the
content was hard to judge: a run losing too many cells to them fails
(``max_failure_rate``)."""

JUDGE_ERROR_REASONS = SERVICE_ERROR_REASONS | {
    "context_overflow",
    "truncated",
    "reasoning_truncated",
    "parse_error",
    "llm_error",
}
"""Every reason a judge call can fail with (counted per run as ``judge.errors.<reason>``)."""

FATAL_JUDGE_REASONS = SERVICE_ERROR_REASONS | {"reasoning_truncated"}
"""Judge failures that say the judge cannot work as configured, not that a row was hard to
judge: the service reasons, and a reasoning judge whose budget ends before its answer
(:class:`~rag_experiments.llm.reasoning.ReasoningTruncatedError`). A run losing more than
``max_failure_rate`` of a judged column to them fails."""
