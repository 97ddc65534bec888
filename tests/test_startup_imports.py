"""What a ``rag-exp run`` imports at start-up (heavy modules the chosen config does not use stay
unloaded) and how the command exits (bench/scale.py times both; these pin what made them slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.run_helpers import run_fresh


@pytest.mark.slow
def test_a_run_without_a_gate_does_not_import_scipy_stats() -> None:
    """The gate's statistics (scipy.stats, ~2 CPU s) load only when ``gate=`` is set."""
    code = (
        "import sys\n"
        "from omegaconf import OmegaConf\n"
        "import rag_experiments.app, rag_experiments.job, rag_experiments.build\n"
        "import rag_experiments.tracking.mlflow_tracker\n"
        "from rag_experiments.job import gate_settings\n"
        "assert gate_settings(OmegaConf.create({'gate': None}), in_sweep=False) is None\n"
        "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported without a gate'\n"
        "assert 'rag_experiments.analysis.gate' not in sys.modules\n"
        "gate = {'gate': {'rules': {'nDCG@10': {'min': 0.5}}}}\n"
        "settings = gate_settings(OmegaConf.create(gate), in_sweep=False)\n"
        "assert settings is not None and 'rag_experiments.analysis.gate' in sys.modules\n"
    )
    run_fresh(code)


@pytest.mark.slow
def test_the_command_exits_without_a_full_collection_of_its_heap() -> None:
    """After the command, an exit handler freezes the heap (``gc.freeze``), so the shutdown's
    collections skip it; it runs after the handlers registered during the command, once."""
    sample = Path(__file__).resolve().parents[1] / "datasets" / "sample" / "eval.jsonl"
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
        "from rag_experiments.cli import main\n"
        f"assert main(['dataset', 'stats', {str(sample)!r}]) == 0\n"
        f"assert main(['dataset', 'stats', {str(sample)!r}]) == 0\n"
        "print('before exit', gc.get_freeze_count())\n"
    )
    lines = run_fresh(code).splitlines()
    assert "before exit 0" in lines
    frozen = [int(line.split()[1]) for line in lines if line.startswith("frozen ")]
    assert len(frozen) == 1 and frozen[0] > 10_000  # the whole heap, frozen at exit


@pytest.mark.parametrize(
    ("args", "paused"),
    [
        (["run", "--help"], True),
        (["--verbose", "run", "--help"], True),
        (["--help"], False),
    ],
)
def test_the_collector_is_paused_from_the_first_import_of_a_run(
    args: list[str], paused: bool
) -> None:
    """``rag-exp run`` turns the cyclic collector off before its first heavy import (the config
    schemas, Hydra: ``rag_experiments.config.reporting``), not only around Hydra's call; other
    commands keep it on; it is on again after the command."""
    code = (
        "import gc, importlib.machinery, sys\n"
        "seen = []\n"
        "class Hook:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'rag_experiments.config.reporting':\n"
        "            seen.append(gc.isenabled())\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hook())\n"
        "from rag_experiments.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit:\n"  # argparse's own --help
        "    pass\n"
        "print(seen, gc.isenabled())\n"
    )
    out = run_fresh(code).strip().splitlines()[-1]
    assert out == f"[{not paused}] True"
