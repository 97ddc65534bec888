"""The Hydra side of a sweep's MLflow parent run: the callback that opens and closes it, the
report logged on it at the end, and a job's view of its sweep (parent run id, run name).

Sits above :mod:`~rag_experiments.tracking` (which makes and closes the parent run,
:mod:`~rag_experiments.tracking.sweep`) and :mod:`~rag_experiments.analysis` (which builds the
sweep report, :mod:`~rag_experiments.analysis.report`), so neither of those knows Hydra's
config or the other.

Hook it up in the config::

    hydra:
      callbacks:
        mlflow_sweep:
          _target_: rag_experiments.lifecycle.sweep_callback.MlflowSweepCallback
          uri: ${tracking.uri}
          experiment: ${tracking.experiment}
"""

from __future__ import annotations

import atexit
import logging
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from rag_experiments.common import interrupt
from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.config.reporting import aborting
from rag_experiments.tracking.sweep import (
    close_sweep,
    job_run_name,
    open_sweep,
    parent_swept_keys,
    read_parent_run_id,
    sweep_run_name,
    swept_keys,
)

log = logging.getLogger(__name__)

MAX_CHECKED_JOBS = 64
"""Jobs of a sweep composed by :func:`check_sweep_keys` before it starts (each costs a
composition, ~0.3 s); the first ones of a larger sweep only."""


def check_sweep_keys(config: DictConfig) -> None:
    """Compose each job of a ``-m`` sweep (Hydra's basic sweeper: the product of the comma
    lists) and refuse the sweep when one names a key its part does not have
    (``retriever=dense,bm25 retriever.k1=1.2``: ``k1`` is BM25's). Hydra composes a job only
    when it launches it, so the sweep's parent and its first children used to exist (and end
    FAILED) before the job that could not compose was reached. Other composition errors are
    left to the job (it reports them as before); other sweepers (Optuna) are not checked.

    Args:
        config: The sweep's config (``on_multirun_start``'s).

    Raises:
        ConfigError: A job's overrides name a key that is not in its part's schema (the
            message names the job and the closest keys).
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from rag_experiments.config.compose import compose_config
    from rag_experiments.errors import ConfigError

    sweeper = str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "")
    if not sweeper.endswith("BasicSweeper"):
        return
    task = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task", default=[]) or []]
    try:
        parsed = OverridesParser.create().parse_overrides(task)
        (jobs,) = BasicSweeper.split_arguments(parsed, None)
    except (HydraException, ValueError):
        return  # the sweeper says what is wrong with the overrides
    swept = {o.get_key_element() for o in parsed if o.is_sweep_override()}
    sources = OmegaConf.select(config, "hydra.runtime.config_sources", default=[]) or []
    extra = [str(s.path) for s in sources if s.get("provider") == "command-line"]
    searchpath = [f"hydra.searchpath=[{','.join(extra)}]"] if extra else []
    name = str(OmegaConf.select(config, "hydra.job.config_name", default="config") or "config")
    for job in jobs[:MAX_CHECKED_JOBS]:
        overrides = [*searchpath, *job]
        try:
            compose_config(name, overrides)
        except ConfigError as exc:
            text = str(exc)
            if "is not a config key" in text:
                ours = text.partition(f"{name} {' '.join(overrides)}: ")[0].strip()
                label = " ".join(o for o in job if o.partition("=")[0] in swept)
                raise ConfigError(
                    f"sweep job {label}: {ours} Nothing was launched: fix the override and "
                    "run the sweep again"
                ) from None


class MlflowSweepCallback(Callback):
    """Hydra callback that opens a parent run for a multirun and closes it at the end.

    The parent ends FINISHED when every child run FINISHED, FAILED otherwise (a child that is
    FAILED or KILLED, or still RUNNING/SCHEDULED at the end because its process died); a
    sweeper that succeeds past failed children (Optuna) closes it FINISHED first
    (:func:`~rag_experiments.tracking.sweep.close_sweep` ``tolerated``). Metrics
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

        Before that, every job of a ``-m`` sweep is composed (:func:`check_sweep_keys`), so a
        key one of its parts does not have stops the sweep before any run exists.

        Raises:
            CallbackAbort: A job's config names a key its part does not have (a
                :class:`ConfigError`), the tracking store cannot be reached or the parent run
                cannot be made (a :class:`TrackingError`, printed as one line; no job is
                launched).
        """
        with aborting():
            check_sweep_keys(config)
            self._open(config)

    def _open(self, config: DictConfig) -> None:
        sweep_dir = Path(to_absolute_path(str(config.hydra.sweep.dir)))
        overrides = list(OmegaConf.select(config, "hydra.overrides.task", default=None) or [])
        params = dict(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {})
        swept = swept_keys(overrides, params)
        name = sweep_run_name(overrides, params)
        open_sweep(self.uri, self.experiment, sweep_dir, swept, name)
        self._open_sweep = sweep_dir
        atexit.register(self._close_aborted)

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
    from rag_experiments.analysis.runs import artifact_location, open_run_store

    store = open_run_store(uri)
    parent = store.get_run(parent_id)
    experiment = parent.experiment_name
    children_runs = store.child_runs(parent.experiment_id, parent_id)
    counts = Counter(r.status for r in children_runs)
    children = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) or "none"
    lines = [
        f"sweep parent run {parent_id} {status} (children: {children}) in experiment "
        f"{experiment!r} at {uri}"
    ]
    where = f"rag-exp report {parent_id} --tracking-uri {uri}"
    if report and counts.get("FINISHED"):
        try:
            with tempfile.TemporaryDirectory(prefix="rag-exp-report-") as tmp:
                built = build_report(store, parent)
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
    if swept_params([dict(r.params) for r in children_runs]) == ["shard.index"]:
        lines.append(
            f"shards of one evaluation (each holds other questions, so the report ranks "
            f"nothing): join them into one run with rag-exp merge {parent_id} --tracking-uri {uri}"
        )
    return "\n".join(lines)


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
    return job_run_name(list(hydra_cfg.overrides.task), parent_swept_keys(uri, parent_id))


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
