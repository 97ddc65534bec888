"""Hydra callbacks of the sweep lifecycle: like the sweeper and launcher plugins, they receive
Hydra's config by Hydra's API (``on_multirun_start(config)``) and hand plain values to the parts
(:mod:`rag_experiments.lifecycle.objective`), which never read a config."""

from __future__ import annotations

import logging
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rag_experiments.lifecycle.objective import unmoved_warnings

log = logging.getLogger(__name__)


class ObjectiveCheckCallback(Callback):
    """Hydra callback: when a sweep starts, warn about each swept key the ``objective`` cannot
    depend on (:func:`~rag_experiments.lifecycle.objective.unmoved_keys`), naming the key, the
    objective and what to do; the sweeper would otherwise search a flat objective and report
    ties.

    Hook it up in the config::

        hydra:
          callbacks:
            objective_check:
              _target_: rag_experiments.lifecycle.callbacks.ObjectiveCheckCallback
    """

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Log one warning per swept key that cannot move the objective."""
        from rag_experiments.tracking.sweep import swept_keys

        expr = OmegaConf.select(config, "objective", default=None)
        swept = swept_keys(
            list(OmegaConf.select(config, "hydra.overrides.task", default=None) or []),
            dict(OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}),
        )
        for warning in unmoved_warnings(expr, swept):
            log.warning("%s", warning)
