"""``rag-exp run --help`` is answered from ``conf/`` without composing: the same groups and
options as Hydra's config repository lists (its reference), minus the internal ``schema/*``
and ``derived/*`` groups, and a user's overlay adds its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from omegaconf import DictConfig

from rag_experiments.cli import main
from rag_experiments.run_help import config_groups, run_help


def _hydra_groups(parent: str = "") -> dict[str, list[str]]:
    """Hydra's listing (``Hydra.list_all_config_groups`` and its options), the reference."""
    loader = GlobalHydra.instance().config_loader()
    found: dict[str, list[str]] = {}
    for group in loader.list_groups(parent):
        name = f"{parent}/{group}" if parent else group
        if name.split("/")[0] in ("hydra", "schema", "derived"):
            continue
        options = loader.get_group_options(name, ObjectType.CONFIG)
        if options:
            found[name] = sorted(options)
        found.update(_hydra_groups(name))
    return dict(sorted(found.items()))


def test_the_groups_are_hydras_without_schema(
    compose_cfg: Callable[..., DictConfig],  # Hydra initialized over conf/, schemas registered
) -> None:
    from rag_experiments.locations import CONF_DIR

    assert config_groups([CONF_DIR]) == _hydra_groups()


def test_help_prints_usage_groups_and_an_overlays_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "conf" / "target").mkdir(parents=True)
    (tmp_path / "conf" / "target" / "mine.yaml").write_text("# mine\n")
    (tmp_path / "conf" / "extra").mkdir()
    (tmp_path / "conf" / "extra" / "one.yaml").write_text("# one\n")
    monkeypatch.chdir(tmp_path)
    assert run_help(["retriever.top_k=3"]) is None
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rag-exp run [-m]")
    lines = out.splitlines()
    assert "extra: one" in lines
    assert "gate: default, retrieval" in lines
    target = next(x for x in lines if x.startswith("target: "))
    assert "mine" in target.split(": ")[1].split(", ")
    assert not [x for x in lines if x.startswith("schema/")]
    assert "rag-exp run --hydra-help" in lines[-1]
