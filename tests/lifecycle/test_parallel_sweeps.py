"""Runs started at the same moment stay apart: each sweep and each single run gets its own
folder (``${unique_dir:…}``), a fresh sqlite store and its experiment are created once, each
parent run has exactly its own children, and no checkpoint mixes two runs' answers."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.config.resolvers import unique_dir
from rag_experiments.tracking.store import all_tags
from rag_experiments.tracking.sweep import PARENT_RUN_ID_FILE
from tests.lifecycle.test_sweep import RUN_TIMEOUT_S

FAST = ["metrics=retrieval", "llm=fake", "judge=fake", "embedder=hash", "progress=false"]


def test_unique_dir_differs_in_the_same_second_and_sorts_by_time(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = unique_dir("multirun/%Y-%m-%d/%H-%M-%S")
    second = unique_dir("multirun/%Y-%m-%d/%H-%M-%S")
    assert first != second and first < second
    day, stamp = first.split("/")[1:]
    assert len(day) == 10 and stamp.endswith(f"-{os.getpid()}")
    assert len(stamp.split(".")[1].split("-")[0]) == 6  # microseconds, fixed width


def test_unique_dir_never_returns_an_existing_folder(tmp_path: Path, monkeypatch) -> None:
    class Frozen(_dt.datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ANN001, ANN206
            return cls(2025, 1, 31, 10, 2, 3, 4567)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rag_experiments.config.resolvers._dt.datetime", Frozen)
    base = f"out/2025-01-31/10-02-03.004567-{os.getpid()}"
    names = []
    for _ in range(3):
        names.append(unique_dir("out/%Y-%m-%d/%H-%M-%S"))
        Path(names[-1]).mkdir(parents=True)
    assert names == [base, f"{base}-2", f"{base}-3"]


def _launch(cwd: Path, *args: str) -> subprocess.Popen[str]:
    cmd = [
        sys.executable,
        "-m",
        "rag_experiments",
        "run",
        *args,
        *FAST,
        "tracking.uri=sqlite:///mlruns.db",
        f"paths.cache_dir={cwd / 'cache'}",
    ]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _wait(procs: list[subprocess.Popen[str]]) -> None:
    outputs = [p.communicate(timeout=RUN_TIMEOUT_S)[0] for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
        assert "database is locked" not in out, out[-3000:]


def _check_job_dir(job_dir: Path, run_id: str) -> int:
    """The job folder's checkpoint belongs to ``run_id`` and holds only its answers."""
    assert json.loads((job_dir / "checkpoint.json").read_text())["run_id"] == run_id
    rows = [json.loads(line) for line in (job_dir / "responses.jsonl").read_text().splitlines()]
    assert rows and {r["run_id"] for r in rows} == {run_id}
    assert len({r["id"] for r in rows}) == len(rows)  # each question answered once
    return len(rows)


@pytest.mark.slow
def test_two_sweeps_started_together_on_a_fresh_store_stay_apart(tmp_path: Path) -> None:
    procs = [_launch(tmp_path, "-m", "retriever.top_k=1,3") for _ in range(2)]
    _wait(procs)

    sweeps = sorted(tmp_path.glob("multirun/*/*"))
    assert len(sweeps) == 2, sweeps
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "rag-experiments"]
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = {r.info.run_id: r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags}
    children = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    assert len(parents) == 2 and len(children) == 4
    for sweep in sweeps:
        parent_id = (sweep / PARENT_RUN_ID_FILE).read_text().strip()
        parent = parents[parent_id]
        assert parent.info.status == "FINISHED"
        assert parent.info.run_name == "sweep retriever.top_k=1,3"  # named for the sweep
        assert parent.data.tags["sweep.dir"] == str(sweep)
        mine = [c for c in children if c.data.tags[MLFLOW_PARENT_RUN_ID] == parent_id]
        assert len(mine) == 2 and all(c.info.status == "FINISHED" for c in mine)
        assert parent.data.metrics["sweep.children.total"] == 2.0
        assert sorted(c.data.params["retriever.top_k"] for c in mine) == ["1", "3"]
        counts = set()
        for child in mine:
            job_dir = Path(all_tags(client, child)["job.dir"])
            assert job_dir.parent == sweep.resolve()
            counts.add(_check_job_dir(job_dir, child.info.run_id))
        assert len(counts) == 1  # both jobs answered the same questions


@pytest.mark.slow
def test_two_single_runs_started_together_get_their_own_folders(tmp_path: Path) -> None:
    procs = [_launch(tmp_path) for _ in range(2)]
    _wait(procs)
    job_dirs = sorted(tmp_path.glob("outputs/*/*"))
    assert len(job_dirs) == 2, job_dirs
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    (exp,) = [e for e in client.search_experiments() if e.name == "rag-experiments"]
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2 and all(r.info.status == "FINISHED" for r in runs)
    dirs = {r.info.run_id: Path(all_tags(client, r)["job.dir"]) for r in runs}
    assert set(dirs.values()) == {d.resolve() for d in job_dirs}
    for run_id, job_dir in dirs.items():
        _check_job_dir(job_dir, run_id)
