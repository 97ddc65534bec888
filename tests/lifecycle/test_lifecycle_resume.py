"""Resume after a crash: ``kill -9`` a ``rag-exp run`` mid-way, then ``resume=<run_id>`` (and
``resume=<job dir>``) continues the same MLflow run; every sample appears exactly once and only
the missing questions are answered again. Plus the checkpoint store on its own."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.lifecycle.checkpoint import CheckpointedTarget, ResponseCheckpoint
from rag_experiments.llm.factory import ModelSession
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.records import RagResponse, Sample
from rag_experiments.tracking.store import all_tags

SAMPLE = PROJECT_ROOT / "datasets" / "sample"
N_QUESTIONS = 8
DELAY_S = 0.5
"""FakeChat sleeps this long per answer, so the run is slow enough to kill mid-way."""


def _small_dataset(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    lines = (SAMPLE / "eval.jsonl").read_text(encoding="utf-8").splitlines()[:N_QUESTIONS]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _cmd(tmp_path: Path, job_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "rag_experiments", "run",
        "dataset=jsonl", f"dataset.path={_small_dataset(tmp_path)}",
        f"dataset.corpus={SAMPLE / 'docs'}",
        "dataset.name=small", "embedder=hash", "llm=fake", f"llm.delay_s={DELAY_S}",
        "metrics=retrieval", "metrics.generate=true",
        f"tracking.uri=sqlite:///{tmp_path}/mlruns.db", f"paths.cache_dir={tmp_path}/cache",
        "progress=false", f"hydra.run.dir={job_dir}", *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def _kill_after(tmp_path: Path, job_dir: Path, n_lines: int) -> str:
    """Start a run, ``kill -9`` it once ``n_lines`` answers are checkpointed; its run id."""
    proc = subprocess.Popen(
        _cmd(tmp_path, job_dir),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    responses = job_dir / "responses.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if responses.exists() and len(responses.read_text().splitlines()) >= n_lines:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return json.loads((job_dir / "checkpoint.json").read_text())["run_id"]


def _per_query(client: mlflow.MlflowClient, run_id: str) -> pd.DataFrame:
    local = client.download_artifacts(run_id, "per_query_results.csv")
    return pd.read_csv(io.StringIO(Path(local).read_text(encoding="utf-8")))


@pytest.mark.slow
def test_kill_9_then_resume_answers_every_sample_exactly_once(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    run_id = _kill_after(tmp_path, job_dir, n_lines=2)
    answered_before = len((job_dir / "responses.jsonl").read_text().splitlines())
    assert 2 <= answered_before < N_QUESTIONS

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    assert client.get_run(run_id).info.status == "RUNNING"  # killed: nobody ended it
    done = subprocess.run(
        _cmd(tmp_path, tmp_path / "job2", f"resume={run_id}"),
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    (run,) = client.search_runs([client.get_run(run_id).info.experiment_id])
    assert run.info.run_id == run_id and run.info.status == "FINISHED"  # same run, no new one
    assert run.data.tags["resumed"] == "true"
    assert all_tags(client, run)["job.dir"] == str(job_dir.resolve())
    assert run.data.metrics["n_samples"] == N_QUESTIONS and run.data.metrics["n_failed"] == 0
    # only the missing questions were answered: the resumed attempt reused the others ...
    resumed = f"Resuming: {answered_before} of {N_QUESTIONS} questions already answered"
    assert resumed in done.stdout + done.stderr
    # ... and the run's usage counts both attempts (issue 27: usage.json in the checkpoint);
    # calls in flight at the kill may have been counted before their answer was stored
    assert run.data.metrics["generator.llm_calls"] >= N_QUESTIONS

    table = _per_query(client, run_id)
    expected = [json.loads(x)["id"] for x in _small_dataset(tmp_path).read_text().splitlines()]
    assert sorted(table["id"]) == sorted(expected)  # every sample exactly once
    assert table["response"].notna().all() and (table["response"] != "").all()
    stored = [json.loads(x)["id"] for x in (job_dir / "responses.jsonl").read_text().splitlines()]
    assert sorted(stored) == sorted(expected)  # the checkpoint completed in the original folder


@pytest.mark.slow
def test_resume_finds_the_run_from_its_job_dir_and_refuses_finished_runs(tmp_path: Path) -> None:
    from rag_experiments.lifecycle.resume import job_checkpoint

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment("x")
    run = client.create_run(exp, tags={"job.dir": str(tmp_path / "job"), "dataset.digest": "d1"})
    ResponseCheckpoint(tmp_path / "job").write_meta(run.info.run_id)

    by_dir = job_checkpoint(str(tmp_path / "job"), uri, None)
    by_id = job_checkpoint(run.info.run_id, uri, None)
    for job in (by_dir, by_id):
        assert job.resume_run_id == run.info.run_id and job.dataset_digest == "d1"
        assert job.checkpoint is not None and job.checkpoint.job_dir == tmp_path / "job"
    with pytest.raises(ConfigError, match="dataset digest"):
        by_id.wrap(_Target(), "d2", ModelSession())

    client.set_terminated(run.info.run_id, "FINISHED")
    with pytest.raises(ConfigError, match="already FINISHED"):
        job_checkpoint(run.info.run_id, uri, None)


class _Target:
    max_concurrency = 1

    def __init__(self) -> None:
        self.asked: list[str] = []

    def prepare(self, dataset: object) -> None:
        pass

    def answer(self, sample: Sample) -> RagResponse:
        self.asked.append(sample.id)
        if sample.id == "bad":
            return RagResponse(error="timeout", error_message="slow")
        return RagResponse(response=f"answer {sample.id}", retrieved_contexts=["c"], latency_ms=1.5)

    def describe(self) -> dict[str, str]:
        return {"target": "t"}


def test_checkpoint_skips_answered_retries_failed_and_ignores_a_torn_line(tmp_path: Path) -> None:
    samples = [Sample(id=i, user_input=f"q {i}") for i in ("a", "b", "bad")]
    first = _Target()
    wrapped = CheckpointedTarget(first, ResponseCheckpoint(tmp_path), ModelSession())
    assert [wrapped.answer(s).response for s in samples[:2]] == ["answer a", "answer b"]
    assert wrapped.answer(samples[2]).error == "timeout"
    with (tmp_path / "responses.jsonl").open("a") as fh:
        fh.write('{"id": "c", "respo')  # cut short by a kill

    second = _Target()
    resumed = CheckpointedTarget(second, ResponseCheckpoint(tmp_path), ModelSession())
    answers = [resumed.answer(s) for s in samples]
    assert second.asked == ["bad"]  # answered ones come from the checkpoint; the failure is retried
    assert answers[0] == RagResponse(response="answer a", retrieved_contexts=["c"], latency_ms=1.5)
    assert resumed.reused == 2
    assert set(ResponseCheckpoint(tmp_path).load()) == {"a", "b"}


def test_a_new_run_in_a_reused_job_dir_does_not_reuse_old_answers(tmp_path: Path) -> None:
    from rag_experiments.lifecycle.resume import JobCheckpoint

    old = ResponseCheckpoint(tmp_path)
    old.write_meta("oldrun")
    old.append("a", RagResponse(response="stale"))

    class _Tracker:
        run_id = "newrun"

        def set_tags(self, tags: dict[str, str]) -> None:
            self.tags = tags

    JobCheckpoint(ResponseCheckpoint(tmp_path)).attach(_Tracker())
    assert ResponseCheckpoint(tmp_path).load() == {}
    assert (tmp_path / "responses.oldrun.jsonl").exists()
    assert json.loads((tmp_path / "checkpoint.json").read_text())["run_id"] == "newrun"


def test_a_resume_with_every_answer_checkpointed_needs_no_target(tmp_path: Path) -> None:
    from rag_experiments.lifecycle.resume import JobCheckpoint

    store = ResponseCheckpoint(tmp_path)
    store.write_meta("run1")
    store.append("a", RagResponse(response="A"))
    store.append("b", RagResponse(response="B"))
    resuming = JobCheckpoint(ResponseCheckpoint(tmp_path), resume_run_id="run1")
    assert resuming.answers_all(["a", "b"])  # the job skips the target's reachability check
    assert not resuming.answers_all(["a", "b", "c"])  # c will be asked: check the target
    assert not JobCheckpoint(ResponseCheckpoint(tmp_path)).answers_all(["a"])  # a new run


@pytest.mark.slow
def test_http_target_answers_are_saved_as_they_arrive_kill_9_then_resume(tmp_path: Path) -> None:
    """Issue 21 (1): an HTTP target answering 2 at a time, 1 s each; kill -9 after 3 answers
    are checkpointed; the resumed run sends only the unanswered questions."""
    received: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(body["question"])
            time.sleep(1.0)
            data = json.dumps({"answer": "an answer", "contexts": [body["question"]]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ask"
    job_dir = tmp_path / "job"

    def cmd(*extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rag_experiments",
            "run",
            "dataset=jsonl",
            f"dataset.path={_small_dataset(tmp_path)}",
            f"dataset.corpus={SAMPLE / 'docs'}",
            "dataset.name=small",
            "target=http",
            f"target.url={url}",
            "target.max_concurrency=2",
            "target.retries=0",
            "metrics=retrieval",
            "embedder=hash",
            f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
            f"paths.cache_dir={tmp_path}/cache",
            "progress=false",
            f"hydra.run.dir={job_dir}",
            *extra,
        ]

    try:
        proc = subprocess.Popen(
            cmd(), cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        responses = job_dir / "responses.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if responses.exists() and len(responses.read_text().splitlines()) >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        saved = [json.loads(x)["id"] for x in responses.read_text().splitlines() if x.strip()]
        assert 3 <= len(saved) < N_QUESTIONS  # saved one by one, before the batch ended
        run_id = json.loads((job_dir / "checkpoint.json").read_text())["run_id"]
        first_run = len(received)
        done = subprocess.run(
            cmd(f"resume={run_id}"),
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        server.shutdown()
    assert len(received) - first_run == N_QUESTIONS - len(set(saved))  # only the unanswered
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    table = _per_query(client, run_id)
    expected = [json.loads(x)["id"] for x in _small_dataset(tmp_path).read_text().splitlines()]
    assert sorted(table["id"]) == sorted(expected)


def test_a_resume_with_another_config_or_dataset_is_refused_before_the_run_reopens() -> None:
    from rag_experiments.lifecycle.resume import JobCheckpoint

    job = JobCheckpoint(
        None,
        "r1",
        dataset_digest="d1",
        previous_params={"retriever.top_k": "5", "seed": "0", "metrics.cutoffs": "[5, 10]"},
    )
    same = {"retriever": {"top_k": 5}, "seed": 0, "metrics": {"cutoffs": [5, 10]}, "new": 1}
    job.refuse_mismatch(same, "d1")  # same values (a key the run did not log is fine)
    with pytest.raises(ConfigError) as refused:
        job.refuse_mismatch({**same, "retriever": {"top_k": 3}}, "d1")
    assert str(refused.value) == (
        "cannot resume run r1: its config differs (retriever.top_k was '5', now '3'). Resume "
        "with the overrides the run started with (its params in MLflow), or start a new run"
    )
    with pytest.raises(ConfigError, match="cannot resume run r1: it evaluated dataset digest"):
        job.refuse_mismatch(same, "d2")
    JobCheckpoint(None).refuse_mismatch({"retriever": {"top_k": 3}}, "d2")  # a new run: no check


@pytest.mark.slow
def test_a_refused_resume_leaves_a_killed_run_killed_with_its_error(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    first = subprocess.run(
        _cmd(tmp_path, job_dir, "llm.delay_s=0"),
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    run_id = json.loads((job_dir / "checkpoint.json").read_text())["run_id"]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    killed = "Interrupted: the run was stopped by SIGTERM"
    client.set_tag(run_id, "error", killed)  # as a run stopped by a signal ends
    client.set_terminated(run_id, "KILLED")

    refused = subprocess.run(
        _cmd(tmp_path, tmp_path / "job2", "llm.delay_s=0", "retriever.top_k=2", f"resume={run_id}"),
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert "its config differs (retriever.top_k was '5', now '2')" in refused.stderr
    run = client.get_run(run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags["error"] == killed
    assert "resumed" not in run.data.tags


def test_a_new_job_checkpoints_in_the_job_dir_it_is_given(tmp_path: Path) -> None:
    from rag_experiments.lifecycle.resume import job_checkpoint

    new = job_checkpoint(None, "sqlite:///unused.db", tmp_path)  # no store is opened
    assert new.checkpoint is not None and new.checkpoint.job_dir == tmp_path
    assert new.resume_run_id is None
    assert job_checkpoint("", "sqlite:///unused.db", None).checkpoint is None  # library use
