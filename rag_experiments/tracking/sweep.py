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
import json
import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from mlflow.entities import Metric, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from omegaconf import DictConfig, OmegaConf

from rag_experiments.common import interrupt
from rag_experiments.config.reporting import aborting
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.mlflow_tracker import (
    ensure_experiment,
    open_client,
    resolve_tracking_uri,
)
from rag_experiments.tracking.resilience import check_server, is_remote
from rag_experiments.tracking.store import RunStore, child_runs

log = logging.getLogger(__name__)

PARENT_RUN_ID_FILE = "mlflow_parent_run_id"
"""File in the sweep directory that holds the parent run id (one line)."""

SWEPT_TAG = "sweep.params"
"""Tag of the parent run: the swept config keys (JSON list), read by each job to name its run
(:func:`child_run_name`)."""

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

    The parent is tagged ``sweep.params`` with the swept keys, so each job names its run
    after its swept values (:func:`child_run_name`). At the end (``on_multirun_end``) the
    sweep report (``rag-exp report``) is logged to the parent when a child finished, and the
    parent's id, status, store and the report's location are printed as the last lines
    (:func:`announce_sweep_end`).

    Args:
        uri: Tracking URI (same as the jobs' ``tracking.uri``).
        experiment: Experiment of the parent run (same as the jobs' ``tracking.experiment``:
            children are looked up in the parent's experiment).
        report: Build and log the sweep report at the end.
    """

    def __init__(self, uri: str, experiment: str, report: bool = True) -> None:
        self.uri = resolve_tracking_uri(uri)
        self.experiment = experiment
        self.report = report
        self._open_sweep: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Create the parent run and write its id to ``<hydra.sweep.dir>/mlflow_parent_run_id``.
        A tracking server is asked for ``/health`` first, so a dead one stops the sweep in
        seconds, before any job (not after MLflow's own retries, minutes).

        Raises:
            CallbackAbort: The tracking store cannot be reached or the parent run cannot be
                made (a :class:`TrackingError`, printed as one line; no job is launched).
        """
        with aborting():
            self._open(config)

    def _open(self, config: DictConfig) -> None:
        if is_remote(self.uri):
            check_server(self.uri)
        sweep_dir = Path(to_absolute_path(str(config.hydra.sweep.dir)))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        client = open_client(self.uri)
        experiment_id = ensure_experiment(client, self.experiment, self.uri)
        name = sweep_dir.name or "sweep-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        swept = swept_keys(
            list(OmegaConf.select(config, "hydra.overrides.task", default=None) or []),
            dict(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}),
        )
        tags = {"sweep.dir": str(sweep_dir), SWEPT_TAG: json.dumps(swept)}
        try:
            run = client.create_run(experiment_id, run_name=name, tags=tags)
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
        sweep_dir = to_absolute_path(str(config.hydra.sweep.dir))
        status = close_sweep(self.uri, sweep_dir)
        parent_id = read_parent_run_id(sweep_dir)
        if parent_id is not None and status is not None:
            print(announce_sweep_end(self.uri, parent_id, status, report=self.report))

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


def announce_sweep_end(uri: str, parent_id: str, status: str, *, report: bool = True) -> str:
    """The lines printed at the end of a sweep: the parent run (id, status, children,
    experiment, store) and where its report is; the report is built and logged first
    (:mod:`~rag_experiments.analysis.report`) when ``report`` and a child finished. A report
    that cannot be built costs a line saying why, never the sweep.

    Args:
        uri: Resolved tracking URI.
        parent_id: The sweep's parent run.
        status: The parent's final status.
        report: Build and log the report.

    Returns:
        Two lines, no trailing newline, and a third naming ``rag-exp merge`` when the children
        differ in ``shard.index`` only (the shards of one evaluation).
    """
    from rag_experiments.analysis.report import (
        build_report,
        log_report,
        swept_params,
        write_sweep_report,
    )
    from rag_experiments.analysis.runs import artifact_location

    client = open_client(uri)
    parent = client.get_run(parent_id)
    experiment = client.get_experiment(parent.info.experiment_id).name
    children_runs = child_runs(client, parent.info.experiment_id, parent_id)
    counts = Counter(r.info.status for r in children_runs)
    children = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "none"
    lines = [
        f"sweep parent run {parent_id} {status} (children: {children}) in experiment "
        f"{experiment!r} at {uri}"
    ]
    where = f"rag-exp report {parent_id} --tracking-uri {uri}"
    if report and counts.get("FINISHED"):
        try:
            with tempfile.TemporaryDirectory(prefix="rag-exp-report-") as tmp:
                store = RunStore(uri)
                built = build_report(store, store.get_run(parent_id))
                write_sweep_report(built, Path(tmp))
                log_report(store, built, Path(tmp))
            lines.append(
                f"sweep report: {artifact_location(store, parent_id, 'report/report.html')} "
                f"(rebuild: {where})"
            )
            lines += built.note_lines()  # the caveat of runs that used the embedded model
        except Exception as exc:  # noqa: BLE001 - the report is a view; the runs are logged
            lines.append(f"sweep report not built ({type(exc).__name__}: {exc}); try: {where}")
    else:
        lines.append(f"sweep report: {where}")
    if swept_params([dict(r.data.params) for r in children_runs]) == ["shard.index"]:
        lines.append(
            f"shards of one evaluation (each holds other questions, so the report ranks "
            f"nothing): join them into one run with rag-exp merge {parent_id} --tracking-uri {uri}"
        )
    return "\n".join(lines)


def swept_keys(overrides: list[str], sweeper_params: dict[str, Any]) -> list[str]:
    """The config keys a multirun sweeps: the command-line overrides that are sweeps
    (``chunker.size=256,512``, ``choice(…)``, ``range(…)``) and the sweeper's ``params``
    (``hydra.sweeper.params``, e.g. from ``experiment=chunk_sweep``) that are.

    Args:
        overrides: The multirun's command-line overrides (``hydra.overrides.task``).
        sweeper_params: ``{key: value expression}`` of ``hydra.sweeper.params``.

    Returns:
        The keys (without ``+``/``~``), in first-seen order.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    texts = [*overrides, *(f"{k}={v}" for k, v in _flatten(sweeper_params))]
    keys: list[str] = []
    for override in parser.parse_overrides(texts):
        if override.is_sweep_override() and override.key_or_group not in keys:
            keys.append(override.key_or_group)
    return keys


def _flatten(params: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of a params mapping whose keys may nest (``{"retriever":
    {"top_k": "range(1,11)"}}`` → ``("retriever.top_k", "range(1,11)")``)."""
    for key, value in params.items():
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def job_run_name(job_overrides: list[str], swept: list[str]) -> str | None:
    """A sweep child's run name: its values of the swept keys, ``key=value`` joined by commas
    in the order of the job's overrides (``chunker.size=256,retriever.top_k=3``).

    Args:
        job_overrides: The job's overrides (``hydra.overrides.task`` of the job: every swept
            key with this job's value, and the fixed overrides).
        swept: The swept keys (:func:`swept_keys`); empty = unknown, then every override.

    Returns:
        The name, or None when the job has no such override.
    """
    parts = []
    for text in job_overrides:
        key, sep, value = text.partition("=")
        key = key.lstrip("+~")
        if sep and (not swept or key in swept):
            parts.append(f"{key}={value}")
    return ",".join(parts) or None


def child_run_name(uri: str) -> str | None:
    """The run name of the current Hydra job in a sweep (:func:`job_run_name` with the
    parent's ``sweep.params`` tag); None outside a multirun.

    Args:
        uri: The job's tracking URI (where the parent run is).

    Raises:
        TrackingError: The parent-id file is corrupt, or the parent run cannot be read.
    """
    from hydra.core.hydra_config import HydraConfig

    parent_id = parent_run_id_for_job()
    if parent_id is None:
        return None
    hydra_cfg = HydraConfig.get()
    uri = resolve_tracking_uri(uri)
    try:
        tag = open_client(uri).get_run(parent_id).data.tags.get(SWEPT_TAG, "[]")
    except MlflowException as e:
        raise TrackingError(f"Cannot read the sweep's parent run {parent_id} at {uri}: {e}") from e
    return job_run_name(list(hydra_cfg.overrides.task), list(json.loads(tag)))


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


def _now_ms() -> int:
    return int(_dt.datetime.now(tz=_dt.timezone.utc).timestamp() * 1000)
