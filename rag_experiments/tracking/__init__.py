"""MLflow tracking: run layout, metric/param naming, secret redaction, sweep parent runs.

MLflow's telemetry is switched off by :mod:`rag_experiments.offline` when the package is imported.
The names below load on first use, so importing :mod:`rag_experiments.tracking.record` (the run's
names and per-query row, imported by the runner and the metrics) does not import MLflow.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "REDACTED": "rag_experiments.common.redact",
    "is_secret_key": "rag_experiments.common.redact",
    "redact": "rag_experiments.common.redact",
    "MlflowTracker": "rag_experiments.tracking.mlflow_tracker",
    "resolve_tracking_uri": "rag_experiments.tracking.mlflow_tracker",
    "sanitize_metric_name": "rag_experiments.tracking.names",
    "sanitize_metric_names": "rag_experiments.tracking.names",
    "flatten_params": "rag_experiments.tracking.params",
    "read_parent_run_id": "rag_experiments.tracking.sweep",
}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)
