"""The objective a job returns to sweepers, the Optuna preset, and the launcher configs whose
plugins may not be installed (they must then fail with a message naming the missing plugin)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable

import pytest
from hydra import compose
from hydra.errors import MissingConfigException
from omegaconf import DictConfig

from rag_experiments.errors import ConfigError
from rag_experiments.lifecycle.objective import objective_value, parse_objective

SUMMARY = {
    "nDCG@10": 0.6,
    "faithfulness": 0.8,
    "latency_ms_p50": 100.0,
    "answer_relevancy_n_valid": 0.0,
}


def test_objective_single_and_weighted() -> None:
    assert objective_value("nDCG@10", SUMMARY) == 0.6
    assert objective_value("0.7*nDCG@10 + 0.3*faithfulness", SUMMARY) == pytest.approx(0.42 + 0.24)
    assert objective_value("nDCG@10+-0.001*latency_ms_p50", SUMMARY) == pytest.approx(0.5)
    assert objective_value(None, SUMMARY) is None
    assert math.isnan(objective_value("answer_relevancy", SUMMARY))  # all rows NaN: failed trial
    assert parse_objective("2*a+b") == [(2.0, "a"), (1.0, "b")]
    with pytest.raises(ConfigError, match="not produced by this run"):
        objective_value("nDCG@100", SUMMARY)
    with pytest.raises(ConfigError, match="'x' is not a number"):
        parse_objective("x*nDCG@10")


def test_optuna_preset_composes(compose_cfg: Callable[..., DictConfig]) -> None:
    cfg = compose(
        config_name="config", overrides=["experiment=optuna_search"], return_hydra_config=True
    )
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("RagOptunaSweeper") and sweeper.direction == "maximize"
    assert sweeper.max_failure_rate == 1.0  # a failed trial is recorded and the study goes on
    # not retriever.top_k: nDCG@10 is measured 10 deep whatever top_k is (it would tie)
    assert set(sweeper.params) == {"chunker.size", "chunker.overlap"}
    assert cfg.objective == "nDCG@10" and cfg.metrics.name == "retrieval"
    assert cfg.chunker._target_.endswith("FixedChunker")


@pytest.mark.parametrize(
    ("option", "plugin", "module"),
    [
        ("slurm", "submitit_slurm", "hydra_plugins.hydra_submitit_launcher"),
        ("ray_cluster", "rag_ray", "hydra_plugins.rag_experiments_launchers.ray_launcher"),
    ],
)
def test_launcher_configs_name_their_plugin(
    compose_cfg: Callable[..., DictConfig], option: str, plugin: str, module: str
) -> None:
    if importlib.util.find_spec(module.split(".")[0]) and importlib.util.find_spec(module):
        cfg = compose(
            config_name="config", overrides=[f"hydra/launcher={option}"], return_hydra_config=True
        )
        assert "Launcher" in cfg.hydra.launcher._target_
        return
    with pytest.raises(MissingConfigException, match=f"hydra/launcher/{plugin}"):
        compose(
            config_name="config", overrides=[f"hydra/launcher={option}"], return_hydra_config=True
        )
