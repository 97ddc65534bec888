"""Importing :mod:`rag_experiments` forces the offline variables and defaults the quiet ones
(MLflow's artifact-download bars off) without overriding a user's own setting."""

from __future__ import annotations

import os
import subprocess
import sys

from rag_experiments.offline import OFFLINE_ENV, QUIET_ENV

VAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
SHOW = f"import os, rag_experiments; print(os.environ['{VAR}'], os.environ['HF_HUB_OFFLINE'])"


def _imported_values(env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_download_bars_default_off_and_a_user_setting_wins() -> None:
    assert QUIET_ENV[VAR] == "false"
    env = {k: v for k, v in os.environ.items() if k != VAR}
    assert OFFLINE_ENV["HF_HUB_OFFLINE"] == "1"
    # the quiet default applies when unset; the offline one is forced whatever the user set
    assert _imported_values({**env, "HF_HUB_OFFLINE": "0"}) == ["false", "1"]
    assert _imported_values({**env, VAR: "true"}) == ["true", "1"]
