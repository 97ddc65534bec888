"""Each Hydra entry point composes its config in a fresh process: ``rag-exp run``, ``serve``
and ``generate`` register the schemas and resolvers themselves (in-process tests get them from
conftest, so only a new process shows a missing registration)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

COMMANDS = {"run": "dataset", "serve": "target", "generate": "docs"}
"""Command → a top-level key its composed config must have."""


def test_every_hydra_command_composes_its_config_in_a_new_process(tmp_path: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    procs = {
        cmd: subprocess.Popen(
            [sys.executable, "-m", "rag_experiments", cmd, "--cfg", "job"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cmd in COMMANDS
    }
    for cmd, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"rag-exp {cmd} --cfg job failed:\n{err[-2000:]}"
        assert COMMANDS[cmd] in yaml.safe_load(out), f"rag-exp {cmd}: no {COMMANDS[cmd]!r}"
