"""Launchers beyond one process: ``hydra/launcher=submitit_local`` and ``ray_local`` run a real
sweep (1 parent + 2 FINISHED children each); ``ray_cluster`` and ``slurm`` compose and refuse,
before submitting anything, a node-local tracking store or relative cache paths."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose
from hydra._internal.callbacks import Callbacks
from hydra.types import HydraContext
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from omegaconf import DictConfig

from rag_experiments.config.reporting import ReportedError
from rag_experiments.errors import ConfigError
from rag_experiments.lifecycle.launchers import check_jobs, check_multi_node
from rag_experiments.tracking.sweep import PARENT_RUN_ID_FILE
from tests.lifecycle.test_sweep import RUN_TIMEOUT_S

FAST = ["llm=fake", "embedder=hash", "metrics=retrieval", "progress=false"]
SERVER = "tracking=server"


@pytest.mark.parametrize(
    ("option", "target"),
    [
        ("ray_local", "hydra_plugins.rag_experiments_launchers.ray_launcher.RagRayLauncher"),
        ("ray_cluster", "hydra_plugins.rag_experiments_launchers.ray_launcher.RagRayLauncher"),
        ("slurm", "hydra_plugins.rag_experiments_launchers.submitit_launchers.RagSlurmLauncher"),
        ("submitit_local", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"),
    ],
)
def test_launcher_options_compose(
    compose_cfg: Callable[..., DictConfig], option: str, target: str
) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")  # the [slurm] extra
    cfg = compose(
        config_name="config", overrides=[f"hydra/launcher={option}"], return_hydra_config=True
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_ == target
    if option.startswith("ray"):
        assert launcher.multi_node == (option == "ray_cluster")
        assert launcher.address == ("local" if option == "ray_local" else "auto")
    if option == "ray_local":
        assert launcher.init._node_ip_address == "127.0.0.1"
    if option == "slurm":
        assert launcher.partition is None and launcher.array_parallelism == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], r"cannot write to the node-local tracking store tracking.uri=sqlite:///mlruns.db"),
        ([SERVER], r"tracking.uri=http://127.0.0.1:5000 names the node itself"),
        ([SERVER, "tracking.uri=http://localhost:5000"], "names the node itself"),
        ([SERVER, "tracking.uri='http://[::1]:5000'"], "names the node itself"),
        ([SERVER, "tracking.uri=http://mlflow.lab:5000", "paths.cache_dir=.cache"], "relative "),
        (
            [SERVER, "tracking.uri=http://10.0.0.5:5000", "paths.cache_dir=/shared/c",
             "paths.llm_cache=llm.sqlite"],
            r"the relative paths.llm_cache=llm.sqlite would name each node's own folder",
        ),
    ],
)  # fmt: skip
def test_multi_node_check_refuses_node_local_places(
    compose_cfg: Callable[..., DictConfig], overrides: list[str], message: str
) -> None:
    cfg = compose(config_name="config", overrides=overrides)  # default paths: relative .cache
    with pytest.raises(ConfigError, match=message):
        check_multi_node(cfg, "ray_cluster")


def test_multi_node_check_accepts_a_server_and_absolute_paths(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    cfg = compose(
        config_name="config",
        overrides=[SERVER, "tracking.uri=https://mlflow.lab:5000", "paths.cache_dir=/shared/c"],
    )
    check_multi_node(cfg, "slurm")  # chroma_dir, embedding_cache, llm_cache follow cache_dir
    assert cfg.paths.llm_cache == "/shared/c/llm.sqlite"


def test_jobs_that_change_tracking_or_paths_are_checked_one_by_one(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    """A sweep over ``paths.cache_dir`` passes the sweep-level check and is refused per job
    (a job's overrides are all of the sweep's, with the swept values, as Hydra passes them)."""
    from hydra.core.global_hydra import GlobalHydra

    ok = [SERVER, "tracking.uri=http://mlflow.lab:5000"]
    cfg = compose(
        config_name="config", overrides=[*ok, "paths.cache_dir=/shared/c"], return_hydra_config=True
    )
    context = HydraContext(GlobalHydra.instance().config_loader(), Callbacks())
    jobs = [[*ok, "paths.cache_dir=/shared/c"], [*ok, "paths.cache_dir=/shared/d"]]
    check_jobs("slurm", context, cfg, jobs)
    with pytest.raises(ReportedError, match="the relative paths.cache_dir=rel"):
        check_jobs("slurm", context, cfg, [*jobs, [*ok, "paths.cache_dir=rel"]])


def _rag_exp(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    cmd = [sys.executable, "-m", "rag_experiments", "run", *args, *FAST]
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )


@pytest.mark.slow
@pytest.mark.parametrize("option", ["ray_cluster", "slurm"])
def test_multi_node_launchers_refuse_before_submitting(tmp_path: Path, option: str) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    done = _rag_exp(tmp_path, "-m", f"hydra/launcher={option}", "retriever.top_k=1,3")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        f"rag-exp run: error: hydra/launcher={option} runs jobs on other nodes, which cannot "
        "write to the node-local tracking store tracking.uri=sqlite:///mlruns.db"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    (parent,) = client.search_runs([client.get_experiment_by_name("rag-experiments").experiment_id])
    assert parent.info.status == "FAILED"  # the sweep's parent (opened first), no child
    assert parent.data.metrics["sweep.children.total"] == 0
    assert not list(tmp_path.glob("multirun/*/*/0"))  # no job ran
    assert not list(tmp_path.glob("multirun/*/*/.submitit"))  # nothing was submitted


@pytest.mark.slow
@pytest.mark.parametrize("option", ["submitit_local", "ray_local"])
def test_sweep_on_launcher_gives_one_parent_and_finished_children(
    tmp_path: Path, option: str
) -> None:
    pytest.importorskip("ray" if option.startswith("ray") else "submitit")
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    sweep_dir = tmp_path / "multirun"
    done = _rag_exp(
        tmp_path, "-m", f"hydra/launcher={option}", "retriever.top_k=1,3",
        f"tracking.uri={uri}", f"paths.cache_dir={tmp_path / 'cache'}",
        f"hydra.sweep.dir={sweep_dir}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    runs = client.search_runs([exp])
    parents = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    children = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert (sweep_dir / PARENT_RUN_ID_FILE).read_text().strip() == parent.info.run_id
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep.children.finished"] == 2.0
    assert {c.data.tags[MLFLOW_PARENT_RUN_ID] for c in children} == {parent.info.run_id}
    assert {c.info.status for c in children} == {"FINISHED"}
    assert sorted(c.data.params["retriever.top_k"] for c in children) == ["1", "3"]
    assert all(c.data.metrics["n_samples"] == 69 for c in children)
    # the jobs really ran through the launcher, in other processes
    if option == "ray_local":
        assert "(run_ray_job pid=" in done.stdout + done.stderr
        assert "Started a local Ray instance" in done.stdout + done.stderr
    else:
        logs = list((sweep_dir / ".submitit").glob("*/*_log.out"))
        assert len(logs) == 2
