"""SIGTERM and SIGINT end runs KILLED (MLflow's status for it) with tag ``error`` saying why,
a sweep's parent and child alike, and the interrupted run resumes. Before, SIGTERM ended the
process at once and left every run RUNNING for ever."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.common import interrupt

# answers take 1 s each (one at a time), so the signal arrives while the run is answering
SLOW_RUN = (
    "llm=fake", "llm.delay_s=1", "max_concurrency=1", "judge=fake", "embedder=hash",
    "metrics=custom", "max_samples=4", "progress=false",
)  # fmt: skip
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def test_handled_turns_sigterm_into_interrupted_and_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(interrupt.Interrupted, match="stopped by SIGTERM") as info:
        with interrupt.handled():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in the main thread before this ends
    assert isinstance(info.value, KeyboardInterrupt) and info.value.signal_name == "SIGTERM"
    assert interrupt.received() == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


def _default_signals() -> None:
    """In the child, before Python starts: SIGINT and SIGTERM back to their defaults. A test
    session started as a shell's background job (``cmd &`` without job control) ignores SIGINT,
    the child would inherit that, and the run rightly leaves an ignored signal alone."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _start(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rag_experiments", "run", *args],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_signals,  # noqa: PLW1509 - only signal dispositions, no locks
    )


def _signal_after_first_answer(proc: subprocess.Popen[str], cwd: Path, sig: int) -> str:
    """Send ``sig`` once a checkpoint holds an answer; return stderr after the exit."""
    deadline = time.monotonic() + 600
    while not any(p.stat().st_size for p in cwd.glob("**/responses.jsonl")):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no answer was checkpointed"
        time.sleep(0.2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return err


def _runs(cwd: Path) -> list:
    client = MlflowClient(f"sqlite:///{cwd}/mlruns.db")
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    return client.search_runs([experiment])


@pytest.mark.slow
def test_sigterm_ends_the_run_killed_and_resume_finishes_it(tmp_path: Path) -> None:
    err = _signal_after_first_answer(_start(tmp_path, *SLOW_RUN), tmp_path, signal.SIGTERM)
    assert "rag-exp run: stopped by SIGTERM" in err
    (run,) = _runs(tmp_path)
    assert run.info.status == "KILLED"
    assert run.data.tags["error"].startswith("Interrupted: stopped by SIGTERM")

    done = subprocess.run(
        [sys.executable, "-m", "rag_experiments", "run", *SLOW_RUN, f"resume={run.info.run_id}"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (resumed,) = _runs(tmp_path)
    assert resumed.info.status == "FINISHED" and resumed.data.metrics["n_samples"] == 4
    assert "error" not in resumed.data.tags  # the stop is kept as the resume's reason
    assert resumed.data.tags["resumed_after_error"].startswith("Interrupted: stopped by SIGTERM")


@pytest.mark.slow
def test_sigint_ends_a_sweep_parent_and_child_killed(tmp_path: Path) -> None:
    proc = _start(tmp_path, "-m", *SLOW_RUN, "retriever.top_k=3,5")
    _signal_after_first_answer(proc, tmp_path, signal.SIGINT)
    runs = _runs(tmp_path)
    (parent,) = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    (child,) = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]  # the 2nd never began
    assert (parent.info.status, child.info.status) == ("KILLED", "KILLED")
    assert parent.data.tags["error"] == "Interrupted: the sweep was stopped by SIGINT"
    assert child.data.tags["error"].startswith("Interrupted: stopped by SIGINT")
    assert parent.data.metrics["sweep.children.killed"] == 1


@pytest.mark.slow
def test_close_sweep_after_a_signal_kills_the_children_still_running(tmp_path: Path) -> None:
    """A job in another process (joblib, Ray) may still be RUNNING when the interrupted sweep
    closes its parent: it is ended KILLED with the parent; a FINISHED child is left alone."""
    from rag_experiments.tracking.sweep import close_sweep, write_parent_run_id

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sweep")
    parent = client.create_run(experiment).info.run_id
    tags = {MLFLOW_PARENT_RUN_ID: parent}
    running = client.create_run(experiment, tags=tags).info.run_id
    finished = client.create_run(experiment, tags=tags).info.run_id
    client.set_terminated(finished, "FINISHED")
    write_parent_run_id(tmp_path / "sweep", parent)
    status = close_sweep(uri, str(tmp_path / "sweep"), aborted=True, signal_name="SIGTERM")
    assert status == "KILLED"
    runs = {r: client.get_run(r) for r in (parent, running, finished)}
    assert [runs[r].info.status for r in (parent, running, finished)] == [
        "KILLED",
        "KILLED",
        "FINISHED",
    ]
    why = "Interrupted: the sweep was stopped by SIGTERM"
    assert runs[parent].data.tags["error"] == runs[running].data.tags["error"] == why
    assert "error" not in runs[finished].data.tags
    assert runs[parent].data.metrics["sweep.children.killed"] == 1
    # without a signal the aborted sweep's parent ends FAILED, as before
    other = client.create_run(experiment).info.run_id
    write_parent_run_id(tmp_path / "other", other)
    assert close_sweep(uri, str(tmp_path / "other"), aborted=True) == "FAILED"
