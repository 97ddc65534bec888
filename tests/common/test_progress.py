"""Progress of long phases: a log line every tenth of the way, also without a terminal."""

from __future__ import annotations

import logging

import pytest

from rag_experiments.common.progress import Progress


def test_a_line_every_tenth_and_at_the_end(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rag_experiments.progress")
    with Progress(25, "judging") as bar:
        for _ in range(25):
            bar.update()
    lines = [r.getMessage() for r in caplog.records]
    # every max(1, 25 // 10) = 2 items: 2, 4, …, 24 (12 lines), then the end (25)
    assert len(lines) == 13
    assert lines[0].startswith("judging: 2/25 (8%)")
    assert lines[-1].startswith("judging: 25/25 (100%)") and "left" not in lines[-1]


def test_disabled_progress_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rag_experiments.progress")
    with Progress(5, "answering", enabled=False) as bar:
        bar.update(5)
    assert bar.done == 5 and not caplog.records
