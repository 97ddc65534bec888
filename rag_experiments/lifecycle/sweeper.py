"""The Optuna sweeper: ``hydra/sweeper=rag_optuna`` (alias ``optuna``; the
``experiment=optuna_search`` preset uses it), on Optuna's ask-and-tell API and Hydra's sweeper
interface (:class:`hydra.plugins.sweeper.Sweeper`).

A study is created (or continued, ``storage`` + ``study_name``) with the configured sampler; each
batch of ``n_jobs`` trials is asked of Optuna (``Study.ask``), each trial suggests the swept keys
(:mod:`rag_experiments.lifecycle.search_space`) and becomes one job's overrides, the launcher
runs the batch, and each job's return value is told to Optuna (``Study.tell``). At the end the
best trial (or the Pareto front) is written to ``<sweep dir>/optimization_results.yaml``. The
settings are :class:`~rag_experiments.lifecycle.sweeper_conf.OptunaSweeperConf`.

Failed trials:

- a job that returns a NaN objective (a :class:`~rag_experiments.lifecycle.objective.NaNObjective`
  from :func:`rag_experiments.job.run_job`) is told FAIL, with the reason (which metric, why
  NaN, how many valid rows) logged as ``Failed experiment: <reason>`` and kept as the trial's
  user attribute ``error``; so is a job that raised or returned no number. The study goes on
  within ``max_failure_rate`` (per batch of ``n_jobs`` trials);
- a study in which no trial completed ends with one line, exit code 1 and no traceback, and
  the sweep's parent MLflow run ends FAILED with that line as tag ``error`` and description;
- a study that has a best value exits 0 and its parent run ends FINISHED, also when some
  trials failed (a job that raised is a FAILED child run): tag ``sweep.failed_children`` and
  a warning say how many and why.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import Trial, TrialState

from rag_experiments.config.reporting import ReportedError, reported
from rag_experiments.errors import ConfigError, RagExpError
from rag_experiments.lifecycle.objective import NaNObjective, ObjectiveNaNError
from rag_experiments.lifecycle.search_space import grid_values, search_space

log = logging.getLogger(__name__)


class SweepFailedError(RagExpError):
    """A sweep ended without a result (no trial of the study completed)."""


def trial_values(value: Any, n_directions: int) -> list[float]:
    """A job's return value as the values Optuna is told.

    Args:
        value: What the job returned: a float (one direction) or a sequence of
            ``n_directions`` floats.
        n_directions: The study's number of objectives.

    Returns:
        The values, finite or infinite floats.

    Raises:
        ObjectiveNaNError: A value is NaN (the :class:`NaNObjective`'s reason when it has
            one), or the return value is not a number (e.g. None: no ``objective`` set).
    """
    raw = [value] if n_directions == 1 else value
    try:
        values = [float(v) for v in raw]
    except (TypeError, ValueError):
        raise ObjectiveNaNError(
            f"the job returned {value!r}, not {n_directions} number(s); set objective=<metric>"
        ) from None
    if len(values) != n_directions:
        raise ObjectiveNaNError(
            f"the job returned {len(values)} values for {n_directions} directions"
        )
    for v in raw:
        if math.isnan(float(v)):
            raise ObjectiveNaNError(v.reason if isinstance(v, NaNObjective) else "objective is NaN")
    return values


def suggest(trial: Trial, name: str, distribution: BaseDistribution) -> Any:
    """Ask ``trial`` for a value of ``name`` from ``distribution`` through Optuna's public
    ``suggest_*`` methods.

    Args:
        trial: A trial from ``Study.ask``.
        name: The parameter (a config key).
        distribution: From :func:`~rag_experiments.lifecycle.search_space.search_space`.

    Returns:
        The suggested value (one of the choices, or in ``[low, high]`` on the step).

    Raises:
        TypeError: A distribution that is not categorical, int or float.
    """
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(
            name, distribution.low, distribution.high, step=distribution.step, log=distribution.log
        )
    raise TypeError(f"{name}: no suggest_* method for {distribution!r}")


def _job_error(ret: JobReturn) -> BaseException:
    """The exception a FAILED job raised (Hydra keeps it as the return value), unwrapped from
    :class:`ReportedError`."""
    error = ret._return_value
    return error.error if isinstance(error, ReportedError) else error


class OptunaSweeper(Sweeper):
    """Hydra sweeper that runs an Optuna study (see the module docstring).

    Args:
        sampler: An Optuna sampler, or a ``functools.partial`` of ``GridSampler`` (its grid
            comes from ``params``).
        direction: ``"minimize"``/``"maximize"`` or a list of them.
        storage: Optuna storage URL or None (in memory).
        study_name: Study name or None.
        n_trials: Trials to run (>= 1).
        n_jobs: Trials per launcher batch (>= 1).
        max_failure_rate: In [0, 1], see :class:`~rag_experiments.lifecycle.sweeper_conf.
            OptunaSweeperConf`.
        params: Key → sweep or fixed value.
        custom_search_space: Dotted path of ``fn(cfg, trial)`` or None.

    Raises:
        ConfigError: ``max_failure_rate`` outside [0, 1], ``n_trials`` or ``n_jobs`` < 1.
    """

    def __init__(
        self,
        sampler: Any,
        direction: Any,
        storage: Any | None,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: DictConfig | None,
        custom_search_space: str | None,
    ) -> None:
        if not 0.0 <= max_failure_rate <= 1.0:
            raise ConfigError(
                f"hydra.sweeper.max_failure_rate={max_failure_rate} must be in [0, 1]"
            )
        if n_trials < 1 or n_jobs < 1:
            raise ConfigError(f"hydra.sweeper.n_trials={n_trials} and n_jobs={n_jobs} must be >= 1")
        self.sampler = sampler
        self.directions = (
            [str(direction)] if isinstance(direction, str) else [str(d) for d in direction]
        )
        self.storage = storage
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = dict(params or {})
        self.extend_search_space: Callable[[DictConfig, Trial], None] | None = (
            instantiate({"_target_": custom_search_space, "_partial_": True})
            if custom_search_space
            else None
        )
        self.reasons: Counter[str] = Counter()
        self.grid_done = False
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Launcher | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Keep the context and config; instantiate the configured launcher."""
        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        """Run the study.

        Args:
            arguments: The command line's overrides (sweeps and fixed values), applied after
                ``params``.

        Raises:
            ReportedError: No trial completed (:class:`SweepFailedError`, also on the parent
                run), the search space is refused (:class:`ConfigError`), or a batch's failures
                went above ``max_failure_rate`` (the first failed job's error).
        """
        with reported():
            study = self._run([f"{k}={v}" for k, v in self.params.items()] + list(arguments))
            completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if completed:
                self._save_results(study)
                self._finish_parent()
                return
            reasons = "; ".join(f"{reason} (x{n})" for reason, n in self.reasons.most_common(3))
            message = (
                f"no trial of the Optuna study completed, so there is no best value: "
                f"{reasons or 'every trial failed'}. Fix that and sweep again"
            )
            self._close_parent(error=message)
            raise SweepFailedError(message)

    def _run(self, overrides: list[str]) -> optuna.Study:
        """Ask, launch and tell ``n_trials`` trials in batches of ``n_jobs``."""
        assert self.launcher is not None
        distributions, fixed = search_space(overrides)
        n_trials = self.n_trials
        sampler = self.sampler
        if isinstance(sampler, functools.partial):  # GridSampler: the grid comes from params
            grid = {name: grid_values(name, d) for name, d in distributions.items()}
            sampler = sampler(grid)
            n_trials = min(n_trials, math.prod(len(v) for v in grid.values()))
            log.info("Grid sampler: %d trial(s) at most", n_trials)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            sampler=sampler,
            directions=self.directions,
            load_if_exists=True,
        )
        log.info("Study name: %s", study.study_name)
        log.info("Storage: %s", self.storage)
        log.info("Sampler: %s", type(sampler).__name__)
        log.info("Directions: %s", self.directions)
        job_idx = 0
        while job_idx < n_trials:
            trials = [study.ask() for _ in range(min(self.n_jobs, n_trials - job_idx))]
            batch = [self._suggest(trial, distributions, fixed) for trial in trials]
            if self.hydra_context is not None:  # a misspelled key fails here, before any job
                self.validate_batch_is_legal(batch)
            returns = self.launcher.launch(batch, initial_job_idx=job_idx)
            job_idx += len(returns)
            told = [self._tell(study, t, r) for t, r in zip(trials, returns, strict=True)]
            failures = [error for error in told if error is not None]
            if failures and len(failures) / len(returns) > self.max_failure_rate:
                log.error(
                    "Failed %d time(s) out of %d with max_failure_rate=%s",
                    len(failures),
                    len(returns),
                    self.max_failure_rate,
                )
                raise failures[0]
            if self.grid_done:  # the grid sampler visited every point
                break
        return study

    def _suggest(
        self,
        trial: Trial,
        distributions: dict[str, BaseDistribution],
        fixed: dict[str, str],
    ) -> tuple[str, ...]:
        """One trial's overrides: a value suggested for each swept key, then the fixed ones
        (also kept as user attributes of the trial)."""
        for name, distribution in distributions.items():
            suggest(trial, name, distribution)
        for name, value in fixed.items():
            trial.set_user_attr(name, value)
        if self.extend_search_space is not None:
            assert self.config is not None
            self.extend_search_space(self.config, trial)
        overlap = trial.params.keys() & fixed.keys()
        if overlap:
            raise ConfigError(
                f"{sorted(overlap)} are both fixed and searched (custom_search_space); "
                "drop one of the two"
            )
        return tuple(f"{name}={value}" for name, value in {**trial.params, **fixed}.items())

    def _tell(self, study: optuna.Study, trial: Trial, ret: JobReturn) -> BaseException | None:
        """Tell Optuna how ``trial`` ended: COMPLETE with its values, or FAIL (the reason is
        logged, counted in :attr:`reasons` and set as user attribute ``error``).

        Returns:
            The failure (the job's exception or an :class:`ObjectiveNaNError`), or None.
        """
        error: BaseException | None = None
        values: list[float] | None = None
        if ret.status == JobStatus.COMPLETED:
            try:
                values = trial_values(ret.return_value, len(self.directions))
            except ObjectiveNaNError as exc:
                error = exc
                reason = str(exc)
        else:
            error = _job_error(ret)
            reason = f"{type(error).__name__}: {error}"
        if error is not None:
            self.reasons[reason] += 1
            trial.set_user_attr("error", reason)
            log.warning("Failed experiment: %s", reason)
        state = TrialState.COMPLETE if error is None else TrialState.FAIL
        try:
            study.tell(trial, values, state=state)
        except RuntimeError:
            # GridSampler.after_trial calls Study.stop, which refuses outside Study.optimize
            # ("only works when it is called inside an objective function or callback"); the
            # trial is stored all the same (Study.tell stores it in a `finally`).
            if not study.trials[trial.number].state.is_finished():
                raise
            self.grid_done = True
        return error

    def _save_results(self, study: optuna.Study) -> None:
        """Write the best trial (one direction) or the Pareto front to
        ``<sweep dir>/optimization_results.yaml`` and log it."""
        assert self.config is not None
        if len(self.directions) == 1:
            best = study.best_trial
            results: dict[str, Any] = {
                "name": "optuna",
                "best_params": best.params,
                "best_value": best.value,
            }
            log.info("Best parameters: %s", best.params)
            log.info("Best value: %s", best.value)
        else:
            front = [{"params": t.params, "values": t.values} for t in study.best_trials]
            results = {"name": "optuna", "solutions": front}
            log.info("Number of Pareto solutions: %d", len(front))
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")

    def _finish_parent(self) -> None:
        """The study has a best value: end the sweep's parent run FINISHED, also when some
        trials failed (their count and reasons go to tag ``sweep.failed_children`` and a
        warning), so the parent agrees with the exit code 0."""
        n = sum(self.reasons.values())
        summary = "; ".join(f"{r} (x{c})" for r, c in self.reasons.most_common(3))
        note = f"{n} failed trial(s), the best value is from the others: {summary}"
        if n:
            log.warning("Optuna study done with %s", note)
        self._close_parent(tolerated=note)

    def _close_parent(self, **outcome: str) -> None:
        """:func:`~rag_experiments.tracking.sweep.close_sweep` the sweep's parent run (when
        the config tracks one) with ``outcome`` (``tolerated=`` or ``error=``); a store that
        refuses is a warning, the study's result stands."""
        from rag_experiments.tracking.sweep import close_sweep

        assert self.config is not None
        tracking = self.config.get("tracking")
        if tracking is None:
            return
        try:
            close_sweep(str(tracking.uri), str(self.config.hydra.sweep.dir), **outcome)
        except RagExpError as exc:
            log.warning("could not close the sweep's parent run: %s", exc)
