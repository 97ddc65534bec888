"""Parallel and searched sweeps end to end: ``hydra/launcher=joblib`` with ``n_jobs=2`` over 4
jobs (1 parent + 4 children, the shared Chroma index guarded by its file lock, no "database is
locked"), and ``hydra/sweeper=optuna`` maximising the ``objective`` of each job."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from tests.lifecycle.test_sweep import BUILT, REUSED, _explain, _rag_exp, _runs, _split
from tests.mlflow_server import mlflow_server  # noqa: F401  (module-scoped fixture)

pytestmark = pytest.mark.slow


def test_joblib_sweep_two_workers_one_parent_four_children(
    mlflow_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    sweep_dir = tmp_path / "multirun"
    done = _rag_exp(
        tmp_path, mlflow_server, "joblib-sweep",
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
        "chunker.size=256,512", "retriever.top_k=3,5", f"hydra.sweep.dir={sweep_dir}",
    )  # fmt: skip
    assert done.returncode == 0, _explain(done)
    assert "database is locked" not in done.stdout + done.stderr
    assert "Joblib.Parallel(n_jobs=2" in done.stdout + done.stderr  # really the joblib launcher

    top, children = _split(_runs(mlflow_server, "joblib-sweep"))
    assert len(top) == 1 and len(children) == 4, _explain(done)
    parent = top[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep.children.finished"] == 4.0
    assert {c.data.tags[MLFLOW_PARENT_RUN_ID] for c in children} == {parent.info.run_id}
    assert all(c.info.status == "FINISHED" for c in children)
    combos = {(c.data.params["chunker.size"], c.data.params["retriever.top_k"]) for c in children}
    assert combos == {("256", "3"), ("256", "5"), ("512", "3"), ("512", "5")}

    # each chunker config's index is built once; the other job with that config reuses it
    logs = "".join(p.read_text() for p in sweep_dir.glob("*/*.log"))
    assert len(BUILT.findall(logs)) == 2 and len(REUSED.findall(logs)) == 2, logs[-3000:]


def test_optuna_sweeper_maximises_the_objective(
    mlflow_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    sweep_dir = tmp_path / "multirun"
    done = _rag_exp(
        tmp_path, mlflow_server, "optuna-sweep",
        "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3",
        "hydra.sweeper.direction=maximize",
        "hydra.sweeper.sampler.seed=0", "objective=0.5*nDCG@10+0.5*keyword_coverage",
        "retriever.top_k=choice(1,3,5)", f"hydra.sweep.dir={sweep_dir}",
    )  # fmt: skip
    assert done.returncode == 0, _explain(done)
    top, children = _split(_runs(mlflow_server, "optuna-sweep"))
    assert len(top) == 1 and len(children) == 3, _explain(done)

    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    values = [
        0.5 * c.data.metrics["nDCG_at_10"] + 0.5 * c.data.metrics["keyword_coverage"]
        for c in children
    ]
    assert best["best_value"] == pytest.approx(max(values))
