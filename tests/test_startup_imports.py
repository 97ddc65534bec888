"""What a ``rag-exp run`` imports at start-up: heavy modules the chosen config does not use stay
unloaded (bench/scale.py times the start-up; this pins the imports that made it slow)."""

from __future__ import annotations

import subprocess
import sys

import pytest


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
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
