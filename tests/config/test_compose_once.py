"""``compose_once``: a ``rag-exp run`` composes its config once, and it is the config Hydra's
own two compositions give, node for node (the hydra node included)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import hydra
import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from rag_experiments.config import register
from rag_experiments.config.compose import compose_once
from rag_experiments.locations import CONF_DIR

pytestmark = pytest.mark.slow  # composes conf/ seven times (~2-4 s each on a loaded machine)


def _run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, overrides: list[str], once: bool
) -> tuple[dict[str, Any], int]:
    """Run a Hydra app on ``conf/`` with ``overrides``; its config (unresolved, the run's own
    folder left out) and the number of compositions."""
    register()
    seen: dict[str, Any] = {}
    loads = {"n": 0}
    original = ConfigLoaderImpl.load_configuration

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        loads["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def app(cfg: Any) -> None:
        hydra_cfg = OmegaConf.to_container(HydraConfig.get(), resolve=False)
        hydra_cfg["runtime"].pop("output_dir")
        seen["cfg"] = OmegaConf.to_container(cfg, resolve=False)
        seen["hydra"] = hydra_cfg
        seen["mode"] = HydraConfig.get().mode

    monkeypatch.setattr(sys, "argv", ["rag-exp run", *overrides])
    monkeypatch.chdir(tmp_path)
    if once:
        with compose_once():
            app()
    else:
        app()
    return seen, loads["n"]


@pytest.mark.parametrize(
    "overrides",
    [
        ["llm=fake", "seed=3"],
        ["llm=fake", "hydra.mode=RUN", "retriever.top_k=4"],
        ["judge=fake", "hydra.job.chdir=false"],
    ],
)
def test_a_run_composes_once_and_gets_the_same_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, overrides: list[str]
) -> None:
    run_dir = [f"hydra.run.dir={tmp_path / 'job'}"]
    twice, n_twice = _run(monkeypatch, tmp_path, [*overrides, *run_dir], once=False)
    once, n_once = _run(monkeypatch, tmp_path, [*overrides, *run_dir], once=True)
    assert (n_twice, n_once) == (2, 1)
    assert once == twice
    assert once["mode"] == RunMode.RUN
    assert once["hydra"]["overrides"]["hydra"][-1] in ("hydra.mode=RUN", run_dir[0])


def test_hydra_decides_when_the_run_composition_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sweep override without -m: Hydra's own error, whatever the block."""
    from hydra.errors import ConfigCompositionException

    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")  # Hydra raises instead of printing (as cli.py)
    argv = ["seed=1,2", f"hydra.run.dir={tmp_path / 'job'}"]
    for once in (False, True):
        with pytest.raises(ConfigCompositionException, match="Ambiguous value for argument"):
            _run(monkeypatch, tmp_path, argv, once=once)
