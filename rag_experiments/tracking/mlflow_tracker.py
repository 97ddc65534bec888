"""Log one evaluation run to MLflow: params, tags, metrics, tables, datasets and artifacts.

Layout of a run (our own, stable across versions):

* params: the flattened, redacted config (:func:`~rag_experiments.tracking.params.flatten_params`);
* tags: the caller's tags (redacted); ``error`` on failure;
  ``dataset.name`` / ``dataset.digest`` / ``dataset.source`` after
  :meth:`MlflowTracker.log_dataset`;
* metrics: sanitised keys (:func:`~rag_experiments.tracking.names.sanitize_metric_name`); NaN and
  infinite values are never logged; of a run's summary (:meth:`MlflowTracker.log_summary`),
  the headline values only unless ``metrics="all"`` (:mod:`~rag_experiments.tracking.selection`);
* artifacts: ``config.yaml`` (redacted), ``environment.json`` (``git.commit`` / ``git.dirty``
  of the harness checkout, ``version.python`` and ``version.<package>`` of key packages),
  ``metric_names.json`` (canonical name → key, for every
  metric name seen), ``<table>.json`` + ``<table>_results.csv``, ``error.txt`` on failure.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import logging
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import mlflow
import mlflow.data
import pandas as pd
from mlflow.data.dataset_source import DatasetSource
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS, MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import (
    MAX_DATASET_DIGEST_SIZE,
    MAX_INPUT_TAG_VALUE_SIZE,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
)

from rag_experiments.common import interrupt
from rag_experiments.common.redact import redact
from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.errors import TrackingError
from rag_experiments.records import MetricSpec
from rag_experiments.tracking.client import ensure_experiment, open_client, racing
from rag_experiments.tracking.names import (
    hash_suffixed,
    sanitize_metric_names,
)
from rag_experiments.tracking.params import flatten_params, redact_yaml
from rag_experiments.tracking.record import ARTIFACTS, is_visible_tag
from rag_experiments.tracking.resilience import (
    MIN_REQUEST_TIMEOUT_S,
    Outage,
    TrackingUnavailableError,
    bounded_http,
    check_server,
)
from rag_experiments.tracking.selection import assessed_columns, check_mode, select_metrics

log = logging.getLogger(__name__)

VERSION_PACKAGES: tuple[str, ...] = (
    "rag-experiments",
    "mlflow",
    "chromadb",
    "sentence-transformers",
    "llama-cpp-python",
    "torch",
    "hydra-core",
)
"""Distributions whose installed version is in every run's ``environment.json`` as
``version.<name>``
(packages that are not installed are left out)."""

_BATCH_CHARS = 400_000
"""Upper bound on key + value characters per ``log_batch`` call, well under MLflow's 1 MB request
limit (``MAX_BATCH_LOG_REQUEST_SIZE``) even when JSON escapes non-ASCII text."""

_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")
_ERROR_TAG_CHARS = 500

_T = TypeVar("_T", Param, RunTag)


def _log_input_racing(dataset: Any, tags: dict[str, str], attempts: int = 4) -> None:
    """``mlflow.log_input`` that survives parallel sweep jobs logging the same dataset.

    MLflow's store inserts a dataset row keyed by (experiment, name, digest) when it does not
    exist yet; two jobs doing so at the same moment make the slower one fail with a UNIQUE
    constraint error (seen with the joblib launcher against an MLflow server). A retry finds
    the row the other job wrote and only links it to this run, so such errors are retried with
    a short backoff; any other error is raised at once.
    """
    for attempt in range(1, attempts + 1):
        try:
            mlflow.log_input(dataset, context="evaluation", tags=tags)
            return
        except Exception as exc:  # noqa: BLE001 - MLflow raises MlflowException/RestException
            if not racing(exc) or attempt == attempts:
                raise
            log.info("dataset row written by a parallel job; retrying log_input (%d)", attempt)
            time.sleep(0.2 * attempt)


def mlflow_command() -> str:
    """How to start this environment's ``mlflow`` from any shell, venv active or not: the
    absolute path of the ``mlflow`` script beside the running interpreter (the venv's
    ``bin/``), else ``<python> -m mlflow`` (shell-quoted)."""
    script = Path(sys.executable).parent / ("mlflow.exe" if os.name == "nt" else "mlflow")
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m mlflow"


class MlflowTracker:
    """Logs one run at a time to an MLflow tracking store.

    Usage::

        tracker = MlflowTracker("sqlite:///mlruns.db", "rag-experiments")
        with tracker.start_run(params=config, config_yaml=text, tags={"dataset": "demo"}) as run_id:
            tracker.log_metrics({"nDCG@10": 0.71})
            tracker.log_table(rows)
        print(tracker.describe_location())

    Args:
        uri: Tracking URI; a relative sqlite path resolves against the working directory.
        experiment: Experiment name (created when missing).
        run_name: Name of new runs (MLflow picks one when None).
        log_table: Also log per-query tables with ``mlflow.log_table`` (rendered in the UI); the
            CSV copy is always logged.
        traces: Log one MLflow trace per question (:meth:`log_traces`).
        metrics: Which summary values :meth:`log_summary` logs as MLflow metrics:
            ``headline`` (key metrics and run counts; everything else stays in the run's
            tables) or ``all`` (:mod:`~rag_experiments.tracking.selection`).

        retry_s: On a tracking server: longest wait, seconds, for a server that went away
            during the run (connection refused, timeout, 5xx); every logging call is retried
            with backoff meanwhile (:class:`~rag_experiments.tracking.resilience.Outage`).
            Past it :class:`~rag_experiments.tracking.resilience.TrackingUnavailableError` is
            raised and the run is left RUNNING, resumable. Unused for a sqlite store.
        trace_assessments: Which values each trace carries as assessments: ``key`` (the key
            metrics) or ``all`` (also every judged one;
            :func:`~rag_experiments.tracking.selection.assessed_columns`).


    Raises:
        TrackingError: If ``uri`` is empty or in-memory, or ``retry_s`` negative.
        ConfigError: An unknown ``metrics`` or ``trace_assessments`` mode.
    """

    def __init__(
        self,
        uri: str = "sqlite:///mlruns.db",
        experiment: str = "rag-experiments",
        run_name: str | None = None,
        log_table: bool = True,
        traces: bool = True,
        metrics: str = "headline",
        retry_s: float = 120.0,
        trace_assessments: str = "key",
    ) -> None:
        self.metrics_mode = check_mode(metrics)
        assessed_columns([], trace_assessments)  # an unknown mode fails before the run opens
        self.trace_assessments = trace_assessments
        self.uri = resolve_tracking_uri(uri)
        self.outage = Outage(self.uri, retry_s)
        """Retries logging calls through a server outage (shared by every call of the run)."""
        self.traces_enabled = traces
        self.experiment = experiment
        self.run_name = run_name
        self.table_enabled = log_table
        self.experiment_id: str | None = None
        self.run_id: str | None = None
        """Id of the active run, or of the last one after it ended."""
        self._active = False
        self._metric_keys: dict[str, str] = {}
        self._logged: dict[str, float] = {}
        """Latest value of every metric key in the run (read back when resuming), so a value
        logged again unchanged is not added to the metric's history twice."""
        self._tables: list[dict[str, str]] = []
        self._kept_tags: dict[str, str] = {}
        """The run's tags kept in the artifact ``tags.json`` rather than as MLflow tags
        (:data:`~rag_experiments.tracking.record.VISIBLE_TAGS`)."""
        self._client_obj: mlflow.MlflowClient | None = None

    # --- run lifecycle -----------------------------------------------------------------------

    @contextmanager
    def start_run(
        self,
        *,
        params: Mapping[str, Any],
        config_yaml: str,
        tags: Mapping[str, str],
        parent_run_id: str | None = None,
        run_id: str | None = None,
    ) -> Iterator[str]:
        """Open a run, log its identity, and close it with the right status.

        The run becomes MLflow's active run for the body (so ``mlflow.log_*`` calls inside it
        land there) and is always ended afterwards: FINISHED when the body returns; FAILED (or
        KILLED on ``KeyboardInterrupt``) when it raises, with tag ``error`` (the exception's
        type and first line) and artifact ``error.txt`` (the traceback), and the exception is
        re-raised. Runs the body itself left active are ended too.

        Args:
            params: Nested config; logged flattened and redacted as params.
            config_yaml: The resolved config as YAML; logged redacted as ``config.yaml``.
            tags: Extra tags (keys sanitised, values redacted, cut to MLflow's limit).
            parent_run_id: Nest the run under this run (tag ``mlflow.parentRunId``); the parent
                need not be active in this process.
            run_id: Resume this run instead of creating one (params must match the logged ones).

        Yields:
            The run id.

        Raises:
            TrackingError: If a run is already active in this process, the store cannot be
                reached, ``run_id`` does not exist, or params/tags are refused.
        """
        if self._active or mlflow.active_run() is not None:
            active = mlflow.active_run()
            raise TrackingError(
                "Cannot start an MLflow run: run "
                f"{active.info.run_id if active else self.run_id} is still active in this "
                "process. End it first (leave its `with tracker.start_run(...)` block or call "
                "mlflow.end_run())."
            )
        if self.outage.remote:
            check_server(self.uri)  # a server that is not running fails before any work
        self.outage.down = None
        mlflow.set_tracking_uri(self.uri)
        client = self.outage.call("the experiment", self._client)
        experiment_id = self.outage.call(
            "the experiment", ensure_experiment, client, self.experiment, self.uri
        )
        start_tags = {MLFLOW_PARENT_RUN_ID: parent_run_id} if parent_run_id else None
        self._logged = {}
        self._tables = []
        self._kept_tags = {}
        try:
            if run_id is not None:
                active = self.outage.call(
                    "the resumed run", mlflow.start_run, run_id=run_id, tags=start_tags
                )
                self._logged = dict(active.data.metrics)
                self._kept_tags = _read_kept_tags(client, run_id)
            else:
                active = self.outage.call(
                    "a new run",
                    mlflow.start_run,
                    experiment_id=experiment_id,
                    run_name=self.run_name,
                    tags=start_tags,
                )
        except MlflowException as e:
            what = f"resume run {run_id}" if run_id else "start a run"
            raise TrackingError(
                f"Cannot {what} in experiment {self.experiment!r} at {self.uri}: {e.message}"
            ) from e
        self.experiment_id = active.info.experiment_id
        self.run_id = active.info.run_id
        self._active = True
        self._metric_keys = {}
        status = RunStatus.to_string(RunStatus.FINISHED)
        try:
            self._log_identity(client, params, config_yaml, tags)
            yield self.run_id
            self._log_metric_names(client)
        except BaseException as exc:
            if isinstance(exc, TrackingUnavailableError):
                exc.run_id = self.run_id
            if isinstance(exc, interrupt.Interrupted) and parent_run_id is None:
                exc.run_id = exc.run_id or self.run_id  # the message names the id to resume
            kind = RunStatus.KILLED if isinstance(exc, KeyboardInterrupt) else RunStatus.FAILED
            status = RunStatus.to_string(kind)
            self._record_error(client, exc)
            raise
        finally:
            self._end(client, status)

    def _log_identity(
        self,
        client: mlflow.MlflowClient,
        params: Mapping[str, Any],
        config_yaml: str,
        tags: Mapping[str, str],
    ) -> None:
        """Log params, tags and ``config.yaml`` at the start of a run."""
        flat = flatten_params(params)
        run_id = self._require_run()
        try:
            for batch in _batches([Param(k, v) for k, v in flat.items()]):
                self.outage.call("params", client.log_batch, run_id, params=batch)
            self._write_tags(client, _sanitised_tags(tags))
        except MlflowException as e:
            raise TrackingError(
                f"MLflow refused the params/tags of run {self.run_id}: {e.message}. When "
                "resuming a run, use the config it was started with."
            ) from e
        self.outage.call(
            "config.yaml", client.log_text, run_id, redact_yaml(config_yaml), "config.yaml"
        )
        self.outage.call(
            ENVIRONMENT_ARTIFACT, client.log_dict, run_id, _environment(), ENVIRONMENT_ARTIFACT
        )

    def _record_error(self, client: mlflow.MlflowClient, exc: BaseException) -> None:
        """Tag the failure and attach the traceback; never masks the original exception."""
        lines = str(exc).strip().splitlines()
        short = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if self.outage.down is not None:
            return  # the server is gone: the run stays RUNNING, to be resumed
        try:
            run_id = self._require_run()
            tag = RunTag("error", hash_suffixed(redact(short), _ERROR_TAG_CHARS))
            self.outage.call("the error", client.log_batch, run_id, tags=[tag])
            self.outage.call("error.txt", client.log_text, run_id, redact(text), "error.txt")
            self._log_metric_names(client)
        except Exception as e:  # the body's exception matters more than a logging failure
            log.warning("Could not record the error on MLflow run %s: %s", self.run_id, e)

    def _end(self, client: mlflow.MlflowClient, status: str) -> None:
        """End our run and every run the body left active above it. When the server stayed
        away (:attr:`outage` down), the runs are only closed in this process (MLflow pops its
        active run before telling the server) and stay RUNNING on the server."""
        try:
            while (active := mlflow.active_run()) is not None:
                own = active.info.run_id == self.run_id
                end = status if own else RunStatus.to_string(RunStatus.KILLED)
                if self.outage.down is not None:
                    with bounded_http(MIN_REQUEST_TIMEOUT_S):
                        try:
                            mlflow.end_run(end)
                        except Exception:  # noqa: BLE001, S110 - popped; the server is gone
                            pass
                else:
                    with _no_url_print():
                        self.outage.call("the run's status", mlflow.end_run, end)
                if own:
                    break
            else:
                if self.outage.down is None:
                    run_id = self._require_run()
                    self.outage.call("the run's status", client.set_terminated, run_id, status)
        finally:
            self._active = False

    # --- logging -----------------------------------------------------------------------------

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set run tags (keys sanitised, values stringified, redacted, cut to MLflow's limit).

        Args:
            tags: ``{key: value}``, e.g. a target's ``describe()``.

        Raises:
            TrackingError: Outside a run, or when two keys collide once sanitised.
        """
        self._require_run()
        self._write_tags(self._client(), _sanitised_tags(tags))

    def _write_tags(self, client: mlflow.MlflowClient, tags: Mapping[str, str]) -> None:
        """Log ``tags`` (keys and values ready): those of
        :data:`~rag_experiments.tracking.record.VISIBLE_TAGS` as MLflow tags, the others into
        the artifact ``tags.json`` (rewritten with every kept tag of the run)."""
        run_id = self._require_run()
        shown = {k: v for k, v in tags.items() if is_visible_tag(k)}
        kept = {k: v for k, v in tags.items() if not is_visible_tag(k)}
        for batch in _batches([RunTag(k, v) for k, v in shown.items()]):
            self.outage.call("tags", client.log_batch, run_id, tags=batch)
        if kept:
            self._kept_tags.update(kept)
            self._log_kept_tags(client)

    def _log_kept_tags(self, client: mlflow.MlflowClient) -> None:
        """Rewrite ``tags.json`` with the run's kept tags, sorted by key."""
        data = dict(sorted(self._kept_tags.items()))
        self.outage.call(ARTIFACTS.tags, client.log_dict, self._require_run(), data, ARTIFACTS.tags)

    def delete_tag(self, key: str) -> None:
        """Delete tag ``key`` of the active run (nothing when it is not set).

        Raises:
            TrackingError: Outside a run, or the store refused.
        """
        run_id = self._require_run()
        client = self._client()
        if self._kept_tags.pop(key, None) is not None:
            self._log_kept_tags(client)
        try:
            if key in self.outage.call("tags", client.get_run, run_id).data.tags:
                self.outage.call("tags", client.delete_tag, run_id, key)
        except MlflowException as e:
            raise TrackingError(f"Cannot delete tag {key!r} of run {run_id}: {e.message}") from e

    def delete_artifact(self, path: str) -> None:
        """Delete artifact ``path`` of the active run (nothing when it does not exist); on a
        server, retried through an outage like every logging call.

        Raises:
            TrackingUnavailableError: The server stayed unreachable for ``tracking.retry_s``.
            TrackingError: Outside a run, or the artifact store refused.
        """
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        run_id = self._require_run()
        client = self._client()
        try:
            listed = self.outage.call(path, client.list_artifacts, run_id)
            if path not in {a.path for a in listed}:
                return
            info = self.outage.call(path, client.get_run, run_id).info
            repo = get_artifact_repository(info.artifact_uri)
            self.outage.call(path, repo.delete_artifacts, path)
        except (MlflowException, NotImplementedError, OSError) as e:
            raise TrackingError(f"Cannot delete artifact {path} of run {run_id}: {e}") from e

    def log_metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        """Log aggregate metrics under sanitised keys.

        NaN and infinite values are skipped silently (log ``<metric>_n_valid`` to say how many
        rows were defined), and so is a value equal to the key's latest value in the run (a
        resumed run logging again what it logged before adds nothing to the history). Up to
        ``MAX_METRICS_PER_BATCH`` (1,000) metrics go in one ``log_batch`` request; a server
        running our app takes them all in one request (:mod:`~rag_experiments.tracking.
        metric_batch`, the same rows). Every name
        passed to this method during the run, logged or not, takes part in collision
        detection and is listed in ``metric_names.json``.

        Args:
            values: ``{canonical name: value}``.
            step: Optional step (e.g. a sweep index); 0 when None.

        Raises:
            TrackingError: Outside a run, for a non-numeric value, or when two names collide.
        """
        run_id = self._require_run()
        names = list(self._metric_keys) + [n for n in values if n not in self._metric_keys]
        self._metric_keys = sanitize_metric_names(names)
        now = int(time.time() * 1000)
        metrics: list[Metric] = []
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                try:
                    value = float(value)  # numpy scalars
                except (TypeError, ValueError):
                    raise TrackingError(
                        f"Metric {name!r} has the non-numeric value {value!r}: log numbers only."
                    ) from None
            key = self._metric_keys[name]
            if math.isfinite(value) and self._logged.get(key) != float(value):
                metrics.append(Metric(key, float(value), now, step or 0))
        client = self._client()
        if metrics and self.outage.remote:
            from rag_experiments.tracking.metric_batch import send_metrics

            store = client._tracking_client.store  # the client's RestStore
            if self.outage.call("metrics", send_metrics, store, run_id, metrics):
                self._logged.update((m.key, m.value) for m in metrics)
                return
        for i in range(0, len(metrics), MAX_METRICS_PER_BATCH):
            batch = metrics[i : i + MAX_METRICS_PER_BATCH]
            self.outage.call("metrics", client.log_batch, run_id, metrics=batch)
            self._logged.update((m.key, m.value) for m in batch)

    def log_summary(self, values: Mapping[str, float], specs: Sequence[MetricSpec]) -> None:
        """Log a run's summary values: those :func:`~rag_experiments.tracking.selection.
        select_metrics` selects for the tracker's ``metrics`` mode, as metrics
        (:meth:`log_metrics`). The caller logs the full aggregates as a table.

        Args:
            values: ``{canonical name: value}`` (aggregates and run-level values).
            specs: The run's metric columns (whose aggregates ``values`` holds; those with a
                key priority are the key metrics).

        Raises:
            TrackingError: As :meth:`log_metrics`.
        """
        self.log_metrics(select_metrics(values, specs, self.metrics_mode))

    def log_table(self, rows: Sequence[Mapping[str, Any]], name: str = "per_query") -> None:
        """Log per-row results: ``<name>.json`` for the UI and a full ``<name>_results.csv``.

        List and dict cells become JSON strings in both. The JSON table is only written when
        the tracker was built with ``log_table=True``; the CSV always is, untruncated.

        Args:
            rows: One mapping per row (columns are the union of keys, first-seen order).
            name: Artifact base name (letters, digits, ``_ . -``).

        Raises:
            TrackingError: Outside a run or for an unsafe ``name``.
        """
        run_id = self._require_run()
        _check_artifact_name(f"{name}.json")
        frame = _frame(rows)
        client = self._client()
        if self.table_enabled:
            # MlflowClient.log_table appends to an existing file (a retried or resumed run
            # would double the rows) and costs four requests; this writes the same JSON
            # (orient "split", as log_table does) in one upload, and its UI tag in one batch.
            text = frame.to_json(orient="split", index=False, date_format="iso")
            self.outage.call(f"{name}.json", client.log_text, run_id, text, f"{name}.json")
            entry = {"path": f"{name}.json", "type": "table"}
            if entry not in self._tables:
                self._tables.append(entry)
            tag = RunTag(MLFLOW_LOGGED_ARTIFACTS, json.dumps(self._tables))
            self.outage.call("tags", client.log_batch, run_id, tags=[tag])
        csv = frame.to_csv(index=False)
        self.outage.call(f"{name}_results.csv", client.log_text, run_id, csv, f"{name}_results.csv")

    def log_csv(self, rows: Sequence[Mapping[str, Any]], filename: str) -> None:
        """Log rows as a CSV artifact (list and dict cells as JSON strings).

        Raises:
            TrackingError: Outside a run or for an unsafe ``filename``.
        """
        self.log_text(_frame(rows).to_csv(index=False), filename)

    def log_text(self, text: str, filename: str) -> None:
        """Log a text artifact at ``filename`` (a run-relative path such as ``report.md``).

        Raises:
            TrackingError: Outside a run or for an unsafe ``filename``.
        """
        run_id = self._require_run()
        path = _check_artifact_name(filename)
        self.outage.call(filename, self._client().log_text, run_id, text, path)

    def log_dict(self, d: Mapping[str, Any] | list[Any], filename: str) -> None:
        """Log a dict (or list) as JSON (``.json``) or YAML (``.yaml``/``.yml``).

        Logged as given: pass it through :func:`~rag_experiments.tracking.names.redact` first if
        it may hold secrets.

        Raises:
            TrackingError: Outside a run or for an unsafe ``filename``.
        """
        run_id = self._require_run()
        path = _check_artifact_name(filename)
        self.outage.call(filename, self._client().log_dict, run_id, d, path)

    def log_dataset(
        self, name: str, digest: str, source: str, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Record the evaluation dataset as an MLflow input (context ``evaluation``).

        MLflow caps a dataset digest at ``MAX_DATASET_DIGEST_SIZE`` (36) characters, so the
        input's digest is our digest's first 36 characters; the full digest is the run tag
        ``dataset.digest`` and the input tag ``dataset.digest``.

        Args:
            name: Dataset name.
            digest: Our content digest of the dataset (e.g. SHA-256 hex).
            source: Where it came from: a path, a URL, or any label (``beir:scifact``); when
                empty, MLflow records the calling code as the source.
            rows: The samples as mappings (list/dict cells stored as JSON strings).

        Raises:
            TrackingError: Outside a run, or when another run is MLflow's active run.
        """
        run_id = self._require_run()
        active = mlflow.active_run()
        if active is None or active.info.run_id != run_id:
            raise TrackingError(
                f"log_dataset needs run {run_id} to be MLflow's active run; call it directly "
                "inside `with tracker.start_run(...)`, not inside a nested run."
            )
        dataset = mlflow.data.from_pandas(
            _frame(rows),
            source=_dataset_source(source) if source else None,
            name=name,
            digest=digest[:MAX_DATASET_DIGEST_SIZE],
        )
        input_tags = {"dataset.digest": digest[:MAX_INPUT_TAG_VALUE_SIZE]}
        self.outage.call("the dataset input", _log_input_racing, dataset, input_tags)
        tags = {"dataset.name": name, "dataset.digest": digest, "dataset.source": source}
        cut = {k: hash_suffixed(v, MAX_TAG_VAL_LENGTH) for k, v in tags.items()}
        self._write_tags(self._client(), cut)

    def log_traces(self, result: Any, target_tags: Mapping[str, str]) -> None:
        """Log one trace per question of ``result`` into the run's experiment, linked to the
        run (:func:`~rag_experiments.tracking.trace_log.log_traces`); nothing when the tracker was
        built with ``traces=False``. A store that refuses traces (a folder store) costs a
        warning and the run tag ``traces.error``, not the run.

        Args:
            result: The run's evaluation result: ``samples``, ``responses``, ``values``,
                ``audit`` and ``specs`` (each spec says whether it is a key metric and which
                judge computed it, :class:`~rag_experiments.records.MetricSpec`).
            target_tags: The target's ``describe()`` (``llm.model`` names the generator).

        Raises:
            TrackingError: Outside a run.
        """
        run_id = self._require_run()
        if not self.traces_enabled or not result.samples:
            return
        from rag_experiments.tracking.trace_log import log_traces

        try:
            self.outage.call(
                "traces",
                log_traces,
                self.uri,
                str(self.experiment_id),
                run_id,
                result.samples,
                result.responses,
                result.values,
                result.specs,
                audit=result.audit,
                model=target_tags.get("llm.model"),
                assessments=self.trace_assessments,
            )
        except TrackingUnavailableError:
            raise  # the server is gone: the run is left to be resumed, traces included
        except Exception as exc:  # noqa: BLE001 - traces add a view; the results are logged
            log.warning("Could not log traces to %s: %s: %s", self.uri, type(exc).__name__, exc)
            self.set_tags({"traces.error": f"{type(exc).__name__}: {exc}"})

    # --- location ----------------------------------------------------------------------------

    def run_url(self) -> str | None:
        """The run's page on a tracking server, or None for a file-based store or before any
        run."""
        if self.run_id is None or urlparse(self.uri).scheme not in ("http", "https"):
            return None
        return f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"

    def describe_location(self) -> str:
        """A line for the CLI saying where the current (or last) run is and how to view it."""
        if self.run_id is None:
            return f"MLflow store {self.uri}, experiment {self.experiment!r} (no run yet)"
        where = (
            f"MLflow run {self.run_id} in experiment {self.experiment!r} "
            f"(id {self.experiment_id}) at {self.uri}"
        )
        url = self.run_url()
        if url:
            return f"{where}: {url}"
        return f"{where}; view it with: {mlflow_command()} ui --backend-store-uri {self.uri}"

    # --- helpers -----------------------------------------------------------------------------

    def _client(self) -> mlflow.MlflowClient:
        """The tracker's client, opened once (creating a sqlite store's tables safely)."""
        if self._client_obj is None:
            self._client_obj = open_client(self.uri)
        return self._client_obj

    def _require_run(self) -> str:
        if not self._active or self.run_id is None:
            raise TrackingError(
                "No MLflow run is open: call this inside `with tracker.start_run(...)`."
            )
        return self.run_id

    def _log_metric_names(self, client: mlflow.MlflowClient) -> None:
        if self._metric_keys:
            run_id = self._require_run()
            self.outage.call(
                "metric_names.json", client.log_dict, run_id, self._metric_keys, "metric_names.json"
            )


@contextmanager
def _no_url_print() -> Iterator[None]:
    """Within: MLflow's ``end_run`` on a tracking server does not print "View run … at" (it
    reads the whole run back with a ``runs/get`` request for it: 0.06-1 s measured at 345
    questions in ``bench/logging_throughput.py``; our CLI names the run's URL itself,
    :meth:`MlflowTracker.describe_location`). The variable is restored afterwards."""
    name = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
    before = os.environ.get(name)
    os.environ[name] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _read_kept_tags(client: mlflow.MlflowClient, run_id: str) -> dict[str, str]:
    """The kept tags (``tags.json``) of a run being resumed; empty when it has none."""
    from rag_experiments.tracking.store import kept_tags

    return kept_tags(client, run_id)


ENVIRONMENT_ARTIFACT = "environment.json"
"""Artifact holding :func:`_environment` (not tags: the run page shows every tag of ours on its
first screen, and nothing reads these back)."""


def _environment() -> dict[str, str]:
    """Git commit of the harness checkout (when there is one) and package versions."""
    tags = {"version.python": platform.python_version()}
    for dist in VERSION_PACKAGES:
        try:
            tags[f"version.{dist}"] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    where = Path(__file__).resolve().parent
    commit = _git(where, "rev-parse", "HEAD")
    if commit:
        tags["git.commit"] = commit
        status = _git(where, "status", "--porcelain", "--untracked-files=no")
        if status is not None:
            tags["git.dirty"] = "true" if status else "false"
    return tags


def _git(cwd: Path, *args: str) -> str | None:
    """Output of a git command, or None when git is missing or ``cwd`` is not a checkout."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _sanitised_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    """Caller tags with valid keys, redacted values, cut to ``MAX_TAG_VAL_LENGTH``."""
    keys = sanitize_metric_names(str(k) for k in tags)
    clean = redact({str(k): v for k, v in tags.items()})
    return {keys[k]: hash_suffixed(str(v), MAX_TAG_VAL_LENGTH) for k, v in clean.items()}


def _batches(items: list[_T]) -> Iterator[list[_T]]:
    """Split params/tags into ``log_batch`` calls within MLflow's count and size limits."""
    batch: list[_T] = []
    chars = 0
    for item in items:
        size = len(item.key) + len(item.value)
        if batch and (len(batch) == MAX_PARAMS_TAGS_PER_BATCH or chars + size > _BATCH_CHARS):
            yield batch
            batch, chars = [], 0
        batch.append(item)
        chars += size
    if batch:
        yield batch


def _cell(value: Any) -> Any:
    """A table cell the MLflow UI can render: lists and dicts as JSON strings."""
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, ensure_ascii=False, default=str)
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    return value


def _frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows → DataFrame (columns in first-seen order, nested cells as JSON strings)."""
    return pd.DataFrame([{str(k): _cell(v) for k, v in row.items()} for row in rows])


def _check_artifact_name(filename: str) -> str:
    """Refuse artifact paths that could escape the run's folder."""
    if not _ARTIFACT_NAME.match(filename) or any(
        part in (".", "..") for part in filename.split("/")
    ):
        raise TrackingError(
            f"Artifact name {filename!r} is not a safe run-relative path: use letters, digits, "
            "'_', '.', '-' and '/' between folder names, without '..'."
        )
    return filename


class _LabelSource(DatasetSource):
    """Dataset source for labels MLflow cannot resolve (``beir:scifact``, ``bundled:demo``)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    @staticmethod
    def _get_source_type() -> str:
        return "rag_experiments"

    def load(self) -> Any:
        raise TrackingError(f"Dataset source {self.uri!r} is a label and cannot be loaded.")

    @staticmethod
    def _can_resolve(raw_source: Any) -> bool:
        return False

    @classmethod
    def _resolve(cls, raw_source: Any) -> _LabelSource:
        return cls(str(raw_source))

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri}

    @classmethod
    def from_dict(cls, source_dict: dict[Any, Any]) -> _LabelSource:
        return cls(str(source_dict["uri"]))


def _dataset_source(source: str) -> DatasetSource:
    """MLflow's own source for paths and URLs; :class:`_LabelSource` for anything else."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "can be interpreted in multiple ways"
        try:
            return resolve_dataset_source(source)
        except MlflowException:
            return _LabelSource(source)
