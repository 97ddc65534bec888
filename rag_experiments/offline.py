"""Offline by construction: switch off every dependency's telemetry and hub access.

:func:`enforce_offline` runs when :mod:`rag_experiments` is imported, before MLflow, ChromaDB,
Hugging Face libraries or DeepEval are, because several of them read these variables once at
import time. Values are forced (not defaults): no call may leave the machine.
"""

from __future__ import annotations

import os

OFFLINE_ENV: dict[str, str] = {
    # Hugging Face: never reach the hub (models load from installed packages only).
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # ChromaDB: anonymized telemetry (posthog) off.
    "ANONYMIZED_TELEMETRY": "False",
    # DeepEval: telemetry, update checks and error reporting off.
    "DEEPEVAL_TELEMETRY_OPT_OUT": "YES",
    "DEEPEVAL_UPDATE_WARNING_OPT_OUT": "YES",
    "DEEPEVAL_UPDATE_WARNING_OPT_IN": "NO",  # deepeval 2.9: the PyPI version check is opt-in
    "DEEPEVAL_DISABLE_DOTENV": "1",  # deepeval 4: do not load a .env of the working folder
    "ERROR_REPORTING": "NO",
    "TELEMETRY_OPT_OUT": "YES",  # deepeval 2.9: also gates its Sentry excepthook
    # MLflow 3 usage telemetry off; the community convention as well.
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}


QUIET_ENV: dict[str, str] = {
    # MLflow's "Downloading artifacts" tqdm bar at each artifact download (read at each
    # download): noise in a local tool whose artifacts are files on disk.
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}
"""Defaults for output only: a value the user set is kept."""


def enforce_offline() -> None:
    """Set :data:`OFFLINE_ENV` in ``os.environ`` (overwriting any other value) and
    :data:`QUIET_ENV` where the variable is unset."""
    os.environ.update(OFFLINE_ENV)
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
