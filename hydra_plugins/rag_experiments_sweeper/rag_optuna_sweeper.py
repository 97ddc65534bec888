"""The ``hydra/sweeper=rag_optuna`` plugin class; its code is
:mod:`rag_experiments.lifecycle.sweeper` (Hydra instantiates a sweeper only from a class
defined in the ``hydra_plugins`` package)."""

from __future__ import annotations

from rag_experiments.lifecycle.sweeper import OptunaSweeper


class RagOptunaSweeper(OptunaSweeper):
    """:class:`rag_experiments.lifecycle.sweeper.OptunaSweeper`, registered with Hydra."""
