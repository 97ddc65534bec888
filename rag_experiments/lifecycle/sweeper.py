"""hydra-optuna-sweeper with failed trials handled: ``hydra/sweeper=rag_optuna`` (the
``experiment=optuna_search`` preset uses it).

The plugin (1.2, on Optuna 2.10) cannot take a NaN objective: it asks Optuna to record a
trial COMPLETE with value NaN, Optuna refuses, and recording it FAIL then fails too; a
``None`` is reported as "Return value must be float-castable"; and when no trial completed,
the end of the study (``study.best_trial``) raises "No trials are completed yet" with a
traceback. Here:

- a job that returns a NaN objective (a :class:`~rag_experiments.lifecycle.objective.NaNObjective`
  from :func:`rag_experiments.app.run_job`) is handed to the plugin as a failed job whose
  error is the reason (which metric, why NaN, how many valid rows), so Optuna records the
  trial FAIL, the plugin logs ``Failed experiment: <reason>`` and the study goes on (within
  the plugin's ``max_failure_rate``, counted per batch of ``n_jobs`` trials);
- a study in which no trial completed ends with one line, exit code 1 and no traceback, and
  the sweep's parent MLflow run ends FAILED with that line as tag ``error`` and description;
- a study that has a best value exits 0 and its parent run ends FINISHED, also when some
  trials failed (a job that raised is a FAILED child run): tag ``sweep.failed_children`` and
  a warning say how many and why.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper as _PluginSweeper
from omegaconf import DictConfig

from rag_experiments.config.reporting import ReportedError, reported
from rag_experiments.errors import RagExpError
from rag_experiments.lifecycle.objective import NaNObjective, ObjectiveNaNError

log = logging.getLogger(__name__)

NO_COMPLETED_TRIAL = "No trials are completed yet."
"""Optuna's message (``Study.best_trial``) when no trial completed."""


class SweepFailedError(RagExpError):
    """A sweep ended without a result (no trial of the study completed)."""


class _FailedTrials:
    """Wraps the plugin's launcher: a job that returned a NaN objective becomes a failed job
    whose error is the reason; every failure's reason is counted in :attr:`reasons`."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self.reasons: Counter[str] = Counter()

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        returns = self.launcher.launch(job_overrides, initial_job_idx=initial_job_idx)
        for ret in returns:
            if ret.status == JobStatus.COMPLETED:
                value = ret.return_value
                if isinstance(value, float) and math.isnan(value):
                    reason = (
                        value.reason
                        if isinstance(value, NaNObjective)
                        else ("the objective is NaN")
                    )
                    ret.status = JobStatus.FAILED
                    ret.return_value = ObjectiveNaNError(reason)
                    self.reasons[reason] += 1
            elif ret.status == JobStatus.FAILED:
                error = ret._return_value  # the job's exception (JobReturn keeps it there)
                error = error.error if isinstance(error, ReportedError) else error
                self.reasons[f"{type(error).__name__}: {error}"] += 1
        return returns


class OptunaSweeper(_PluginSweeper):
    """The plugin's Optuna sweeper (same settings) with failed trials handled as the module
    docstring says."""

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """The plugin's setup, then its launcher wrapped (:class:`_FailedTrials`)."""
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.failed = _FailedTrials(self.sweeper.launcher)
        self.sweeper.launcher = self.failed
        self.config = config

    def sweep(self, arguments: list[str]) -> None:
        """Run the study.

        Raises:
            ReportedError: No trial completed (:class:`SweepFailedError`, also on the parent
                run), or a job's own error stopped the study (above ``max_failure_rate``).
        """
        with reported():
            try:
                super().sweep(arguments)
            except ValueError as exc:
                if str(exc) != NO_COMPLETED_TRIAL:
                    raise
            else:
                self._finish_parent()
                return
            reasons = "; ".join(
                f"{reason} (x{n})" for reason, n in self.failed.reasons.most_common(3)
            )
            message = (
                f"no trial of the Optuna study completed, so there is no best value: "
                f"{reasons or 'every trial failed'}. Fix that and sweep again"
            )
            self._fail_parent(message)
            raise SweepFailedError(message)

    def _finish_parent(self) -> None:
        """The study has a best value: end the sweep's parent run FINISHED, also when some
        trials failed (their count and reasons go to tag ``sweep.failed_children`` and a
        warning), so the parent agrees with the exit code 0."""
        n = sum(self.failed.reasons.values())
        summary = "; ".join(f"{r} (x{c})" for r, c in self.failed.reasons.most_common(3))
        note = f"{n} failed trial(s), the best value is from the others: {summary}"
        if n:
            log.warning("Optuna study done with %s", note)
        self._close_parent(tolerated=note)

    def _fail_parent(self, message: str) -> None:
        """End the sweep's parent run FAILED with ``message`` (when there is one)."""
        self._close_parent(error=message)

    def _close_parent(self, **outcome: str) -> None:
        """:func:`~rag_experiments.tracking.sweep.close_sweep` the sweep's parent run (when
        the config tracks one) with ``outcome`` (``tolerated=`` or ``error=``); a store that
        refuses is a warning, the study's result stands."""
        from rag_experiments.tracking.sweep import close_sweep

        tracking = self.config.get("tracking")
        if tracking is None:
            return
        try:
            close_sweep(str(tracking.uri), str(self.config.hydra.sweep.dir), **outcome)
        except RagExpError as exc:
            log.warning("could not close the sweep's parent run: %s", exc)
