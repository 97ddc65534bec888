"""Packaging: the wheel carries conf/ and the bundled sample, an unpacked wheel finds them, and
`rag-exp init` writes an overlay that `rag-exp run` picks up from the current folder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from rag_experiments.cli import main as cli_main
from rag_experiments.errors import ConfigError
from rag_experiments.locations import CONF_DIR, PROJECT_ROOT, user_conf_dir, with_user_conf
from rag_experiments.starter import TEMPLATES, overlay_files, write_overlay

# what a build needs from the checkout (setup.py, MANIFEST.in and the two bundled folders)
BUILD_INPUTS = [
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "rag_experiments",
    "hydra_plugins",
    "conf",
    "datasets/sample",
]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An sdist and the wheel built from it (``python -m build``), from a copy of the checkout.

    The copy keeps the build's ``build/`` and ``*.egg-info`` out of the working tree.
    """
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in BUILD_INPUTS:
        if (PROJECT_ROOT / name).is_dir():
            shutil.copytree(PROJECT_ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copyfile(PROJECT_ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {"wheel": next(out.glob("*.whl")), "sdist": next(out.glob("*.tar.gz"))}


def _repo_files(folder: str) -> set[str]:
    root = PROJECT_ROOT / folder
    return {
        p.relative_to(PROJECT_ROOT).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.slow
def test_wheel_carries_every_config_and_the_sample(dists: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    bundled = {n.removeprefix("rag_experiments/bundled/") for n in names}
    configs = _repo_files("conf")
    assert "conf/config.yaml" in configs and "conf/dataset/sample.yaml" in configs
    assert configs <= bundled, sorted(configs - bundled)
    sample = _repo_files("datasets/sample")
    assert "datasets/sample/eval.jsonl" in sample
    assert sample <= bundled, sorted(sample - bundled)
    starter = {f"rag_experiments/starter/conf/{p.as_posix()}" for p in overlay_files()}
    assert starter <= names, sorted(starter - names)


@pytest.mark.slow
def test_unpacked_wheel_resolves_configs_and_sample_inside_itself(
    dists: dict[str, Path], tmp_path: Path
) -> None:
    """An installed layout (the unpacked wheel first on sys.path) reads its own bundle, and
    ``${rx.root:}`` of dataset=sample points at the bundled eval.jsonl."""
    site = tmp_path / "site"
    zipfile.ZipFile(dists["wheel"]).extractall(site)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-m", "rag_experiments", "run", "--cfg", "job", "--resolve"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = OmegaConf.create(proc.stdout)
    bundle = site / "rag_experiments" / "bundled"
    assert Path(cfg.dataset.path) == bundle / "datasets" / "sample" / "eval.jsonl"
    assert Path(cfg.dataset.path).is_file() and Path(cfg.dataset.corpus).is_dir()
    assert cfg.tracking.uri == "sqlite:///mlruns.db"  # relative: the folder run from
    assert cfg.paths.cache_dir == ".cache"
    assert list(work.iterdir()) == []  # --cfg writes nothing


@pytest.mark.slow
def test_sdist_carries_the_bundled_folders(dists: dict[str, Path]) -> None:
    import tarfile

    with tarfile.open(dists["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"setup.py", "MANIFEST.in", "conf/config.yaml", "datasets/sample/eval.jsonl"} <= names


def test_user_conf_dir_is_the_current_folders_conf(tmp_path: Path) -> None:
    assert user_conf_dir(tmp_path) is None
    (tmp_path / "conf").mkdir()
    assert user_conf_dir(tmp_path) == (tmp_path / "conf").resolve()
    assert with_user_conf(["a=1"], tmp_path) == ["--config-dir", str(tmp_path / "conf"), "a=1"]
    assert with_user_conf(["-cd", "x", "a=1"], tmp_path) == ["-cd", "x", "a=1"]
    assert with_user_conf(["--config-dir=x"], tmp_path) == ["--config-dir=x"]
    # inside the checkout ./conf is the bundled CONF_DIR: not added twice
    assert user_conf_dir(CONF_DIR.parent) is None


def test_init_writes_the_overlay_and_refuses_to_overwrite(tmp_path: Path) -> None:
    written = write_overlay(tmp_path)
    rels = overlay_files()
    assert {Path("experiment/starter.yaml"), Path("target/my_rag.yaml")} <= set(rels)
    assert written == [tmp_path.resolve() / "conf" / r for r in rels]
    for rel in rels:
        assert (tmp_path / "conf" / rel).read_bytes() == (TEMPLATES / rel).read_bytes()

    mine = tmp_path / "conf" / "experiment" / "starter.yaml"
    mine.write_text("# my edits\n")
    with pytest.raises(ConfigError, match="--force"):
        write_overlay(tmp_path)
    assert mine.read_text() == "# my edits\n"  # nothing was written
    write_overlay(tmp_path, force=True)
    assert mine.read_bytes() == (TEMPLATES / "experiment/starter.yaml").read_bytes()


def test_init_refuses_the_package_s_own_conf_even_with_force(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = sorted(p for p in CONF_DIR.rglob("*") if p.is_file())
    for force in (False, True):
        with pytest.raises(ConfigError, match="own config folder"):
            write_overlay(CONF_DIR.parent, force=force)
    assert cli_main(["init", "--dir", str(CONF_DIR.parent), "--force"]) == 1
    assert "rag-exp init in a folder of your own" in capsys.readouterr().err
    assert sorted(p for p in CONF_DIR.rglob("*") if p.is_file()) == before  # nothing written


def test_init_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["init", "--dir", str(tmp_path)]) == 0
    assert "starter.yaml" in capsys.readouterr().out
    assert cli_main(["init", "--dir", str(tmp_path)]) == 1
    assert "already exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli_main(["init", "--help"])
    assert exc.value.code == 0 and "--force" in capsys.readouterr().out


@pytest.fixture()
def overlay(tmp_path: Path) -> Iterator[Path]:
    write_overlay(tmp_path)
    GlobalHydra.instance().clear()
    yield tmp_path / "conf"
    GlobalHydra.instance().clear()


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_starter_experiment_composes_from_the_overlay(overlay: Path) -> None:
    search = f"hydra.searchpath=[file://{overlay}]"
    cfg = _compose([search, "experiment=starter"])
    plain = _compose(["dataset=sample", "target=baseline", "metrics=retrieval"])
    assert cfg.max_samples == 8 and cfg.run_name == "starter"
    for group in ("dataset", "target", "metrics", "embedder", "chunker"):
        assert cfg[group] == plain[group], group

    # my_rag extends the bundled http target: the same node (it restates http's defaults)
    mine = _compose([search, "experiment=starter", "target=my_rag"]).target
    assert mine == _compose(["target=http"]).target


@pytest.mark.slow
def test_init_then_run_the_starter_from_a_fresh_folder(tmp_path: Path) -> None:
    """`rag-exp init` then `rag-exp run experiment=starter` in that folder: ./conf is found
    without flags, and the MLflow store, caches and outputs land in the folder."""
    assert cli_main(["init", "--dir", str(tmp_path)]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "rag_experiments", "run", "experiment=starter"]
        + ["embedder=hash", "max_samples=4", "progress=false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nDCG@10" in proc.stdout
    assert {"mlruns.db", ".cache", "outputs"} <= {p.name for p in tmp_path.iterdir()}
