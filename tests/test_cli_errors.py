"""Every ``rag-exp`` command prints our own errors as one line, ``rag-exp <command>: error:
<what, where, fix>``, exits 1 (``gate``, ``promote``: 2, as CI must not read a wrong
input as a failed rule) and shows no stack trace, whether the command is a Hydra app
(``run``, ``serve``, ``generate``: Hydra's own reporting printed the whole stack of a
:class:`~rag_experiments.errors.RagExpError` raised in a task) or not. Each command gets a bad
input that fails early, in its own process, all processes at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fpdf import FPDF
from mlflow import MlflowClient

pytestmark = pytest.mark.slow  # 12 processes that import the package and MLflow


def _bad_inputs(tmp: Path, uri: str) -> dict[str, tuple[list[str], str]]:
    """Command → (arguments, a phrase of the expected message)."""
    scans = tmp / "scans"
    scans.mkdir()
    pdf = FPDF()  # a page with a drawing and no text: what a scanner makes
    pdf.add_page()
    pdf.rect(10, 10, 50, 50)
    pdf.output(str(scans / "scan.pdf"))
    (tmp / "bad.jsonl").write_text('{"id": "q1", "user_input": \n', encoding="utf-8")
    (tmp / "init" / "conf" / "experiment").mkdir(parents=True)
    (tmp / "init" / "conf" / "experiment" / "starter.yaml").write_text("# mine\n")
    store = ["--tracking-uri", uri]
    return {
        "run": (["~dataset"], "no dataset selected"),
        "serve": (["~dataset"], "no dataset selected"),
        "generate": (
            [f"docs={scans}", f"out={tmp / 'out'}", "llm=fake", f"tracking.uri={uri}"],
            "Run OCR first",
        ),
        "compare": (["a", "b", "--threshold", "nDCG@10", *store], "is not NAME=VALUE"),
        "report": (["nope", *store], "neither a run id nor an experiment"),
        "merge": (["nope", *store], "cannot find the parent run 'nope'"),
        "export": (["nope", "--format", "jsonl", "--out", str(tmp / "x.jsonl"), *store], "nope"),
        "rerun": (["nope", *store], "cannot find run 'nope'"),
        "gate": (["nope", "--baseline", "base", *store], "run 'nope' not found"),
        "promote": (["nope", "--alias", "production", *store], "run 'nope' not found"),
        "judge-check": (
            ["judge=fake", f"judge_check.data={tmp / 'none.jsonl'}"],
            "does not exist",
        ),
        "dataset": (["stats", str(tmp / "bad.jsonl")], "invalid JSON"),
        "review": ([f"dataset={tmp / 'bad.jsonl'}", "--port", "0"], "invalid JSON"),
        "init": (["--dir", str(tmp / "init")], "Pass --force"),
    }


def test_every_command_prints_our_errors_as_one_line_without_a_traceback(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    MlflowClient(uri).search_experiments()  # the store's tables, once, before the processes
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    inputs = _bad_inputs(tmp_path, uri)
    procs = {
        cmd: subprocess.Popen(
            [sys.executable, "-m", "rag_experiments", cmd, *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cmd, (args, _) in inputs.items()
    }
    for cmd, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        code = 2 if cmd in ("gate", "promote") else 1
        assert proc.returncode == code, f"rag-exp {cmd}: exit {proc.returncode}\n{err[-3000:]}"
        assert "Traceback" not in err, f"rag-exp {cmd}:\n{err[-3000:]}"
        (line,) = [x for x in err.splitlines() if x.startswith(f"rag-exp {cmd}: error: ")]
        assert inputs[cmd][1] in err, f"rag-exp {cmd}:\n{err[-3000:]}"
