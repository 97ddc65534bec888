"""The LLM response cache and the ``verifier`` role's usage meter around any verifier.

As :class:`~rag_experiments.retrieval.rerank.CachedReranker` does for a reranker: each pair's
probability is stored under :func:`verify_key` (the verifier's ``id`` + the pair), so a rerun
scores every pair from the cache (no model call, the same values) and a changed model, label,
window or threshold-free setting is a miss. A call of the inner verifier (one batch of the
pairs not in the cache) counts as one call on the meter (``verifier.llm_calls``), each pair
served from the cache as one cache hit (``verifier.llm_cache_hits``). ``cache.mode``:
``read_write`` looks up and stores, ``read_only`` looks up, ``off`` (or no cache) calls every
time. Only answered calls are stored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Sequence

from rag_experiments.llm.base import Completion
from rag_experiments.llm.cache import ResponseCache, cache_in_use
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.verifier.base import VerifierBase

log = logging.getLogger(__name__)


def verify_key(verifier_id: str, premise: str, hypothesis: str) -> str:
    """SHA-256 hex digest of one pair for one verifier: canonical JSON tagged ``verify`` (it
    can never equal a chat request's or a rerank's key).

    Returns:
        64 hex characters.
    """
    doc = {"verify": {"id": verifier_id, "premise": premise, "hypothesis": hypothesis}}
    blob = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CachedVerifier(VerifierBase):
    """A verifier behind the response cache and a usage meter (see the module docstring).

    Args:
        inner: The verifier.
        meter: The ``verifier`` role's usage meter.
        cache: The store, or None for no cache.
        mode: One of :data:`~rag_experiments.llm.cache.CACHE_MODES`.

    Raises:
        ConfigError: Unknown ``mode``.
    """

    def __init__(
        self,
        inner: VerifierBase,
        meter: UsageMeter,
        cache: ResponseCache | None = None,
        mode: str = "read_write",
    ) -> None:
        self.cache = cache_in_use(cache, mode, inner.cacheable)
        self.inner = inner
        self.meter = meter
        self.mode = mode
        self.max_concurrency = inner.max_concurrency

    def __repr__(self) -> str:
        return f"CachedVerifier({self.inner!r})"

    @property
    def id(self) -> str:
        """The inner verifier's id."""
        return self.inner.id

    def describe(self) -> dict[str, str]:
        """The inner verifier's tags."""
        return self.inner.describe()

    def check(self) -> None:
        """The inner verifier's check."""
        self.inner.check()

    def close(self) -> None:
        """Close the inner verifier."""
        self.inner.close()

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Each pair's cached probability, the others from one call of the inner verifier
        (stored in ``read_write``).

        Returns:
            One probability per pair, as the inner verifier's :meth:`score`.

        Raises:
            RagExpError: The inner verifier failed (counted as an error, nothing stored).
        """
        pairs = list(pairs)
        out: list[float | None] = [None] * len(pairs)
        keys = [verify_key(self.inner.id, p, h) for p, h in pairs]
        if self.cache is not None:
            for i, key in enumerate(keys):
                try:
                    hit = self.cache.get(key)
                    if hit is not None:
                        out[i] = float(json.loads(hit.text))
                        self.meter.record(hit)
                except (sqlite3.Error, ValueError, TypeError) as exc:
                    log.warning("verifier cache entry unusable (%s); calling the verifier", exc)
        missing = [i for i, v in enumerate(out) if v is None]
        if missing:
            start = time.perf_counter()
            try:
                scores = self.inner.score([pairs[i] for i in missing])
            except Exception:
                self.meter.record_error()
                raise
            elapsed = (time.perf_counter() - start) * 1000.0
            self.meter.record(
                Completion(text="", latency_ms=elapsed, finish_reason="verify", model=self.id)
            )
            for i, value in zip(missing, scores, strict=True):
                out[i] = float(value)
                if self.cache is not None and self.mode == "read_write":
                    done = Completion(text=json.dumps(float(value)), finish_reason="verify")
                    try:
                        self.cache.put(keys[i], "verifier", done)
                    except sqlite3.Error as exc:
                        log.warning("cannot store in the LLM cache %s: %s", self.cache.path, exc)
        return [float(v) for v in out]  # type: ignore[arg-type]
