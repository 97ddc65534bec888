"""rag_experiments.common.memo: a value asked for by many threads at once is built once."""

from __future__ import annotations

import functools
import math
import threading
import time

import pytest

from rag_experiments.common.memo import forgetting, memo
from rag_experiments.metrics.prompts import faithfulness


def test_many_threads_asking_at_once_build_the_value_once() -> None:
    built: list[int] = []

    @memo(maxsize=4)
    def slow(n: int) -> list[int]:
        built.append(n)
        time.sleep(0.05)  # long enough for every thread to ask while it is being built
        return [n]

    start = threading.Barrier(8)
    got: list[list[int]] = []

    def ask() -> None:
        start.wait()
        got.append(slow(3))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == [3]
    assert len(got) == 8 and all(g is got[0] for g in got)  # the one object, shared
    assert slow.cache_info().hits == 7  # type: ignore[attr-defined]


def test_least_recently_used_entries_are_dropped() -> None:
    built: list[int] = []

    @memo(maxsize=2)
    def square(n: int) -> int:
        built.append(n)
        return n * n

    assert [square(2), square(3), square(2), square(4), square(3)] == [4, 9, 4, 16, 9]
    assert built == [2, 3, 4, 3]  # 3 was the least recently used when 4 came in


def test_the_judge_output_models_are_built_once_per_shape() -> None:
    assert faithfulness.output_model(5) is faithfulness.output_model(5)
    assert faithfulness.output_model(5) is not faithfulness.output_model(4)


def test_forgetting_clears_the_caches_after_the_call_even_when_it_raises() -> None:
    seen: list[int] = []

    @functools.lru_cache(maxsize=8)
    def square(x: int) -> int:
        seen.append(x)
        return x * x

    @forgetting(square)
    def total(xs: list[int]) -> int:
        if not xs:
            raise ValueError("empty")
        return sum(square(x) for x in xs)

    assert total([2, 3, 2]) == 4 + 9 + 4
    assert seen == [2, 3]  # memoised within the call
    assert square.cache_info().currsize == 0  # and forgotten after it
    square(5)
    with pytest.raises(ValueError, match="empty"):
        total([])
    assert square.cache_info().currsize == 0


def test_the_text_metrics_keep_no_context_text_after_a_run() -> None:
    """The per-context memos of the keyword and retrieval metrics live for one evaluate()."""
    from rag_experiments.metrics import context_match, keyword_coverage, keyword_faithfulness
    from rag_experiments.metrics.keyword_coverage import KeywordCoverage
    from rag_experiments.metrics.keyword_faithfulness import KeywordFaithfulness
    from rag_experiments.metrics.retrieval import RetrievalMetrics
    from rag_experiments.records import RagResponse, Sample

    sample = Sample(
        id="a", user_input="q?", keywords=["badge"], reference_contexts=["Badges expire yearly."]
    )
    resp = RagResponse(
        response="Badges expire every year.",
        retrieved_contexts=["Badges expire yearly.", "Call the help desk."],
        retrieved_doc_ids=["d1"],
    )
    caches = {
        KeywordCoverage(): keyword_coverage._norm_context,
        KeywordFaithfulness(): keyword_faithfulness._context_words,
        RetrievalMetrics(cutoffs=[1]): context_match.normalised_texts,
    }
    for metric, cache in caches.items():
        (row,) = metric.evaluate([sample], [resp])
        # the contexts were read (a value, not only NaNs), and their memo is empty after
        assert any(not math.isnan(v.value) for v in row.values()), row
        assert cache.cache_info().currsize == 0, type(metric).__name__
