"""The settings of the Optuna sweeper (``hydra/sweeper=rag_optuna``, alias ``optuna``) and of its
samplers (``hydra/sweeper/sampler=tpe|random|grid|cmaes|nsgaii|qmc``), as Hydra structured
configs.

The keys are those of hydra-optuna-sweeper 1.3's ``OptunaSweeperConf`` (``direction``,
``study_name``, ``storage``, ``n_trials``, ``n_jobs``, ``max_failure_rate``, ``sampler``,
``params``, ``custom_search_space``) so a config written for that plugin composes unchanged,
except ``search_space`` (deprecated by Hydra 1.2 in favour of ``params``), which is gone. Two
defaults differ: ``max_failure_rate`` is 1.0 (a failed trial is recorded with its reason and the
study goes on) and ``_target_`` is our sweeper. Each sampler schema lists the plain-valued
arguments of its class in optuna 5.0 (``tests/lifecycle/test_sweeper.py`` checks every field
is one).
:func:`register_sweeper_configs` stores them in Hydra's ConfigStore; the ``hydra_plugins``
module calls it when Hydra discovers plugins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

SWEEPER_TARGET = "hydra_plugins.rag_experiments_sweeper.rag_optuna_sweeper.RagOptunaSweeper"
"""The class Hydra instantiates (Hydra loads a sweeper only from the ``hydra_plugins``
package)."""

SWEEPER_NAMES = ("rag_optuna", "optuna")
"""``hydra/sweeper=`` options of the same sweeper: ours, and the name hydra-optuna-sweeper's
users wrote."""


@dataclass
class SamplerConf:
    """An Optuna sampler (``hydra.sweeper.sampler``): ``_target_`` names its class."""

    _target_: str = MISSING
    seed: int | None = None


@dataclass
class TPESamplerConf(SamplerConf):
    """`optuna.samplers.TPESampler
    <https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.TPESampler.html>`_
    (the default). ``None`` leaves optuna's default."""

    _target_: str = "optuna.samplers.TPESampler"
    consider_prior: bool | None = None
    prior_weight: float | None = None
    consider_magic_clip: bool | None = None
    consider_endpoints: bool | None = None
    n_startup_trials: int = 10
    n_ei_candidates: int = 24
    multivariate: bool | None = None
    group: bool = False
    warn_independent_sampling: bool | None = None
    constant_liar: bool = True


@dataclass
class RandomSamplerConf(SamplerConf):
    """`optuna.samplers.RandomSampler
    <https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.RandomSampler.html>`_."""

    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class GridSamplerConf(SamplerConf):
    """`optuna.samplers.GridSampler
    <https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.GridSampler.html>`_:
    its grid is built from ``params`` at run time (every choice, every value of a range), and
    ``n_trials`` is capped at the grid's size."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True


@dataclass
class CmaEsSamplerConf(SamplerConf):
    """`optuna.samplers.CmaEsSampler
    <https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.CmaEsSampler.html>`_
    (needs the ``cmaes`` package)."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    x0: dict[str, Any] | None = None
    sigma0: float | None = None
    n_startup_trials: int = 1
    warn_independent_sampling: bool = True
    consider_pruned_trials: bool = False
    restart_strategy: str | None = None
    popsize: int | None = None
    inc_popsize: int = -1
    use_separable_cma: bool = False
    with_margin: bool = False
    lr_adapt: bool = False


@dataclass
class NSGAIISamplerConf(SamplerConf):
    """`optuna.samplers.NSGAIISampler
    <https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.NSGAIISampler.html>`_
    (multi-objective)."""

    _target_: str = "optuna.samplers.NSGAIISampler"
    population_size: int = 50
    mutation_prob: float | None = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass
class QMCSamplerConf(SamplerConf):
    """`optuna.samplers.QMCSampler
    <https://optuna.readthedocs.io/en/stable/reference/samplers/generated/optuna.samplers.QMCSampler.html>`_
    (quasi-Monte Carlo)."""

    _target_: str = "optuna.samplers.QMCSampler"
    qmc_type: str = "sobol"
    scramble: bool = False


SAMPLERS: dict[str, type[SamplerConf]] = {
    "tpe": TPESamplerConf,
    "random": RandomSamplerConf,
    "grid": GridSamplerConf,
    "cmaes": CmaEsSamplerConf,
    "nsgaii": NSGAIISamplerConf,
    "qmc": QMCSamplerConf,
}
"""``hydra/sweeper/sampler=`` option → schema."""


@dataclass
class OptunaSweeperConf:
    """``hydra.sweeper`` for ``hydra/sweeper=rag_optuna`` (or ``optuna``).

    Attributes:
        sampler: The sampler (``hydra/sweeper/sampler=tpe`` by default, see :data:`SAMPLERS`).
        direction: ``minimize`` or ``maximize``, or a list of them (one per value the job
            returns: a multi-objective study, whose Pareto front is saved).
        storage: Optuna storage URL (``sqlite:///optuna.db``) to keep the study; None = in
            memory. A study of the same ``study_name`` in the storage is continued.
        study_name: The study's name (None: Optuna makes one).
        n_trials: Trials to run (the grid sampler runs at most its grid's size).
        n_jobs: Trials asked of Optuna and launched together (one launcher batch).
        max_failure_rate: In [0, 1]: a batch whose share of failed trials is above this stops
            the study with the first failure's error; 1.0 never stops.
        params: Key → Hydra sweep (``choice(...)``, ``range(...)``, ``interval(...)``,
            ``tag(log, interval(...))``) or fixed value, see
            :mod:`rag_experiments.lifecycle.search_space`.
        custom_search_space: Dotted path of a ``fn(cfg: DictConfig, trial: optuna.Trial)``
            that suggests more parameters on each trial (after ``params``).
    """

    _target_: str = SWEEPER_TARGET
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    sampler: SamplerConf = MISSING
    direction: Any = "minimize"
    storage: Any | None = None
    study_name: str | None = None
    n_trials: int = 20
    n_jobs: int = 2
    max_failure_rate: float = 1.0
    params: dict[str, str] | None = None
    custom_search_space: str | None = None


def register_sweeper_configs() -> None:
    """Store the sweeper (as every name of :data:`SWEEPER_NAMES`) and the samplers (group
    ``hydra/sweeper/sampler``) in Hydra's ConfigStore. Idempotent."""
    store = ConfigStore.instance()
    for name in SWEEPER_NAMES:
        store.store(group="hydra/sweeper", name=name, node=OptunaSweeperConf, provider="rag")
    for name, node in SAMPLERS.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="rag")
