"""Paths of a composed config made absolute against the folder the command was started in.

Hydra may run a job in another folder (``hydra.job.chdir=true`` moves each job into its job
folder). Relative paths of the config would then point into that folder: every job of a sweep
would write its own ``mlruns.db`` and ``.cache/`` there, and ``dataset.path=my_eval.jsonl``
would no longer be found. :func:`root_paths` rewrites them once, before the job does anything,
against the folder the user typed the command in (Hydra's ``hydra.runtime.cwd``), so a job
means the same files wherever it runs, and its params record absolute paths.

Which values are paths is declared here, by key name (in any config node):
:data:`PATH_KEYS` (files and folders) and :data:`URI_KEYS` (MLflow tracking URIs: a relative
``sqlite:///`` file or a bare path is rooted, a server URL is left alone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from rag_experiments.common.uri import resolve_tracking_uri

PATH_KEYS: frozenset[str] = frozenset(
    {
        "path",  # dataset.path
        "corpus",  # dataset.corpus
        "cache_dir",  # paths.cache_dir, embedder.cache_dir
        "chroma_dir",
        "embedding_cache",
        "llm_cache",
        "model_path",  # llm.model_path, judge.model_path (a GGUF file)
        "ca_bundle",  # target.ca_bundle
    }
)
"""Keys whose string values are files or folders."""

URI_KEYS: frozenset[str] = frozenset({"uri", "tracking_uri"})
"""Keys whose string values are MLflow tracking URIs (``tracking.uri``,
``dataset.tracking_uri``)."""


def rooted(value: str, root: Path) -> str:
    """``value`` as an absolute path: unchanged when absolute or a URL (``scheme://``), else
    ``root / value`` (``~`` expanded).

    Args:
        value: A path from the config.
        root: The folder relative paths are taken from.

    Returns:
        The absolute path (not resolved through symlinks, not required to exist).
    """
    if "://" in value:
        return value
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else root / path)


def root_paths(cfg: DictConfig, root: str | Path) -> list[str]:
    """Rewrite, in place, every relative path and tracking URI of ``cfg`` against ``root``.

    Walks every node; a value is rewritten when its key is in :data:`PATH_KEYS` or
    :data:`URI_KEYS` and it is a non-empty string (interpolations are resolved first, so
    ``${paths.cache_dir}/chroma`` becomes ``<root>/.cache/chroma``). ``resume`` is rooted too
    when it names an existing folder under ``root`` (a job folder, not a run id).

    Args:
        cfg: The composed job config (without its ``hydra`` node).
        root: The folder the command was started in (absolute).

    Returns:
        The dotted keys that changed, e.g. ``["paths.cache_dir", "tracking.uri"]``.

    Raises:
        TrackingError: A tracking URI is empty or an in-memory sqlite database.
    """
    root = Path(root)
    changed: list[str] = []

    def visit(node: Any, prefix: str) -> None:
        keys = range(len(node)) if isinstance(node, ListConfig) else list(node.keys())
        for key in keys:
            dotted = f"{prefix}{key}"
            if OmegaConf.is_missing(node, key):
                continue
            child = node[key]
            if isinstance(child, (DictConfig, ListConfig)):
                visit(child, f"{dotted}.")
                continue
            if not isinstance(key, str) or not isinstance(child, str) or not child:
                continue
            if key in PATH_KEYS:
                new = rooted(child, root)
            elif key in URI_KEYS:
                new = resolve_tracking_uri(child, root)
            else:
                continue
            if new != child or OmegaConf.is_interpolation(node, key):
                with open_dict(node):
                    node[key] = new
                if new != child:
                    changed.append(dotted)

    visit(cfg, "")
    resume = cfg.get("resume")
    if resume and not Path(str(resume)).is_absolute() and (root / str(resume)).is_dir():
        cfg.resume = str(root / str(resume))
        changed.append("resume")
    return changed
