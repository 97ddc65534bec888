"""Helpers shared by test modules (not fixtures): a cheap ``rag-exp run`` of a JSONL dataset;
the modules a fresh interpreter loads for some imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from rag_experiments.locations import CONF_DIR


def evaluate_retrieval(
    tmp_path: Path, dataset: Path | str, corpus: Path | str, run_name: str
) -> Any:
    """Run ``rag-exp run dataset=jsonl metrics=retrieval embedder=hash`` on ``dataset`` (our
    JSONL) against ``corpus`` with caches and MLflow under ``tmp_path``; return its MLflow run
    (the one named ``run_name`` in experiment ``rag-experiments``)."""
    from mlflow import MlflowClient

    from rag_experiments.job import run_job

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "dataset=jsonl",
                f"dataset.path={dataset}",
                f"dataset.corpus={corpus}",
                "embedder=hash",
                "metrics=retrieval",
                "llm=fake",
                "judge=fake",
                "progress=false",
                f"paths.cache_dir={tmp_path}/cache",
                f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
                f"run_name={run_name}",
            ],
        )
        run_job(cfg)
    GlobalHydra.instance().clear()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment], f"tags.`mlflow.runName` = '{run_name}'")
    return run


def run_fresh(code: str) -> str:
    """Run ``code`` in a fresh Python process (what a start-up loads is then its own) and
    return its stdout; a failing assert in it fails the calling test with its stderr."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def loaded_by(statements: str, modules: list[str]) -> list[str]:
    """Which of ``modules`` a fresh Python process has in ``sys.modules`` after running
    ``statements`` (e.g. ``import rag_experiments.config.schema``): what a start-up loads.

    Raises:
        subprocess.CalledProcessError: ``statements`` failed (its stderr in the error).
    """
    found = f"[m for m in {modules!r} if m in sys.modules]"
    code = f"import sys, json\n{statements}\nprint(json.dumps({found}))"
    return json.loads(run_fresh(code).strip().splitlines()[-1])
