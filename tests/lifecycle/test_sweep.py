"""``rag-exp run`` end to end in a subprocess against a real MLflow server: a Hydra multirun
gets one parent run with one child run per job, the vector index is built once per chunker
config and reused by the other jobs, a job that raises ends as its own FAILED run (and fails
the parent), a single run has no parent, and a single run refused before any work leaves no
run.

Every job uses the bundled sample with the hash embedder and retrieval metrics only (no answer
is generated), so a subprocess takes seconds. Hydra's job logging goes to stdout and to
``<job dir>/app.log`` (job name ``app``, from ``rag_experiments/app.py``).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.analysis.runs import run_values
from rag_experiments.tracking.store import RunStore
from rag_experiments.tracking.sweep import PARENT_RUN_ID_FILE
from tests.mlflow_server import mlflow_server  # noqa: F401  (module-scoped fixture)

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 300
"""A 4-job sweep takes ~15 s on 2 cores; the margin is for a loaded CI machine."""

DEFAULT_RUN_NAME = "sample-semantic-retrieval"
"""``<dataset.name>-<chunker class>-<metrics.name>`` for the overrides below."""

BUILT = re.compile(r"Built vector index (\S+): embedded (\d+) chunks in [\d.]+ s")
REUSED = re.compile(r"Reusing vector index (\S+) \((\d+) chunks\)")


def _rag_exp(
    cwd: Path, uri: str, experiment: str, *overrides: str
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m rag_experiments run`` with the fast fakes in ``cwd``.

    Args:
        cwd: Working directory (the cache goes to ``cwd/cache``).
        uri: Tracking server URL.
        experiment: MLflow experiment (one per test: the server is shared by the module).
        *overrides: Further Hydra arguments (``-m``, sweeps, ``hydra.*``).

    Returns:
        The finished process, with text stdout and stderr.
    """
    cmd = [
        sys.executable, "-m", "rag_experiments", "run",
        *overrides,
        "embedder=hash", "llm=fake", "metrics=retrieval",
        f"tracking.uri={uri}", f"tracking.experiment={experiment}",
        f"paths.cache_dir={cwd / 'cache'}", "progress=false",
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )


def _runs(uri: str, experiment: str) -> list[Run]:
    """Every active run of ``experiment``."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"experiment {experiment!r} was not created"
    return list(client.search_runs([exp.experiment_id], max_results=1000))


def _split(runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
    """``(runs without a parent tag, runs with one)``."""
    top = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    nested = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    return top, nested


def _explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nSTDOUT:\n{done.stdout[-3000:]}\nSTDERR:\n{done.stderr[-3000:]}"


def test_sweep_nests_jobs_under_one_parent_and_reuses_indexes(
    mlflow_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    sweep_dir = tmp_path / "multirun"
    done = _rag_exp(
        tmp_path, mlflow_server, "sweep-test",
        "-m", "chunker.size=256,512", "retriever.top_k=3,5", f"hydra.sweep.dir={sweep_dir}",
    )  # fmt: skip
    assert done.returncode == 0, _explain(done)

    # --- runs: one parent, four children nested under it, all FINISHED ----------------------
    top, children = _split(_runs(mlflow_server, "sweep-test"))
    assert len(top) == 1 and len(children) == 4, _explain(done)
    parent = top[0]
    assert (sweep_dir / PARENT_RUN_ID_FILE).read_text().strip() == parent.info.run_id
    assert parent.info.status == "FINISHED"
    assert parent.info.run_name == "sweep chunker.size=256,512 × retriever.top_k=3,5"  # as typed
    assert parent.data.metrics["sweep.children.total"] == 4.0
    assert parent.data.metrics["sweep.children.finished"] == 4.0
    assert parent.data.metrics["sweep.children.failed"] == 0.0
    for child in children:
        assert child.data.tags[MLFLOW_PARENT_RUN_ID] == parent.info.run_id
        assert child.info.status == "FINISHED"
        params = child.data.params  # named after the swept values, so the list tells them apart
        assert child.info.run_name == (
            f"chunker.size={params['chunker.size']},retriever.top_k={params['retriever.top_k']}"
        )
        assert "error" not in child.data.tags
    # the last lines name the parent and where its report is
    last = done.stdout.strip().splitlines()[-2:]
    assert last[0].startswith(f"sweep parent run {parent.info.run_id} FINISHED (children: 4")
    assert last[1].startswith("sweep report: ") and "report/report.html (run page: " in last[1]
    assert parent.data.tags["sweep.report"] == "report/report.html"
    by_combo = {
        (int(c.data.params["chunker.size"]), int(c.data.params["retriever.top_k"])): c
        for c in children
    }
    assert set(by_combo) == {(256, 3), (256, 5), (512, 3), (512, 5)}

    # --- metrics: the ranking is 100 deep whatever top_k is, so only the top-k contexts change
    for size in (256, 512):  # every value, also those not logged as metrics (headline mode)
        store = RunStore(mlflow_server)
        k3, k5 = (run_values(store, store.get_run(by_combo[size, k].info.run_id)) for k in (3, 5))
        assert k3["n_samples"] == k5["n_samples"] > 0 and k3["n_failed"] == 0
        assert k3["nDCG_at_10"] == k5["nDCG_at_10"]
        assert k3["R_at_100"] == k5["R_at_100"]
        # keyword coverage of the top-k contexts: the top 5 hold the top 3
        assert k5["keyword_coverage"] >= k3["keyword_coverage"]

    # --- index: built once per chunker config, reused by the other job ----------------------
    assert len(BUILT.findall(done.stdout)) == 2, done.stdout[-3000:]
    assert len(REUSED.findall(done.stdout)) == 2, done.stdout[-3000:]
    assert "vector index" not in done.stderr  # job logging goes to stdout (and the log files)
    events: dict[int, list[tuple[str, str, int]]] = {256: [], 512: []}
    for job_dir in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
        size = int(next(o for o in overrides if o.startswith("chunker.size=")).split("=")[1])
        (log_file,) = job_dir.glob("*.log")
        text = log_file.read_text(encoding="utf-8")
        found = [("built", n, int(c)) for n, c in BUILT.findall(text)]
        found += [("reused", n, int(c)) for n, c in REUSED.findall(text)]
        assert len(found) == 1, f"{log_file}: {text[-2000:]}"
        events[size].append(found[0])
    for size, seen in events.items():
        assert sorted(kind for kind, _, _ in seen) == ["built", "reused"], (size, seen)
        assert len({(name, n) for _, name, n in seen}) == 1, seen  # same collection, same size
    assert events[256][0][1] != events[512][0][1]
    assert events[256][0][2] > events[512][0][2]  # smaller chunks -> more of them


def test_failing_job_ends_as_failed_child_and_fails_the_parent(
    mlflow_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    sweep_dir = tmp_path / "multirun"
    done = _rag_exp(
        tmp_path, mlflow_server, "sweep-fail",
        "-m", "retriever.top_k=0,3", f"hydra.sweep.dir={sweep_dir}",
    )  # fmt: skip
    assert done.returncode == 1, _explain(done)
    assert "retriever.top_k must be >= 1, got 0" in done.stderr

    top, children = _split(_runs(mlflow_server, "sweep-fail"))
    assert len(top) == 1 and len(children) == 2, _explain(done)
    parent = top[0]
    by_k = {int(c.data.params["retriever.top_k"]): c for c in children}
    assert set(by_k) == {0, 3}
    for child in children:
        assert child.data.tags[MLFLOW_PARENT_RUN_ID] == parent.info.run_id

    bad, good = by_k[0], by_k[3]
    assert bad.info.status == "FAILED"
    assert bad.data.tags["error"] == "ConfigError: retriever.top_k must be >= 1, got 0."
    assert bad.info.run_name == "retriever.top_k=0"  # named before anything was built
    client = MlflowClient(mlflow_server)
    assert {"config.yaml", "error.txt"} <= {a.path for a in client.list_artifacts(bad.info.run_id)}
    assert "n_samples" not in bad.data.metrics

    assert good.info.status == "FINISHED"  # the sweep went on after the failed job
    assert "error" not in good.data.tags
    assert good.data.metrics["n_samples"] > 0 and good.data.metrics["n_failed"] == 0

    # Hydra re-raises the job's error after the batch, skipping on_multirun_end: the
    # callback's atexit hook closes the parent
    assert parent.info.status == "FAILED"
    assert "stopped" in parent.data.tags["error"]
    assert parent.data.metrics["sweep.children.total"] == 2.0
    assert parent.data.metrics["sweep.children.finished"] == 1.0
    assert parent.data.metrics["sweep.children.failed"] == 1.0


def test_single_run_has_no_parent(mlflow_server: str, tmp_path: Path) -> None:  # noqa: F811
    run_dir = tmp_path / "outputs"
    done = _rag_exp(tmp_path, mlflow_server, "single-run", f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, _explain(done)

    (run,) = _runs(mlflow_server, "single-run")
    assert MLFLOW_PARENT_RUN_ID not in run.data.tags
    assert run.info.status == "FINISHED"
    assert run.info.run_name == DEFAULT_RUN_NAME
    assert run.data.params["retriever.top_k"] == "5"  # conf/retriever/default.yaml
    assert run.data.metrics["n_samples"] > 0
    assert len(BUILT.findall(done.stdout)) == 1 and not REUSED.findall(done.stdout)
    assert run.info.run_id in done.stdout  # the CLI says where the run is
    assert not list(tmp_path.rglob(PARENT_RUN_ID_FILE))


def test_a_refused_single_run_leaves_no_run(mlflow_server: str, tmp_path: Path) -> None:  # noqa: F811
    done = _rag_exp(
        tmp_path, mlflow_server, "single-fail", "retriever.top_k=0", f"hydra.run.dir={tmp_path}/o"
    )
    assert done.returncode == 1, _explain(done)
    assert "retriever.top_k must be >= 1, got 0" in done.stderr
    # refused before any work: no FAILED run to count as a failure (a sweep's job, above,
    # still is a FAILED child of its sweep)
    exp = MlflowClient(mlflow_server).get_experiment_by_name("single-fail")
    assert exp is None or not MlflowClient(mlflow_server).search_runs([exp.experiment_id])


def test_a_sweep_against_a_dead_server_stops_before_any_job(tmp_path: Path) -> None:
    """The parent run cannot be made: one line, exit 1, no job launched, in seconds (the
    callback asks /health first instead of waiting out MLflow's retries, minutes; Hydra would
    turn the callback's error into a warning and launch every job)."""
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{sock.getsockname()[1]}"
        sweep_dir = tmp_path / "sweep"
        done = _rag_exp(
            tmp_path, uri, "dead", "-m", "retriever.top_k=3,5", f"hydra.sweep.dir={sweep_dir}"
        )
    assert done.returncode == 1, _explain(done)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("rag-exp run: error: preflight: the MLflow tracking server ")
    assert "cannot be reached" in line and "nothing was run" in line
    assert "Launching" not in done.stdout + done.stderr and not sweep_dir.exists()
