"""Typed configuration schemas (Hydra structured configs) and the resolvers the YAML uses.

Every entry point that composes a config (``rag-exp run``, ``serve``, ``generate``, the
compose API of ``review``, ``judge-check`` and the scorers) calls :func:`register` first; it
is idempotent.
"""

from rag_experiments.config.resolvers import register_resolvers
from rag_experiments.config.schema import register_configs

__all__ = ["register", "register_configs"]


def register() -> None:
    """Store the schemas in Hydra's ConfigStore and register ``${unique_dir:…}`` and
    ``${rx.root:}`` (idempotent)."""
    register_configs()
    register_resolvers()
