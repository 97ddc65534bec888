"""Issue 27 (2): ``kill -9`` while a run writes its traces, then ``resume=<run id>``, leaves
exactly one complete trace per question (it used to leave 138 traces for 69 questions, half of
them without spans).

The run is killed at several points of its end-of-run trace logging, one after the other, each
time in the resumed run: after the first transaction of traces (3 of 8 written), after the
second one of the resumed run (the old ones replaced, 6 of 8 written), and right after the
old traces were deleted. A small driver process makes the kill: it wraps one function of
:mod:`rag_experiments.tracking.trace_sql` so the process sends itself SIGKILL after its
``n``-th call, then runs ``rag-exp run`` as usual."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.tracking.store import read_table

SAMPLE = PROJECT_ROOT / "datasets" / "sample"
N_QUESTIONS = 8

DRIVER = """
import os, signal, sys
from rag_experiments.tracking import trace_log, trace_sql

trace_log.TRACES_PER_TRANSACTION = 3  # several transactions and span calls for 8 questions
trace_sql.TRACES_PER_TRANSACTION = 3
trace_log.SPANS_PER_CALL = 5
where, nth = sys.argv[1].split(":")
calls = []

def killing(original):
    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(1)
        if len(calls) == int(nth):
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return wrapped

if where == "insert":
    trace_sql._insert_sql = killing(trace_sql._insert_sql)
elif where == "delete":
    trace_sql.SqlTraceWriter.delete_existing = killing(trace_sql.SqlTraceWriter.delete_existing)
sys.argv = ["rag-exp", *sys.argv[2:]]
from rag_experiments.app import hydra_main
hydra_main()
"""


def _overrides(tmp_path: Path) -> list[str]:
    dataset = tmp_path / "small.jsonl"
    lines = (SAMPLE / "eval.jsonl").read_text(encoding="utf-8").splitlines()[:N_QUESTIONS]
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [
        "dataset=jsonl", f"dataset.path={dataset}", f"dataset.corpus={SAMPLE / 'docs'}",
        "dataset.name=small", "embedder=hash", "llm=fake", "judge=fake", "metrics=custom",
        f"tracking.uri=sqlite:///{tmp_path}/mlruns.db", f"paths.cache_dir={tmp_path}/cache",
        "progress=false", f"hydra.run.dir={tmp_path / 'job'}",
    ]  # fmt: skip


def _run(tmp_path: Path, kill_at: str | None, *extra: str) -> int:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    if kill_at is None:
        cmd = [sys.executable, "-m", "rag_experiments", "run"]
    else:
        cmd = [sys.executable, "-c", DRIVER, kill_at]
    done = subprocess.run(
        [*cmd, *_overrides(tmp_path), *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return done.returncode


def _traces(uri: str, experiment_id: str, include_spans: bool = True) -> list:
    """The experiment's traces (``include_spans=False``: also those without spans)."""
    mlflow.set_tracking_uri(uri)
    return mlflow.search_traces(
        locations=[experiment_id], return_type="list", include_spans=include_spans
    )


@pytest.mark.slow
def test_kill_9_during_trace_logging_then_resume_leaves_one_complete_trace_per_question(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    assert _run(tmp_path, "insert:1") == -9  # 3 of 8 traces written, with their spans
    client = MlflowClient(uri)
    experiment_id = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment_id])
    run_id = run.info.run_id
    assert len(_traces(uri, experiment_id, include_spans=False)) == 3
    assert len(_traces(uri, experiment_id)) == 3

    assert _run(tmp_path, "insert:2", f"resume={run_id}") == -9  # 3 replaced, 6 of 8 written
    assert len(_traces(uri, experiment_id, include_spans=False)) == 6

    assert _run(tmp_path, "delete:1", f"resume={run_id}") == -9  # the old ones deleted
    assert _traces(uri, experiment_id, include_spans=False) == []

    assert _run(tmp_path, None, f"resume={run_id}") == 0
    assert client.get_run(run_id).info.status == "FINISHED"
    assert len(client.search_runs([experiment_id])) == 1
    table = read_table(client, run_id).set_index("id")
    assert len(_traces(uri, experiment_id, include_spans=False)) == N_QUESTIONS
    found = _traces(uri, experiment_id)
    assert sorted(t.info.client_request_id for t in found) == sorted(table.index)
    for trace in found:
        assert sorted(s.name for s in trace.data.spans) == ["generate", "question", "retrieve"]
        names = [a.name for a in trace.info.assessments]
        assert len(names) == len(set(names))  # each assessment once
        feedback = {a.name: a.value for a in trace.info.assessments if a.feedback is not None}
        row = table.loc[trace.info.client_request_id]
        for name, value in feedback.items():
            if value is not None:
                assert value == pytest.approx(float(row[name]))
        assert trace.info.trace_metadata["mlflow.sourceRun"] == run_id
