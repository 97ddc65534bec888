"""Typed configuration schemas (Hydra structured configs) and the resolvers the YAML uses.

Every entry point that composes a config (``rag-exp run``, ``serve``, ``generate``, the
compose API of ``review``, ``judge-check`` and the scorers) calls :func:`register` first; it
is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rag_experiments.config.resolvers import register_resolvers
from rag_experiments.config.schema import register_configs

__all__ = ["register", "register_configs"]


def register(config_dirs: Iterable[Path] = ()) -> None:
    """Store the schemas in Hydra's ConfigStore and register ``${unique_dir:…}`` and
    ``${rx.root:}`` (idempotent); then the derived schemas of the parts that the current
    folder's ``./conf`` overlay and ``config_dirs`` name by class alone
    (:func:`~rag_experiments.config.derive.register_derived`).

    Args:
        config_dirs: Further overlay folders (``--config-dir``) besides ``./conf``.
    """
    from rag_experiments.config.derive import register_derived
    from rag_experiments.locations import user_conf_dir

    register_configs()
    register_resolvers()
    register_derived([user_conf_dir(), *config_dirs])
