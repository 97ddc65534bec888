"""rag_experiments.common.memo: a value asked for by many threads at once is built once."""

from __future__ import annotations

import threading
import time

from rag_experiments.common.memo import memo
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
