"""OmegaConf resolvers of our configs (registered before Hydra composes them).

``${unique_dir:<prefix>/%Y-%m-%d/%H-%M-%S}`` names a run's or a sweep's output folder: the
pattern filled with the current time (:meth:`datetime.datetime.strftime`), then
``.<microseconds>-<process id>``, e.g. ``outputs/2025-01-31/10-02-03.482913-12345``. Two
processes started in the same second (or microsecond) get different folders, and the names
still sort by start time within a day. A name that exists already (a second run of the same
process in the same microsecond) gets ``-2``, ``-3`` … appended.

The value is cached per config (like Hydra's ``now``), so ``hydra.sweep.dir`` means the same
folder for the whole sweep.

``${rx.run_name:<base>}`` is a preset's run name that follows the retrieval: ``<base>`` plus
:func:`retrieval_suffix` (``experiment=scifact retriever=bm25`` runs as
``scifact-minilm-bm25``; the dense default keeps ``scifact-minilm``).
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

UNIQUE_DIR = "unique_dir"
"""Name of the resolver."""

RUN_NAME = "rx.run_name"
"""Name of the resolver of a preset's run name (:func:`run_name`)."""


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


def _short(target: str, kind: str) -> str:
    """``rag_experiments.retrieval.bm25.Bm25Retriever`` → ``bm25`` (``kind`` = ``Retriever``):
    the class name, lower case, without the kind it ends with."""
    name = target.rsplit(".", 1)[-1]
    return (name.removesuffix(kind) or name).lower()


def retrieval_suffix(
    retriever: Mapping[str, Any] | None, reranker: Mapping[str, Any] | None
) -> str:
    """What a run name adds for its retrieval, so runs (and a sweep's children) that differ
    only in it get different names: ``-<retriever>`` unless it is the default dense one (the
    schema's ``RetrieverConf._target_``), then ``-rerank-<reranker>`` unless there is none.
    The default (dense, no reranker) adds nothing, so names made before stay the same.

    Args:
        retriever: The ``retriever`` node (its ``_target_``), or None.
        reranker: The ``reranker`` node, or None (``reranker=none``).

    Returns:
        ``""``, ``"-bm25"``, ``"-hybrid"``, ``"-rerank-http"``, ``"-bm25-rerank-fake"`` …
        (the class names of the ``_target_`` s, lower case, without ``Retriever`` /
        ``Reranker``).
    """
    from rag_experiments.config.schema import RetrieverConf

    parts = []
    target = str((retriever or {}).get("_target_") or "")
    if target and target != RetrieverConf._target_:
        parts.append(_short(target, "Retriever"))
    if reranker:
        parts.append("rerank-" + _short(str(reranker.get("_target_") or ""), "Reranker"))
    return "".join(f"-{p}" for p in parts)


def run_name(base: str, *, _root_: Any) -> str:
    """``${rx.run_name:<base>}``: ``base`` + :func:`retrieval_suffix` of the config's
    ``retriever`` and ``reranker`` (OmegaConf passes the config as ``_root_``)."""
    return base + retrieval_suffix(_root_.get("retriever"), _root_.get("reranker"))


def register_resolvers() -> None:
    """Register :func:`unique_dir` as ``${unique_dir:…}``, ``${rx.root:}`` (the checkout,
    or the bundle of an installed wheel: :data:`rag_experiments.locations.PROJECT_ROOT`) and
    :func:`run_name` as ``${rx.run_name:…}``; idempotent."""
    from rag_experiments.locations import PROJECT_ROOT

    if not OmegaConf.has_resolver(UNIQUE_DIR):
        OmegaConf.register_new_resolver(UNIQUE_DIR, unique_dir, use_cache=True)
    if not OmegaConf.has_resolver("rx.root"):
        OmegaConf.register_new_resolver("rx.root", lambda: str(PROJECT_ROOT))
    if not OmegaConf.has_resolver(RUN_NAME):
        OmegaConf.register_new_resolver(RUN_NAME, run_name)
