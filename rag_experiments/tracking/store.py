"""The read side of the MLflow store: what the commands and the sweep callback read back from
logged runs (the writing side is :mod:`rag_experiments.tracking.mlflow_tracker`).

It imports nothing of the package above ``tracking``, so the analysis modules and the sweep
callback can both use it without importing each other."""

from __future__ import annotations

from typing import Any

import mlflow
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID


def child_runs(client: mlflow.MlflowClient, experiment_id: str, parent_id: str) -> list[Any]:
    """Every active (not deleted) run whose ``mlflow.parentRunId`` is ``parent_id``."""
    runs: list[Any] = []
    token: str | None = None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}'",
            page_token=token,
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs
