"""Parent/child MLflow runs for Hydra multiruns.

A sweep (``rag-exp -m …``) gets one *parent* run; each job's run is its child (tag
``mlflow.parentRunId``). The parent is created (:func:`open_sweep`) before any job starts, by
the sweep's Hydra callback (:mod:`rag_experiments.lifecycle.sweep_callback`), and its id is
written to ``<sweep dir>/mlflow_parent_run_id``. That file is the only channel to the jobs, so
it works whether they run in the same process (basic launcher) or in others (joblib, submitit;
the Ray launcher writes it on each job's node, :mod:`rag_experiments.lifecycle.launchers`): a
job calls :func:`read_parent_run_id` and passes the id to
:meth:`~rag_experiments.tracking.mlflow_tracker.MlflowTracker.start_run`. At the end
:func:`close_sweep` closes the parent with a status derived from its children.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from hydra.utils import to_absolute_path
from mlflow.entities import Metric, RunStatus, RunTag
from mlflow.exceptions import MlflowException

from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.client import ensure_experiment, open_client
from rag_experiments.tracking.resilience import check_server, is_remote
from rag_experiments.tracking.store import child_runs

log = logging.getLogger(__name__)

PARENT_RUN_ID_FILE = "mlflow_parent_run_id"
"""File in the sweep directory that holds the parent run id (one line)."""

SWEPT_TAG = "sweep.params"
"""Tag of the parent run: the swept config keys (JSON list), read by each job to name its run
(:func:`~rag_experiments.lifecycle.sweep_callback.child_run_name`)."""

_RUN_ID = re.compile(r"^[a-zA-Z0-9][\w\-]{0,255}$")  # mlflow.utils.validation._RUN_ID_REGEX
_STATUSES = ("FINISHED", "FAILED", "KILLED", "RUNNING", "SCHEDULED")


def open_sweep(
    uri: str, experiment: str, sweep_dir: Path, swept: list[str], name: str | None = None
) -> str:
    """Create a sweep's parent run and write its id to ``<sweep_dir>/mlflow_parent_run_id``.
    A tracking server is asked for ``/health`` first, so a dead one stops the sweep in
    seconds, before any job (not after MLflow's own retries, minutes).

    Args:
        uri: Resolved tracking URI.
        experiment: Experiment of the parent run (created when missing).
        sweep_dir: The sweep directory (absolute; created when missing): the parent run is
            named after it and tagged ``sweep.dir``.
        swept: The swept config keys (:func:`swept_keys`), tagged ``sweep.params``.
        name: The parent's run name (:func:`sweep_run_name`); None = the sweep directory's
            name.

    Returns:
        The parent run id.

    Raises:
        TrackingError: The tracking store cannot be reached or the parent run cannot be made.
    """
    if is_remote(uri):
        check_server(uri)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    client = open_client(uri)
    experiment_id = ensure_experiment(client, experiment, uri)
    name = name or sweep_dir.name or "sweep-" + _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    tags = {"sweep.dir": str(sweep_dir), SWEPT_TAG: json.dumps(swept)}
    try:
        run = client.create_run(experiment_id, run_name=name, tags=tags)
    except MlflowException as e:
        raise TrackingError(f"Cannot create the sweep's parent run at {uri}: {e.message}") from e
    write_parent_run_id(sweep_dir, run.info.run_id)
    log.info("MLflow parent run %s for sweep %s", run.info.run_id, sweep_dir)
    return str(run.info.run_id)


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


SWEEP_NAME_CHARS = 250
"""Longest parent run name; a longer one is cut with a hash suffix."""


def sweep_run_name(overrides: list[str], sweeper_params: dict[str, Any]) -> str | None:
    """A sweep parent's run name: ``sweep`` and its swept overrides as typed, joined by ``×``
    (``sweep chunker=semantic,fixed × chunker.size=256,512``), the sweeper's ``params`` after
    the command line's; None when nothing is swept.

    Args:
        overrides: The multirun's command-line overrides (``hydra.overrides.task``).
        sweeper_params: ``{key: value expression}`` of ``hydra.sweeper.params``.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rag_experiments.tracking.names import hash_suffixed

    parser = OverridesParser.create()
    texts = [*overrides, *(f"{k}={v}" for k, v in _flatten(sweeper_params))]
    parts: list[str] = []
    seen: set[str] = set()
    for text, override in zip(texts, parser.parse_overrides(texts), strict=True):
        if override.is_sweep_override() and override.key_or_group not in seen:
            seen.add(override.key_or_group)
            parts.append(text.lstrip("+~"))
    if not parts:
        return None
    return hash_suffixed("sweep " + " × ".join(parts), SWEEP_NAME_CHARS)


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


def parent_swept_keys(uri: str, parent_id: str) -> list[str]:
    """The swept keys a sweep's parent run is tagged with (``sweep.params``; empty when not
    tagged).

    Raises:
        TrackingError: The parent run cannot be read.
    """
    uri = resolve_tracking_uri(uri)
    try:
        tag = open_client(uri).get_run(parent_id).data.tags.get(SWEPT_TAG, "[]")
    except MlflowException as e:
        raise TrackingError(f"Cannot read the sweep's parent run {parent_id} at {uri}: {e}") from e
    return [str(k) for k in json.loads(tag)]


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


def _now_ms() -> int:
    return int(_dt.datetime.now(tz=_dt.timezone.utc).timestamp() * 1000)
