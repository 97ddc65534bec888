"""``rag-exp compare`` and ``rag-exp report`` on runs of the size ``make run`` makes: 8
questions, judged (fake models), so every question type holds one question and some metrics one
valid pair. Before, scipy's permutation test raised "each sample in `data` must contain two or
more observations" and the commands exited 1 with a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.cli import main
from rag_experiments.tracking.store import all_tags
from rag_experiments.tracking.sweep import PARENT_RUN_ID_FILE

pytestmark = pytest.mark.slow

SMALL = ("llm=fake", "judge=fake", "embedder=hash", "max_samples=8", "progress=false")


def _rag_exp(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "rag_experiments", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_compare_and_report_on_8_question_judged_runs_and_a_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _rag_exp(tmp_path, "run", "-m", *SMALL, "retriever.top_k=3,5")
    (parent_file,) = tmp_path.glob(f"multirun/*/*/{PARENT_RUN_ID_FILE}")
    parent = parent_file.read_text().strip()
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    children = client.search_runs([exp], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent}'")
    by_job = {Path(all_tags(client, r)["job.dir"]).name: r.info.run_id for r in children}
    a, b = by_job["0"], by_job["1"]
    _rag_exp(tmp_path, "rerun", a, "--tracking-uri", uri)
    (rerun,) = client.search_runs([exp], f"tags.rerun_of = '{a}'")

    store = ["--tracking-uri", uri, "--no-log", "--n-resamples", "999"]
    for pair, extra in (
        ((a, b), []),
        ((a, rerun.info.run_id), []),
        ((a, b), ["--metrics", "nDCG@10"]),
    ):
        assert main(["compare", *pair, *store, *extra]) == 0, extra
        table = capsys.readouterr().out
        assert "8 common questions" in table and "nDCG@10" in table
    # the JSON: a rerun differs nowhere; a metric of the one unanswerable question has one pair
    assert main(["compare", a, rerun.info.run_id, *store, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert all(m["diff"] in (0.0, None) for m in result["metrics"].values())
    one = result["metrics"]["correct_refusal_rate"]
    assert (one["n"], one["ci_low"], one["p_value"], one["reason"]) == (
        1,
        None,
        1.0,
        "too_few_pairs",
    )
    assert {m["n"] for t in result["by_type"].values() for m in t.values()} <= {0, 1}

    assert main(["report", parent, "--tracking-uri", uri]) == 0
    assert "best nDCG@10" in capsys.readouterr().out
