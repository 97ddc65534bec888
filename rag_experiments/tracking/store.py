"""The read side of the MLflow store: open a store, fetch a run, read a run's table, find runs.
Every command that reads logged runs goes through it (``rerun``, ``merge``, ``export``,
``compare``, ``report``, ``grade-sheet``/``agreement``) and so do the sweep callback and the
judge registry; the writing side is :mod:`rag_experiments.tracking.mlflow_tracker`.

It imports nothing of the package but ``errors``, ``common`` and the tracking server's
preflight (:mod:`rag_experiments.tracking.resilience`, itself on ``errors`` only), so the
analysis modules and the sweep callback can both use it without importing each other."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.errors import TrackingError
from rag_experiments.metrics.definitions import register_run_metrics
from rag_experiments.tracking.resilience import check_server, is_remote

_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@contextmanager
def quiet_downloads() -> Iterator[None]:
    """MLflow's artifact-download progress bars off for the block (one tqdm bar per
    ``download_artifacts``; ``mlflow.utils.file_utils`` reads
    ``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR`` at each download), unless the user set it."""
    if _PROGRESS_BAR in os.environ:
        yield
        return
    os.environ[_PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        os.environ.pop(_PROGRESS_BAR, None)


def open_store(uri: str) -> mlflow.MlflowClient:
    """An MLflow client that reads the store at ``uri``.

    Args:
        uri: A tracking URI as the user gives it: ``sqlite:///relative.db`` and bare paths
            resolve against the working directory, as ``rag-exp run`` does
            (:func:`~rag_experiments.common.uri.resolve_tracking_uri`); server URIs are used
            as they are.

    Raises:
        TrackingError: An empty or in-memory URI, or a tracking server (``http(s)://``) that
            does not answer ``GET /health`` within seconds
            (:func:`~rag_experiments.tracking.resilience.check_server`, the run's preflight):
            without it MLflow's own retries hold the first request for minutes.
    """
    resolved = resolve_tracking_uri(uri)
    if is_remote(resolved):
        check_server(resolved, where="--tracking-uri")
    return mlflow.MlflowClient(tracking_uri=resolved)


def get_run(client: mlflow.MlflowClient, run_id: str, *, where: str = "--tracking-uri") -> Run:
    """Fetch a run.

    Args:
        client: The store (:func:`open_store`).
        run_id: MLflow run id.
        where: What names the store for the caller's user (``--tracking-uri`` for a command,
            ``tracking.uri`` for a config key); the error's advice names it.

    Raises:
        TrackingError: No such run in the store (the message names the store).
    """
    try:
        run = client.get_run(run_id)
    except MlflowException as exc:
        raise TrackingError(
            f"run {run_id!r} not found at {client.tracking_uri}: {exc.message}. Check the run id "
            f"and {where}"
        ) from exc
    register_run_metrics(run.data.params)  # a user's metric declares itself here too
    return run


def read_table(client: mlflow.MlflowClient, run_id: str, name: str = "per_query") -> pd.DataFrame:
    """The ``<name>_results.csv`` table that the tracker's ``log_table``
    (:class:`~rag_experiments.tracking.mlflow_tracker.MlflowTracker`) logged on run ``run_id``,
    with the ``id`` column read as strings.

    Raises:
        TrackingError: The run or its table cannot be fetched.
    """
    try:
        local = client.download_artifacts(run_id, f"{name}_results.csv")
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"cannot fetch {name}_results.csv of run {run_id} from {client.tracking_uri}: "
            f"{exc}. Check the run id and --tracking-uri"
        ) from exc
    return pd.read_csv(io.StringIO(Path(local).read_text(encoding="utf-8")), dtype={"id": str})


def find_runs(
    client: mlflow.MlflowClient,
    experiment_ids: Sequence[str],
    filter_string: str = "",
    order_by: Sequence[str] | None = None,
) -> list[Run]:
    """Every active (not deleted) run of ``experiment_ids`` that ``filter_string`` (MLflow's
    search syntax) selects, in ``order_by`` order, all pages read.

    Raises:
        TrackingError: The store refuses the search (e.g. a malformed filter).
    """
    runs: list[Run] = []
    token: str | None = None
    while True:
        try:
            page = client.search_runs(
                list(experiment_ids),
                filter_string=filter_string,
                order_by=list(order_by) if order_by else None,
                page_token=token,
            )
        except MlflowException as exc:
            raise TrackingError(
                f"cannot search runs at {client.tracking_uri} ({filter_string!r}): {exc.message}"
            ) from exc
        runs.extend(page)
        for run in page:
            register_run_metrics(run.data.params)
        token = page.token
        if not token:
            return runs


def child_runs(client: mlflow.MlflowClient, experiment_id: str, parent_id: str) -> list[Any]:
    """Every active (not deleted) run whose ``mlflow.parentRunId`` is ``parent_id``."""
    return find_runs(client, [experiment_id], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent_id}'")
