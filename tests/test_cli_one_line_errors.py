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


def test_an_unquoted_jmespath_override_gets_the_quoted_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hydra alone says "mismatched input '['" and names no override."""
    monkeypatch.chdir(tmp_path)
    override = "target.response.contexts=source-documents[*].text"
    assert main(["run", "embedder=hash", override]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"rag-exp run: error: override {override!r} does not parse")
    assert line.endswith(
        """quoted for Hydra inside the shell's quotes: """
        """'target.response.contexts="source-documents[*].text"'"""
    )
