"""``mlflow run . -e evaluate --env-manager local`` runs ``rag-exp run`` in the run MLflow
opened, and ``-e rerun`` repeats it (tag ``rerun_of``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest

from rag_experiments.locations import PROJECT_ROOT

pytestmark = pytest.mark.slow


def _mlflow_run(tmp_path: Path, uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
    }
    cmd = [
        f"{bin_dir}/mlflow",
        "run",
        str(PROJECT_ROOT),
        "--env-manager",
        "local",
        "--experiment-name",
        "project",
        *args,
    ]
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_mlflow_run_evaluate_then_rerun(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = mlflow.MlflowClient(uri)
    client.create_experiment("project", artifact_location=(tmp_path / "art").as_uri())

    done = _mlflow_run(
        tmp_path, uri, "-e", "evaluate", "-P", "embedder=hash", "-P", "llm=fake",
        "-P", "metrics=retrieval", "-P", "chunker=fixed", "-P", "top_k=3",
        "-P", f"cache_dir={tmp_path}/cache", "-P", f"run_dir={tmp_path}/out",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    exp = client.get_experiment_by_name("project")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["chunker.size"] == "512" and run.data.params["retriever.top_k"] == "3"
    assert run.data.metrics["n_samples"] == 69 and run.data.metrics["n_failed"] == 0
    assert run.data.tags["mlflow.project.entryPoint"] == "evaluate"  # the project run itself

    again = _mlflow_run(tmp_path, uri, "-e", "rerun", "-P", f"run_id={run.info.run_id}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "identical" in again.stdout, again.stdout[-2000:]
    reruns = client.search_runs([exp.experiment_id], f"tags.rerun_of = '{run.info.run_id}'")
    assert len(reruns) == 1
    assert reruns[0].data.metrics["nDCG_at_10"] == run.data.metrics["nDCG_at_10"]
    assert not (PROJECT_ROOT / "mlruns").exists()
