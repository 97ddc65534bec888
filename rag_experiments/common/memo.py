"""A memoising decorator for values that are costly to build and are asked for by many threads
at once (pydantic output models and their JSON schemas).

:func:`functools.lru_cache` does not hold other callers back while it computes a miss: when a
judge's 128 workers start together, every one of them misses and builds the same pydantic
model (issue 25, cProfile of ``bench/judge_throughput.py`` at unbounded slots: 129 builds of
one faithfulness output model and 143 JSON schemas in three judging runs of 69 questions, more
client CPU than the HTTP calls). :func:`memo` computes each miss once, under a lock, and serves
it to every caller.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def memo(maxsize: int) -> Callable[[F], F]:
    """Decorator: :func:`functools.lru_cache` of ``maxsize`` entries whose calls are serialised
    by one re-entrant lock per function, so a value is built once however many threads ask for
    it at the same time (a hit costs one uncontended lock more than ``lru_cache``).

    Args:
        maxsize: Most entries kept (least recently used dropped first).

    Returns:
        The decorator; the wrapped function keeps ``cache_info`` and ``cache_clear``.
    """

    def wrap(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        lock = threading.RLock()

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return cached(*args, **kwargs)

        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


def forgetting(*caches: Any) -> Callable[[F], F]:
    """Decorator: clear ``caches`` (functions wrapped by :func:`functools.lru_cache` or
    :func:`memo`) when the decorated call returns or raises, so what one call memoised (e.g.
    the normalised texts of a run's contexts: ~50 KB an entry for a 250-word chunk) does not
    stay in memory after it, for the life of the process.

    Args:
        *caches: Objects with a ``cache_clear()`` method.
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                for cache in caches:
                    cache.cache_clear()

        return call  # type: ignore[return-value]

    return wrap
