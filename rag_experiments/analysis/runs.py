"""Read what :func:`~rag_experiments.runner.evaluate_in_run` logged: a run's metric specs
(``metric_specs.json``), its per-query table and its dataset digest.

The per-query table holds one column per metric under its canonical name (``nDCG@10``); run
metrics are logged under the sanitised key (``nDCG_at_10``,
:func:`~rag_experiments.tracking.names.sanitize_metric_name`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mlflow
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from rag_experiments.errors import TrackingError
from rag_experiments.metrics.keys import KEY_METRICS
from rag_experiments.tracking.mlflow_tracker import resolve_tracking_uri


@dataclass(frozen=True)
class MetricInfo:
    """A metric column as ``metric_specs.json`` declares it.

    Attributes:
        name: Canonical name (``nDCG@10``).
        higher_is_better: Direction of improvement.
        low: Lowest possible value.
        high: Highest possible value.
    """

    name: str
    higher_is_better: bool = True
    low: float = 0.0
    high: float = 1.0


def client_for(uri: str) -> mlflow.MlflowClient:
    """An MLflow client for ``uri`` (relative sqlite paths resolve against the working
    directory, as ``rag-exp run`` does)."""
    return mlflow.MlflowClient(tracking_uri=resolve_tracking_uri(uri))


def get_run(client: mlflow.MlflowClient, run_id: str) -> Run:
    """Fetch a run.

    Raises:
        TrackingError: No such run in the store (the message names the store).
    """
    try:
        return client.get_run(run_id)
    except MlflowException as exc:
        raise TrackingError(
            f"run {run_id!r} not found at {client.tracking_uri}: {exc.message}. Check the run id "
            "and --tracking-uri"
        ) from exc


def load_specs(client: mlflow.MlflowClient, run_id: str) -> list[MetricInfo]:
    """The run's metric columns from its ``metric_specs.json``, in logged order.

    Raises:
        TrackingError: The artifact is missing or unreadable (a run not logged by
            ``rag-exp run``).
    """
    try:
        local = client.download_artifacts(run_id, "metric_specs.json")
        raw = json.loads(Path(local).read_text(encoding="utf-8"))
    except (MlflowException, OSError, ValueError) as exc:
        raise TrackingError(
            f"cannot read metric_specs.json of run {run_id} at {client.tracking_uri}: {exc}. "
            "Only runs logged by `rag-exp run` can be compared or reported"
        ) from exc
    out = []
    for name, spec in raw.items():
        low, high = (spec.get("range") or [0.0, 1.0])[:2]
        out.append(
            MetricInfo(name, bool(spec.get("higher_is_better", True)), float(low), float(high))
        )
    return out


def key_metrics(names: Sequence[str], limit: int = 6) -> list[str]:
    """The :data:`KEY_METRICS` among ``names`` (in that order); the first ``limit`` names when
    none is."""
    present = [m for m in KEY_METRICS if m in names]
    return present or list(names)[:limit]
