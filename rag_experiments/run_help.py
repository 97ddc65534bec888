"""``rag-exp run --help`` without composing a config.

Hydra answers ``--help`` by importing the task's module and the whole package, registering the
schemas and walking its config repository: about half a minute on a busy machine, for a text
that only needs ``conf/config.yaml``'s ``hydra.help`` section and the names of the YAML files
under ``conf/``. This module prints the same text from those files alone (PyYAML), so the
listing is the groups a user can pick: the internal ``schema/*`` and ``derived/*`` groups of
the structured configs (registered in Hydra's ConfigStore, not files;
:mod:`rag_experiments.config.derive`) are not shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from rag_experiments.locations import CONF_DIR

_HELP_FLAGS = frozenset({"--help", "-h"})
_CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


def config_dirs(argv: Sequence[str]) -> list[Path]:
    """The config folders Hydra would search: the bundled :data:`CONF_DIR`, then each
    ``--config-dir``/``-cd`` folder of ``argv`` (``rag-exp run`` adds the current folder's
    overlay so: :func:`~rag_experiments.locations.with_user_conf`)."""
    dirs = [CONF_DIR]
    for i, arg in enumerate(argv):
        if arg in _CONFIG_DIR_FLAGS and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.partition("=")[2]))
    return dirs


def config_groups(dirs: Sequence[Path]) -> dict[str, list[str]]:
    """The config groups of ``dirs`` and their options, as Hydra lists them for
    ``$APP_CONFIG_GROUPS``: every folder below a config folder (nested ones as ``a/b``) but
    Hydra's own ``hydra/``, with the names of its ``*.yaml`` files.

    Returns:
        Group → sorted option names; a group is listed once, with the options of every folder.
    """
    groups: dict[str, set[str]] = {}
    for root in dirs:
        for folder in sorted(p for p in root.rglob("*") if p.is_dir()):
            name = folder.relative_to(root).as_posix()
            if name.split("/")[0] == "hydra":
                continue
            options = {f.stem for f in folder.glob("*.yaml")}
            if options:
                groups.setdefault(name, set()).update(options)
    return {g: sorted(o) for g, o in sorted(groups.items())}


def run_help(argv: Sequence[str]) -> str | None:
    """The text of ``rag-exp run --help``, or None when ``argv`` asks for no help.

    Fills the template of ``hydra.help`` in ``conf/config.yaml`` (``${hydra.help.header}``,
    ``${hydra.help.footer}``, ``$APP_CONFIG_GROUPS``) as Hydra's ``--help`` does.

    Args:
        argv: The arguments of ``rag-exp run`` (after :func:`~rag_experiments.locations.
            with_user_conf`).
    """
    if not _HELP_FLAGS & set(argv):
        return None
    config = yaml.safe_load((CONF_DIR / "config.yaml").read_text(encoding="utf-8"))
    help_conf = config["hydra"]["help"]
    listing = "".join(
        f"{group}: {', '.join(options)}\n"
        for group, options in config_groups(config_dirs(argv)).items()
    )
    return (
        help_conf["template"]
        .replace("${hydra.help.header}", help_conf["header"])
        .replace("${hydra.help.footer}", help_conf["footer"])
        .replace("$APP_CONFIG_GROUPS", listing)
    )
