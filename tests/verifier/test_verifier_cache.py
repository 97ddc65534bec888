"""The verifier behind the response cache: a rerun scores from the cache, calls counted."""

from __future__ import annotations

from collections.abc import Sequence

from rag_experiments.llm.cache import ResponseCache
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.verifier.base import VerifierBase
from rag_experiments.verifier.cache import CachedVerifier, verify_key


class Counting(VerifierBase):
    """P = share of the hypothesis's characters found in the premise; counts calls."""

    def __init__(self, name: str = "counting") -> None:
        self.name = name
        self.calls: list[list[tuple[str, str]]] = []

    @property
    def id(self) -> str:
        return self.name

    def describe(self) -> dict[str, str]:
        return {"provider": "test", "model": self.name}

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.calls.append(list(pairs))
        return [sum(ch in p for ch in h) / len(h) for p, h in pairs]


def test_a_second_pass_is_served_from_the_cache_and_a_new_pair_alone_is_scored(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    inner, meter = Counting(), UsageMeter("verifier")
    verifier = CachedVerifier(inner, meter, cache)
    pairs = [("abc", "ab"), ("abc", "xy")]
    assert verifier.score(pairs) == [1.0, 0.0]
    assert CachedVerifier(inner, meter, cache).score(pairs + [("abc", "ax")]) == [1.0, 0.0, 0.5]
    assert inner.calls == [pairs, [("abc", "ax")]]
    assert (meter.calls, meter.cache_hits) == (4, 2)  # 2 calls + 2 pairs from the cache
    other = Counting("another-model")
    assert CachedVerifier(other, meter, cache).score(pairs) == [1.0, 0.0]
    assert other.calls == [pairs]  # another model id is a miss
    assert verify_key("m", "p", "h") != verify_key("m", "h", "p")


def test_read_only_and_off_store_nothing(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    inner = Counting()
    CachedVerifier(inner, UsageMeter("verifier"), cache, "read_only").score([("a", "a")])
    CachedVerifier(inner, UsageMeter("verifier"), cache, "off").score([("a", "a")])
    CachedVerifier(inner, UsageMeter("verifier"), cache, "read_only").score([("a", "a")])
    assert len(inner.calls) == 3
