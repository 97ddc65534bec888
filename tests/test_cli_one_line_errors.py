"""A fail-fast error of ``rag-exp run`` is our one line: Hydra's ``Error executing job with
overrides: [...]``, written before it re-raises the job's error, is not printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_experiments.cli import main


@pytest.mark.slow  # composes and preflights a run (fake parts)
def test_a_fail_fast_run_error_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    labels = tmp_path / "labels"
    labels.mkdir()
    argv = ["run", "llm=fake", "judge=fake", "embedder=hash", "max_samples=6"]
    assert main([*argv, f"calibration.labels={labels}"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"rag-exp run: error: calibration.labels={labels}: is a directory; give a JSONL file "
        'of {"id", "metric", "value"} or a filled grade sheet (.csv) in it'
    ]
