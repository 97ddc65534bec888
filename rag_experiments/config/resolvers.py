"""OmegaConf resolvers of our configs (registered before Hydra composes them).

``${unique_dir:<prefix>/%Y-%m-%d/%H-%M-%S}`` names a run's or a sweep's output folder: the
pattern filled with the current time (:meth:`datetime.datetime.strftime`), then
``.<microseconds>-<process id>``, e.g. ``outputs/2025-01-31/10-02-03.482913-12345``. Two
processes started in the same second (or microsecond) get different folders, and the names
still sort by start time within a day. A name that exists already (a second run of the same
process in the same microsecond) gets ``-2``, ``-3`` … appended.

The value is cached per config (like Hydra's ``now``), so ``hydra.sweep.dir`` means the same
folder for the whole sweep.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from omegaconf import OmegaConf

UNIQUE_DIR = "unique_dir"
"""Name of the resolver."""


def unique_dir(pattern: str) -> str:
    """A new folder name from ``pattern`` (see the module docs); the folder is not created.

    Args:
        pattern: A :meth:`~datetime.datetime.strftime` pattern, e.g.
            ``multirun/%Y-%m-%d/%H-%M-%S``.

    Returns:
        ``<pattern filled>.<microseconds, 6 digits>-<pid>`` (``-<n>`` added when it exists).
    """
    now = _dt.datetime.now()
    base = f"{now.strftime(pattern)}.{now.microsecond:06d}-{os.getpid()}"
    name, n = base, 1
    while Path(name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def register_resolvers() -> None:
    """Register :func:`unique_dir` as ``${unique_dir:…}`` and ``${rx.root:}`` (the checkout,
    or the bundle of an installed wheel: :data:`rag_experiments.locations.PROJECT_ROOT`);
    idempotent."""
    from rag_experiments.locations import PROJECT_ROOT

    if not OmegaConf.has_resolver(UNIQUE_DIR):
        OmegaConf.register_new_resolver(UNIQUE_DIR, unique_dir, use_cache=True)
    if not OmegaConf.has_resolver("rx.root"):
        OmegaConf.register_new_resolver("rx.root", lambda: str(PROJECT_ROOT))
