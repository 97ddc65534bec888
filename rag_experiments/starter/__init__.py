"""``rag-exp init``: write a starter ``conf/`` overlay (an experiment, an HTTP target) here.

The overlay's files are the templates next to this module (``starter/conf/``); ``rag-exp run``
finds them on Hydra's search path when run from that folder (:mod:`rag_experiments.locations`).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from rag_experiments.errors import ConfigError
from rag_experiments.locations import CONF_DIR, USER_CONF

TEMPLATES: Path = Path(__file__).resolve().parent / "conf"


def overlay_files() -> list[Path]:
    """The template files, relative to :data:`TEMPLATES` (sorted)."""
    return sorted(p.relative_to(TEMPLATES) for p in TEMPLATES.rglob("*") if p.is_file())


def write_overlay(folder: Path, force: bool = False) -> list[Path]:
    """Copy the starter overlay into ``<folder>/conf``.

    Nothing is written when a file would be overwritten and ``force`` is False.

    Args:
        folder: The folder to write ``conf/`` into (created if missing).
        force: Overwrite existing files of the same names (other files are left alone).

    Returns:
        The written files (absolute paths), in :func:`overlay_files` order.

    Raises:
        ConfigError: ``<folder>/conf`` is the package's own config folder (:data:`~rag_experiments.
            locations.CONF_DIR`: ``rag-exp init`` run in the checkout's root), whatever
            ``force``; or a file exists and ``force`` is False (its path is in the message).
    """
    dest = folder.resolve() / USER_CONF
    if dest.resolve() == CONF_DIR.resolve():
        raise ConfigError(
            f"{dest} is rag-experiments' own config folder (the bundled options), not an "
            "overlay: nothing was written. Run rag-exp init in a folder of your own, e.g. "
            "`mkdir ../my-evals && cd ../my-evals && rag-exp init`, or pass --dir DIR."
        )
    targets = [(TEMPLATES / rel, dest / rel) for rel in overlay_files()]
    existing = [str(d) for _, d in targets if d.exists()]
    if existing and not force:
        raise ConfigError(
            f"{', '.join(existing)} already exist(s); nothing was written. "
            "Pass --force to overwrite them, or run rag-exp init in another folder."
        )
    for source, target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return [d for _, d in targets]


def init_command(argv: list[str]) -> int:
    """``rag-exp init [--dir DIR] [--force]``; returns the exit code (0)."""
    parser = argparse.ArgumentParser(
        prog="rag-exp init",
        allow_abbrev=False,
        description="Write a starter conf/ overlay into a folder: conf/experiment/starter.yaml "
        "(retrieval metrics on 8 questions of the bundled sample) and conf/target/my_rag.yaml "
        "(your RAG service over HTTP). rag-exp run adds ./conf to the config search path, so "
        "`rag-exp run experiment=starter` then works from that folder.",
    )
    parser.add_argument("--dir", type=Path, default=Path("."), help="folder (default: here)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    opts = parser.parse_args(argv)
    for path in write_overlay(opts.dir, force=opts.force):
        print(f"wrote {path}")
    print("next: rag-exp run experiment=starter   (edit conf/experiment/starter.yaml first)")
    return 0
