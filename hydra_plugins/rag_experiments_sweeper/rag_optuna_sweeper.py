"""The ``hydra/sweeper=rag_optuna`` (alias ``optuna``) plugin class; its code is
:mod:`rag_experiments.lifecycle.sweeper` (Hydra instantiates a sweeper only from a class
defined in the ``hydra_plugins`` package).

Hydra imports this module whenever it discovers plugins (every command): it stores the
sweeper's and the samplers' configs
(:func:`~rag_experiments.lifecycle.sweeper_conf.register_sweeper_configs`) and imports Optuna
only when a sweeper is made."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from rag_experiments.lifecycle.sweeper_conf import register_sweeper_configs

register_sweeper_configs()


class RagOptunaSweeper(Sweeper):
    """:class:`rag_experiments.lifecycle.sweeper.OptunaSweeper`, registered with Hydra.

    Args:
        **settings: ``hydra.sweeper`` (:class:`~rag_experiments.lifecycle.sweeper_conf.
            OptunaSweeperConf`), passed to ``OptunaSweeper``.
    """

    def __init__(self, **settings: Any) -> None:
        from rag_experiments.lifecycle.sweeper import OptunaSweeper

        self.sweeper = OptunaSweeper(**settings)

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """:meth:`OptunaSweeper.setup <rag_experiments.lifecycle.sweeper.OptunaSweeper.setup>`."""
        self.sweeper.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> None:
        """:meth:`OptunaSweeper.sweep <rag_experiments.lifecycle.sweeper.OptunaSweeper.sweep>`."""
        self.sweeper.sweep(arguments)
