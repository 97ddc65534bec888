"""Per-role usage counters (generator, judge, …) for the tracker."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from rag_experiments.llm.base import Completion

COUNTERS = (
    "calls",
    "cache_hits",
    "errors",
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
)
"""The counters of a :class:`UsageMeter`."""


@dataclass
class UsageMeter:
    """Counts the calls of every model built for one role (thread-safe).

    Attributes:
        role: ``generator``, ``judge`` …
        calls: ``complete`` calls, answered or failed, cache hits included.
        cache_hits: Calls answered from the response cache (no model call).
        errors: Calls that raised.
        prompt_tokens: Prompt tokens sent to the model this run (cache hits add none).
        reused_prompt_tokens: Of ``prompt_tokens``, those the server says it took from its
            prompt (KV) cache instead of computing them (0 when it does not say).
        completion_tokens: Completion tokens the model generated this run (cache hits add
            none).
        reasoning_tokens: Of ``completion_tokens``, those a reasoning model spent thinking
            (reported by the server, else estimated from the reasoning text:
            :attr:`~rag_experiments.common.usage.Usage.reasoning_tokens`).
        cache_hit_prompt_tokens: Prompt tokens of the answers served from the response cache
            (or shared with an identical request in flight): not sent, shown apart.
        cache_hit_completion_tokens: Their completion tokens.
    """

    role: str
    calls: int = 0
    cache_hits: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cache_hit_prompt_tokens: int = 0
    cache_hit_completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, completion: Completion) -> None:
        """Count one answered call."""
        with self._lock:
            self.calls += 1
            if completion.cached:
                self.cache_hits += 1
                self.cache_hit_prompt_tokens += completion.cached_usage.prompt_tokens
                self.cache_hit_completion_tokens += completion.cached_usage.completion_tokens
            else:
                self.prompt_tokens += completion.usage.prompt_tokens
                self.reused_prompt_tokens += completion.usage.cached_prompt_tokens
                self.completion_tokens += completion.usage.completion_tokens
                self.reasoning_tokens += completion.usage.reasoning_tokens

    def record_error(self, exc: BaseException | None = None) -> None:
        """Count one failed call (and the tokens it consumed, when its
        :class:`~rag_experiments.errors.LLMError` carries them: a reply cut while reasoning
        spent the whole budget)."""
        usage = getattr(exc, "usage", None)
        with self._lock:
            self.calls += 1
            self.errors += 1
            if usage is not None:
                self.prompt_tokens += usage.prompt_tokens
                self.completion_tokens += usage.completion_tokens
                self.reasoning_tokens += usage.reasoning_tokens

    def counts(self) -> dict[str, int]:
        """The counters as ``{"calls", "cache_hits", "errors", "prompt_tokens",
        "completion_tokens", "reasoning_tokens"}`` (what :meth:`add` takes back)."""
        with self._lock:
            return {name: int(getattr(self, name)) for name in COUNTERS}

    def add(self, counts: dict[str, int]) -> None:
        """Add counters saved by :meth:`counts` (the usage of an earlier attempt of the same
        run); unknown keys are ignored, missing ones count 0."""
        with self._lock:
            for name in COUNTERS:
                setattr(self, name, getattr(self, name) + int(counts.get(name, 0)))

    def metrics(self) -> dict[str, float]:
        """``<role>.llm_calls``, ``.llm_cache_hits``, ``.llm_cache_hit_rate`` (hits / calls;
        left out when there was no call), ``.llm_errors``, ``.prompt_tokens`` (sent this run),
        ``.reused.prompt_tokens`` (of those, taken from the server's prompt cache),
        ``.completion_tokens``, ``.reasoning_tokens`` (of those, spent reasoning), and
        ``.cache_hit.prompt_tokens`` / ``.cache_hit.completion_tokens`` (of answers served by
        the response cache, not sent). Every token key ends in ``.prompt_tokens``,
        ``.completion_tokens`` or ``.reasoning_tokens``."""
        with self._lock:
            out = {
                f"{self.role}.llm_calls": float(self.calls),
                f"{self.role}.llm_cache_hits": float(self.cache_hits),
                f"{self.role}.llm_errors": float(self.errors),
                f"{self.role}.prompt_tokens": float(self.prompt_tokens),
                f"{self.role}.reused.prompt_tokens": float(self.reused_prompt_tokens),
                f"{self.role}.completion_tokens": float(self.completion_tokens),
                f"{self.role}.reasoning_tokens": float(self.reasoning_tokens),
                f"{self.role}.cache_hit.prompt_tokens": float(self.cache_hit_prompt_tokens),
                f"{self.role}.cache_hit.completion_tokens": float(self.cache_hit_completion_tokens),
            }
            if self.calls:
                out[f"{self.role}.llm_cache_hit_rate"] = self.cache_hits / self.calls
        return out
