"""MLflow tracking: run layout, metric/param naming, secret redaction, sweep parent runs.

MLflow's telemetry is switched off by :mod:`rag_experiments.offline` when the package is imported.
"""

from __future__ import annotations

from rag_experiments.common.redact import REDACTED, is_secret_key, redact
from rag_experiments.tracking.mlflow_tracker import MlflowTracker, resolve_tracking_uri
from rag_experiments.tracking.names import sanitize_metric_name, sanitize_metric_names
from rag_experiments.tracking.params import flatten_params
from rag_experiments.tracking.sweep import read_parent_run_id

__all__ = [
    "REDACTED",
    "MlflowTracker",
    "flatten_params",
    "is_secret_key",
    "read_parent_run_id",
    "redact",
    "resolve_tracking_uri",
    "sanitize_metric_name",
    "sanitize_metric_names",
]
