"""The read side of the tracking store: one :class:`RunStore`, opened once per command from a
tracking URI, whose methods return plain records (:class:`RunRecord`, pandas tables, local
paths) and raise the package's own :class:`~rag_experiments.errors.TrackingError`, never an
MLflow type or exception. Every command that reads logged runs goes through it (``rerun``,
``merge``, ``export``, ``compare``, ``report``, ``grade-sheet``/``agreement``); the writing side
is :mod:`rag_experiments.tracking.mlflow_tracker`.

A command that reads a run written by a user's metric passes ``on_run`` (the metric registry's
``register_run_metrics``, :func:`~rag_experiments.analysis.runs.open_run_store`): the store
calls it with each run's params it returns, so it knows nothing of metrics itself.

The module functions :func:`open_store`, :func:`get_run`, :func:`read_table`, :func:`find_runs`
and :func:`child_runs` are the older, client-level form of the same reads (MLflow objects),
kept for the modules not yet moved to :class:`RunStore`.

It imports nothing of the package but ``errors``, ``common``, :mod:`~rag_experiments.tracking.
record` and the tracking server's preflight (:mod:`rag_experiments.tracking.resilience`)."""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.entities import Run, ViewType
from mlflow.exceptions import MlflowException

from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.record import ARTIFACTS, PER_QUERY, TAGS, PerQueryRow, read_rows
from rag_experiments.tracking.resilience import check_server, is_remote

_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"

OnRun = Callable[[Mapping[str, str]], object]
"""Called with the params of every run the store returns (e.g. to import the metric classes
the run names)."""


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


@dataclass(frozen=True)
class RunRecord:
    """A logged run, as plain data.

    Attributes:
        run_id: The run id (32 hex digits for MLflow).
        experiment_id: Its experiment's id.
        experiment_name: Its experiment's name.
        name: The run's name (``""`` when it has none).
        status: ``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED`` or ``SCHEDULED``.
        start_time: Start, ms since the epoch (None when unknown).
        end_time: End, ms since the epoch (None while running).
        params: ``{key: value}`` (flattened config keys).
        metrics: ``{MLflow key: latest value}``.
        tags: ``{key: value}`` (:data:`~rag_experiments.tracking.record.TAGS`).
        artifact_uri: Where its artifacts are (``file://…``, ``mlflow-artifacts:/…``, …).
    """

    run_id: str
    experiment_id: str
    experiment_name: str
    name: str
    status: str
    start_time: int | None
    end_time: int | None
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifact_uri: str = ""


@dataclass(frozen=True)
class ExperimentRecord:
    """An experiment: its id and name."""

    experiment_id: str
    name: str


class RunStore:
    """The runs of one tracking store, read as plain records.

    Args:
        uri: A tracking URI as the user gives it: ``sqlite:///relative.db`` and bare paths
            resolve against the working directory, as ``rag-exp run`` does
            (:func:`~rag_experiments.common.uri.resolve_tracking_uri`); server URIs are used
            as they are.
        where: What names the store for the caller's user (``--tracking-uri`` for a command,
            ``tracking.uri`` for a config key); errors' advice names it.
        on_run: Called with each returned run's params (see the module docstring).

    Raises:
        TrackingError: An empty or in-memory URI, or a tracking server (``http(s)://``) that
            does not answer ``GET /health`` within seconds
            (:func:`~rag_experiments.tracking.resilience.check_server`).
    """

    def __init__(
        self, uri: str, *, where: str = "--tracking-uri", on_run: OnRun | None = None
    ) -> None:
        self._client = open_store(uri, where=where)
        self.where = where
        self._on_run = on_run
        self._experiments: dict[str, str] = {}

    @property
    def uri(self) -> str:
        """The resolved tracking URI."""
        return str(self._client.tracking_uri)

    def __repr__(self) -> str:
        return f"RunStore({self.uri!r})"

    # --- runs ---------------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord:
        """One run.

        Raises:
            TrackingError: No such run in the store (the message names the store).
        """
        return self._record(get_run(self._client, run_id, where=self.where))

    def all_tags(self, run: RunRecord) -> dict[str, str]:
        """Every tag of ours on ``run``: its MLflow tags and those it keeps in ``tags.json``
        (:data:`~rag_experiments.tracking.record.VISIBLE_TAGS`; a run logged before that
        split has only MLflow tags, read as they are). One artifact read per call."""
        return {**kept_tags(self._client, run.run_id), **run.tags}

    def resolve_run_id(self, ref: str) -> str:
        """The full id of the run ``ref`` names: ``ref`` itself when it is a run of the store,
        else the one run whose id starts with ``ref`` (the 8-character ids MLflow's UI shows;
        at least :data:`MIN_ID_PREFIX` hex digits), else ``ref`` unchanged (a later
        :meth:`get_run` says it is not found).

        Raises:
            TrackingError: ``ref`` is the prefix of several runs' ids (they are listed with
                their names).
        """
        if not _ID_PREFIX.match(ref):
            return ref
        try:
            self._client.get_run(ref)
            return ref
        except MlflowException:
            pass
        experiments = self._client.search_experiments(view_type=ViewType.ALL)
        ids = [e.experiment_id for e in experiments]
        matches = [
            r
            for r in find_runs(self._client, ids, "", None, None)
            if r.info.run_id.startswith(ref.lower())
        ]
        if len(matches) == 1:
            return str(matches[0].info.run_id)
        if matches:
            listed = ", ".join(f"{r.info.run_id} ({r.info.run_name})" for r in matches[:5])
            raise TrackingError(
                f"run id prefix {ref!r} matches {len(matches)} runs at {self.uri}: {listed}; "
                "give more characters of the id"
            )
        return ref

    def find_runs(
        self,
        experiment_ids: Sequence[str],
        filter_string: str = "",
        order_by: Sequence[str] | None = None,
        max_results: int | None = None,
    ) -> list[RunRecord]:
        """Every active (not deleted) run of ``experiment_ids`` that ``filter_string``
        (MLflow's search syntax) selects, in ``order_by`` order, all pages read (at most
        ``max_results`` when given).

        Raises:
            TrackingError: The store refuses the search (e.g. a malformed filter).
        """
        runs = find_runs(self._client, experiment_ids, filter_string, order_by, max_results)
        return [self._record(r) for r in runs]

    def child_runs(self, experiment_id: str, parent_id: str) -> list[RunRecord]:
        """Every active run whose parent-run tag (:attr:`~rag_experiments.tracking.record.
        Tags.parent_run_id`) is ``parent_id``."""
        return [self._record(r) for r in child_runs(self._client, experiment_id, parent_id)]

    def experiment_by_name(self, name: str) -> ExperimentRecord | None:
        """The experiment named ``name``, None when there is none.

        Raises:
            TrackingError: The store cannot be read.
        """
        try:
            exp = self._client.get_experiment_by_name(name)
        except MlflowException as exc:
            raise TrackingError(
                f"cannot read experiment {name!r} at {self.uri}: {exc.message}"
            ) from exc
        if exp is None:
            return None
        self._experiments[exp.experiment_id] = exp.name
        return ExperimentRecord(exp.experiment_id, exp.name)

    def experiment_name(self, experiment_id: str) -> str:
        """The name of experiment ``experiment_id``.

        Raises:
            TrackingError: No such experiment.
        """
        if experiment_id not in self._experiments:
            try:
                name = self._client.get_experiment(experiment_id).name
            except MlflowException as exc:
                raise TrackingError(
                    f"experiment {experiment_id!r} not found at {self.uri}: {exc.message}"
                ) from exc
            self._experiments[experiment_id] = name
        return self._experiments[experiment_id]

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        """The tags of experiment ``experiment_id`` (e.g. the baseline aliases of ``rag-exp
        promote``).

        Raises:
            TrackingError: No such experiment, or the store cannot be read.
        """
        try:
            return dict(self._client.get_experiment(experiment_id).tags)
        except MlflowException as exc:
            raise TrackingError(
                f"experiment {experiment_id!r} not found at {self.uri}: {exc.message}"
            ) from exc

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        """Set one tag of experiment ``experiment_id``.

        Raises:
            TrackingError: The store refuses it (the MLflow error is its cause).
        """
        try:
            self._client.set_experiment_tag(experiment_id, key, value)
        except MlflowException as exc:
            raise TrackingError(f"cannot tag experiment {experiment_id}: {exc.message}") from exc

    # --- artifacts ----------------------------------------------------------------------

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[str]:
        """The run-relative paths of the artifacts directly under ``path`` (the run's root
        by default).

        Raises:
            TrackingError: The store cannot list them.
        """
        try:
            return [a.path for a in self._client.list_artifacts(run_id, path)]
        except (MlflowException, OSError) as exc:
            raise TrackingError(
                f"cannot list the artifacts of run {run_id} at {self.uri}: {exc}"
            ) from exc

    def has_artifact(self, run_id: str, path: str) -> bool:
        """True when the run has the artifact ``path`` (a top-level one)."""
        return path in self.list_artifacts(run_id)

    def download(self, run_id: str, path: str) -> Path:
        """Download the run's artifact ``path``; returns the local file (or folder).

        Raises:
            TrackingError: The run or the artifact cannot be fetched.
        """
        try:
            return Path(self._client.download_artifacts(run_id, path))
        except (MlflowException, OSError) as exc:
            raise TrackingError(
                f"cannot fetch {path} of run {run_id} from {self.uri}: {exc}. Check the run "
                f"id and {self.where}"
            ) from exc

    def read_text(self, run_id: str, path: str) -> str:
        """The run's text artifact ``path`` (UTF-8).

        Raises:
            TrackingError: The run or the artifact cannot be fetched or read.
        """
        local = self.download(run_id, path)
        try:
            return local.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TrackingError(f"cannot read {path} of run {run_id} at {self.uri}: {exc}") from exc

    def read_table(self, run_id: str, name: str = PER_QUERY) -> pd.DataFrame:
        """The ``<name>_results.csv`` table the tracker's ``log_table`` logged on the run, with
        the ``id`` column read as strings (cells as in the CSV: lists as JSON text).

        Raises:
            TrackingError: The run or its table cannot be fetched.
        """
        return read_table(self._client, run_id, name)

    def read_rows(self, run_id: str, metrics: Sequence[str] | None = None) -> list[PerQueryRow]:
        """The run's per-query table as typed rows
        (:func:`~rag_experiments.tracking.record.read_rows`).

        Args:
            run_id: The run.
            metrics: Its metric columns; default every column that is one.

        Raises:
            TrackingError: The run or its table cannot be fetched.
        """
        return read_rows(self.read_table(run_id).to_dict("records"), metrics)

    # --- the few writes a reading command makes -----------------------------------------

    def log_artifacts(
        self, run_id: str, local_dir: str | Path, artifact_path: str | None = None
    ) -> None:
        """Upload every file of ``local_dir`` to the run (under ``artifact_path``).

        Raises:
            TrackingError: The store refuses them.
        """
        try:
            self._client.log_artifacts(run_id, str(local_dir), artifact_path)
        except (MlflowException, OSError) as exc:
            raise TrackingError(f"cannot log {local_dir} to run {run_id}: {exc}") from exc

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        """Set one tag of the run.

        Raises:
            TrackingError: The store refuses it.
        """
        try:
            self._client.set_tag(run_id, key, value)
        except MlflowException as exc:
            raise TrackingError(f"cannot tag run {run_id}: {exc.message}") from exc

    def log_text(self, run_id: str, text: str, path: str) -> None:
        """Log ``text`` as the text artifact ``path`` of the run.

        Raises:
            TrackingError: The store refuses it (the MLflow error is its cause).
        """
        try:
            self._client.log_text(run_id, text, path)
        except MlflowException as exc:
            raise TrackingError(f"cannot log {path} to run {run_id}: {exc.message}") from exc

    def log_metrics(self, run_id: str, values: Mapping[str, float]) -> None:
        """Log ``{MLflow key: value}`` to the run (keys valid as they are).

        Raises:
            TrackingError: The store refuses them.
        """
        try:
            for key, value in values.items():
                self._client.log_metric(run_id, key, float(value))
        except MlflowException as exc:
            raise TrackingError(f"cannot log metrics to run {run_id}: {exc.message}") from exc

    def log_dict(self, run_id: str, data: Mapping[str, Any], path: str) -> None:
        """Log ``data`` as the JSON (or YAML) artifact ``path``.

        Raises:
            TrackingError: The store refuses it.
        """
        try:
            self._client.log_dict(run_id, dict(data), path)
        except MlflowException as exc:
            raise TrackingError(f"cannot log {path} to run {run_id}: {exc.message}") from exc

    # --- internals ------------------------------------------------------------------------

    def _record(self, run: Run) -> RunRecord:
        if self._on_run is not None:
            self._on_run(run.data.params)
        info = run.info
        experiment_id = str(info.experiment_id)
        return RunRecord(
            run_id=info.run_id,
            experiment_id=experiment_id,
            experiment_name=self.experiment_name(experiment_id),
            name=info.run_name or "",
            status=info.status,
            start_time=info.start_time,
            end_time=info.end_time,
            params=dict(run.data.params),
            metrics=dict(run.data.metrics),
            tags=dict(run.data.tags),
            artifact_uri=info.artifact_uri or "",
        )


def open_store(uri: str, *, where: str = "--tracking-uri") -> mlflow.MlflowClient:
    """An MLflow client that reads the store at ``uri`` (the client-level form of
    :class:`RunStore`; see there for ``uri``).

    Raises:
        TrackingError: An empty or in-memory URI, or a tracking server that does not answer.
    """
    resolved = resolve_tracking_uri(uri)
    if is_remote(resolved):
        check_server(resolved, where=where)
    return mlflow.MlflowClient(tracking_uri=resolved)


MIN_ID_PREFIX = 6
"""Fewest hex digits of a run id prefix :meth:`RunStore.resolve_run_id` looks up."""
_ID_PREFIX = re.compile(rf"^[0-9a-fA-F]{{{MIN_ID_PREFIX},31}}$")


def get_run(client: mlflow.MlflowClient, run_id: str, *, where: str = "--tracking-uri") -> Run:
    """Fetch a run (MLflow's object; :meth:`RunStore.get_run` gives a :class:`RunRecord`).

    Raises:
        TrackingError: No such run in the store (the message names the store).
    """
    try:
        return client.get_run(run_id)
    except MlflowException as exc:
        raise TrackingError(
            f"run {run_id!r} not found at {client.tracking_uri}: {exc.message}. Check the run id "
            f"and {where}"
        ) from exc


def kept_tags(client: mlflow.MlflowClient, run_id: str) -> dict[str, str]:
    """The tags run ``run_id`` keeps in its artifact ``tags.json`` rather than as MLflow tags
    (:data:`~rag_experiments.tracking.record.VISIBLE_TAGS`): ``{key: value}``, empty for a
    run without that artifact (logged before the split, or not by the tracker) or with an
    unreadable one."""
    try:
        with quiet_downloads():
            local = client.download_artifacts(run_id, ARTIFACTS.tags)
        data = json.loads(Path(local).read_text(encoding="utf-8"))
    except (MlflowException, OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def all_tags(client: mlflow.MlflowClient, run: Run) -> dict[str, str]:
    """Every tag of ours on MLflow's ``run`` (:meth:`RunStore.all_tags` for a raw client)."""
    return {**kept_tags(client, run.info.run_id), **run.data.tags}


def read_table(client: mlflow.MlflowClient, run_id: str, name: str = PER_QUERY) -> pd.DataFrame:
    """The ``<name>_results.csv`` table logged on run ``run_id`` (:meth:`RunStore.read_table`).

    Raises:
        TrackingError: The run or its table cannot be fetched.
    """
    path = ARTIFACTS.table_csv(name)
    try:
        local = client.download_artifacts(run_id, path)
    except (MlflowException, OSError) as exc:
        raise TrackingError(
            f"cannot fetch {path} of run {run_id} from {client.tracking_uri}: "
            f"{exc}. Check the run id and --tracking-uri"
        ) from exc
    return pd.read_csv(io.StringIO(Path(local).read_text(encoding="utf-8")), dtype={"id": str})


def find_runs(
    client: mlflow.MlflowClient,
    experiment_ids: Sequence[str],
    filter_string: str = "",
    order_by: Sequence[str] | None = None,
    max_results: int | None = None,
) -> list[Run]:
    """Every active (not deleted) run of ``experiment_ids`` that ``filter_string`` (MLflow's
    search syntax) selects, in ``order_by`` order, all pages read (MLflow's objects;
    :meth:`RunStore.find_runs` gives records).

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
                **({"max_results": max_results} if max_results else {}),
            )
        except MlflowException as exc:
            raise TrackingError(
                f"cannot search runs at {client.tracking_uri} ({filter_string!r}): {exc.message}"
            ) from exc
        runs.extend(page)
        token = page.token
        if not token or (max_results and len(runs) >= max_results):
            return runs[:max_results] if max_results else runs


def child_runs(client: mlflow.MlflowClient, experiment_id: str, parent_id: str) -> list[Run]:
    """Every active (not deleted) run whose ``mlflow.parentRunId`` is ``parent_id``."""
    return find_runs(client, [experiment_id], f"tags.`{TAGS.parent_run_id}` = '{parent_id}'")


__all__ = [
    "ExperimentRecord",
    "RunRecord",
    "RunStore",
    "child_runs",
    "find_runs",
    "get_run",
    "open_store",
    "quiet_downloads",
    "read_table",
]
