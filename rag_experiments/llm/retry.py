"""Retries of model calls: exponential backoff with full jitter, only for retryable errors."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from rag_experiments.errors import ConfigError
from rag_experiments.llm.errors import is_retryable

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed call.

    Attempt ``n`` (1-based) that fails with a retryable error
    (:func:`~rag_experiments.llm.errors.is_retryable`: timeout, no connection, HTTP 429/5xx)
    is followed, after a wait drawn uniformly from ``[0, min(backoff_max_s, backoff_s * 2**(n-1))]``
    ("full jitter", Brooker 2015, *Exponential Backoff And Jitter*, AWS Architecture Blog;
    tenacity's ``wait_random_exponential``), by attempt ``n + 1``, up to ``max_retries + 1``
    attempts. Any other error is raised at once.

    So one call takes at most ``(max_retries + 1) * timeout_s`` plus the waits, and the waits
    add up to at most ``sum(min(backoff_max_s, backoff_s * 2**k) for k in range(max_retries))``.

    Attributes:
        max_retries: Extra attempts after the first (0 = no retry).
        backoff_s: Scale of the first wait in seconds.
        backoff_max_s: Cap of any single wait in seconds.
    """

    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ConfigError(
                f"backoff_s and backoff_max_s must be >= 0, got {self.backoff_s}, "
                f"{self.backoff_max_s}"
            )

    def max_total_wait_s(self) -> float:
        """Upper bound of the summed backoff waits of one call, in seconds."""
        return sum(min(self.backoff_max_s, self.backoff_s * 2**k) for k in range(self.max_retries))

    def call(self, fn: Callable[[], T], what: str = "model call") -> T:
        """Run ``fn`` with retries.

        Args:
            fn: One attempt; raises typed :class:`~rag_experiments.errors.LLMError` s.
            what: Label for the retry log lines.

        Returns:
            ``fn()``'s result from the first attempt that succeeded.

        Raises:
            LLMError: The last attempt's error, or the first non-retryable one.
        """

        def _log(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            log.warning(
                "%s failed (attempt %d: %s); retrying in %.2f s",
                what,
                state.attempt_number,
                exc,
                wait,
            )

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait_random_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
            retry=retry_if_exception(is_retryable),
            before_sleep=_log,
            reraise=True,
        )
        return retrying(fn)
