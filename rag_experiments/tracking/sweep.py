"""Parent/child MLflow runs for Hydra multiruns.

A sweep (``rag-exp -m …``) gets one *parent* run; each job's run is its child (tag
``mlflow.parentRunId``). The parent is created by :class:`MlflowSweepCallback` before any job
starts, and its id is written to ``<sweep dir>/mlflow_parent_run_id``. That file is the only
channel to the jobs, so it works whether they run in the same process (basic launcher) or in
others (joblib, submitit; the Ray launcher writes it on each job's node,
:mod:`rag_experiments.lifecycle.launchers`): a job calls :func:`read_parent_run_id` (or
:func:`parent_run_id_for_job`) and passes the id to
:meth:`~rag_experiments.tracking.mlflow_tracker.MlflowTracker.start_run`.

Hook it up in the config::

    hydra:
      callbacks:
        mlflow_sweep:
          _target_: rag_experiments.tracking.sweep.MlflowSweepCallback
          uri: ${tracking.uri}
          experiment: ${tracking.experiment}
"""

from __future__ import annotations

import atexit
import datetime as _dt
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import mlflow
from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from mlflow.entities import Metric, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from omegaconf import DictConfig

from rag_experiments.common import interrupt
from rag_experiments.config.reporting import reported
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.mlflow_tracker import (
    ensure_experiment,
    open_client,
    resolve_tracking_uri,
)

log = logging.getLogger(__name__)

PARENT_RUN_ID_FILE = "mlflow_parent_run_id"
"""File in the sweep directory that holds the parent run id (one line)."""

_RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")  # mlflow.utils.validation._RUN_ID_REGEX
_STATUSES = ("FINISHED", "FAILED", "KILLED", "RUNNING", "SCHEDULED")


class MlflowSweepCallback(Callback):
    """Hydra callback that opens a parent run for a multirun and closes it at the end.

    The parent ends FINISHED when every child run FINISHED, FAILED otherwise (a child that is
    FAILED or KILLED, or still RUNNING/SCHEDULED at the end because its process died); a
    sweeper that succeeds past failed children (Optuna) closes it FINISHED first
    (:func:`close_sweep` ``tolerated``). Metrics
    ``sweep.children.total`` and ``sweep.children.<status>`` (lower case) count the children.

    Hydra skips ``on_multirun_end`` when a job raises (its sweeper re-raises the job's
    exception). For that case an ``atexit`` hook closes a parent that is still open, as FAILED
    with tag ``error``, or KILLED when SIGINT/SIGTERM stopped the sweep
    (:mod:`rag_experiments.common.interrupt`).

    Args:
        uri: Tracking URI (same as the jobs' ``tracking.uri``).
        experiment: Experiment of the parent run (same as the jobs' ``tracking.experiment``:
            children are looked up in the parent's experiment).
    """

    def __init__(self, uri: str, experiment: str) -> None:
        self.uri = resolve_tracking_uri(uri)
        self.experiment = experiment
        self._open_sweep: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Create the parent run and write its id to ``<hydra.sweep.dir>/mlflow_parent_run_id``.

        Raises:
            ReportedError: The tracking store cannot be reached (a :class:`TrackingError`,
                printed as one line).
        """
        with reported():
            self._open(config)

    def _open(self, config: DictConfig) -> None:
        sweep_dir = Path(to_absolute_path(str(config.hydra.sweep.dir)))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        client = open_client(self.uri)
        experiment_id = ensure_experiment(client, self.experiment, self.uri)
        name = sweep_dir.name or "sweep-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        try:
            run = client.create_run(
                experiment_id, run_name=name, tags={"sweep.dir": str(sweep_dir)}
            )
        except MlflowException as e:
            raise TrackingError(
                f"Cannot create the sweep's parent run at {self.uri}: {e.message}"
            ) from e
        write_parent_run_id(sweep_dir, run.info.run_id)
        self._open_sweep = sweep_dir
        atexit.register(self._close_aborted)
        log.info("MLflow parent run %s for sweep %s", run.info.run_id, sweep_dir)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Close the parent run with a status derived from its children.

        Raises:
            TrackingError: If the tracking store cannot be reached.
        """
        atexit.unregister(self._close_aborted)
        self._open_sweep = None
        close_sweep(self.uri, to_absolute_path(str(config.hydra.sweep.dir)))

    def _close_aborted(self) -> None:
        """atexit hook: the sweep ended without ``on_multirun_end``. Runs once: a second call
        (the hook at exit after an explicit call) does nothing."""
        if self._open_sweep is None:
            return
        sweep_dir, self._open_sweep = self._open_sweep, None
        atexit.unregister(self._close_aborted)
        try:
            close_sweep(self.uri, str(sweep_dir), aborted=True, signal_name=interrupt.received())
        except Exception as e:  # at interpreter exit, report instead of raising
            log.warning("Could not close the sweep's parent MLflow run: %s", e)


def close_sweep(
    uri: str,
    sweep_dir: str,
    *,
    aborted: bool = False,
    error: str | None = None,
    tolerated: str | None = None,
    signal_name: str | None = None,
) -> str | None:
    """Terminate a sweep's parent run (idempotent: an already ended parent is left alone).

    Args:
        uri: Tracking URI.
        sweep_dir: The sweep directory holding ``mlflow_parent_run_id``.
        aborted: The sweep stopped early (a job raised); the parent ends FAILED with tag
            ``error``.
        error: Why the sweep failed (tag ``error`` and the run's description); the parent
            ends FAILED.
        tolerated: The sweep succeeded although some children failed (an Optuna study goes
            on past failed trials and has a best value): the parent ends FINISHED with this
            text as tag ``sweep.failed_children``, so its status agrees with the exit code.
        signal_name: With ``aborted``: the signal that stopped the sweep (``SIGTERM``,
            :func:`rag_experiments.common.interrupt.received`); the parent ends KILLED, as
            does every child still RUNNING (a job in another process), with tag ``error``
            naming it.

    Returns:
        The status given to the parent (``FINISHED`` / ``FAILED`` / ``KILLED``), or None when
        there was no parent to close.

    Raises:
        TrackingError: If the store cannot be reached or the parent run does not exist.
    """
    parent_id = read_parent_run_id(sweep_dir)
    if parent_id is None:
        log.warning("No %s in %s: no parent MLflow run to close.", PARENT_RUN_ID_FILE, sweep_dir)
        return None
    uri = resolve_tracking_uri(uri)
    client = open_client(uri)
    signal_name = signal_name if aborted and error is None else None
    running = RunStatus.to_string(RunStatus.RUNNING)
    try:
        parent = client.get_run(parent_id)
        if parent.info.status != running:
            return None
        children = child_runs(client, parent.info.experiment_id, parent_id)
        tags = []
        if signal_name is not None:
            why = f"Interrupted: the sweep was stopped by {signal_name}"
            tags.append(RunTag("error", why))
            for child in children:  # a job in another process stopped with the sweep
                if child.info.status == running:
                    client.set_tag(child.info.run_id, "error", why)
                    client.set_terminated(child.info.run_id, RunStatus.to_string(RunStatus.KILLED))
            children = child_runs(client, parent.info.experiment_id, parent_id)
        counts = Counter(r.info.status for r in children)
        children_ok = tolerated is not None or set(counts) <= {"FINISHED"}
        ok = not aborted and error is None and children_ok
        kind = RunStatus.FINISHED if ok else RunStatus.FAILED
        status = RunStatus.to_string(RunStatus.KILLED if signal_name else kind)
        now = _now_ms()
        metrics = [Metric("sweep.children.total", float(sum(counts.values())), now, 0)]
        metrics += [
            Metric(f"sweep.children.{s.lower()}", float(counts.get(s, 0)), now, 0)
            for s in _STATUSES
        ]
        if error is not None:
            tags += [RunTag("error", error), RunTag("mlflow.note.content", error)]
        elif aborted and signal_name is None:
            tags.append(RunTag("error", "the sweep stopped before all jobs ended (a job raised)"))
        elif tolerated is not None and set(counts) - {"FINISHED"}:
            tags.append(RunTag("sweep.failed_children", tolerated))
        client.log_batch(parent_id, metrics=metrics, tags=tags)
        client.set_terminated(parent_id, status)
    except MlflowException as e:
        raise TrackingError(
            f"Cannot close the sweep's parent run {parent_id} at {uri}: {e.message}"
        ) from e
    return status


def write_parent_run_id(sweep_dir: Path, run_id: str) -> None:
    """Write ``<sweep_dir>/mlflow_parent_run_id`` atomically (readers never see half an id).

    Launchers whose jobs run where the sweep directory is not shared (a Ray cluster) call it
    on the job's node before the job starts.

    Args:
        sweep_dir: The sweep directory (absolute); created when missing.
        run_id: The parent run id.
    """
    sweep_dir.mkdir(parents=True, exist_ok=True)
    target = sweep_dir / PARENT_RUN_ID_FILE
    tmp = target.with_name(f"{PARENT_RUN_ID_FILE}.{os.getpid()}.tmp")
    tmp.write_text(run_id + "\n", encoding="utf-8")
    os.replace(tmp, target)


def read_parent_run_id(sweep_dir: str) -> str | None:
    """Read the parent run id a sweep's callback wrote.

    A relative ``sweep_dir`` is taken relative to the directory the program started in (Hydra's
    original working directory), so it also works in jobs with ``hydra.job.chdir=true``.

    Args:
        sweep_dir: The sweep directory (``hydra.sweep.dir``).

    Returns:
        The parent run id, or None when the file does not exist (not a sweep, or no callback).

    Raises:
        TrackingError: If the file exists but does not hold a run id.
    """
    path = Path(to_absolute_path(sweep_dir)) / PARENT_RUN_ID_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if not _RUN_ID.match(text):
        raise TrackingError(
            f"{path} does not hold an MLflow run id (found {text[:80]!r}); delete it and rerun "
            "the sweep."
        )
    return text


def parent_run_id_for_job() -> str | None:
    """The parent run id for the current Hydra job: None outside a multirun.

    Returns:
        The id read from ``hydra.sweep.dir`` in MULTIRUN mode, else None.

    Raises:
        TrackingError: If the parent-id file is corrupt.
    """
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return read_parent_run_id(str(hydra_cfg.sweep.dir))


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


def _now_ms() -> int:
    return int(_dt.datetime.now(tz=_dt.timezone.utc).timestamp() * 1000)
