"""Where the bundled configs and data live, in a checkout and in an installed wheel.

The top-level ``conf/`` and ``datasets/`` of the repository are the source of truth. A wheel
carries copies of them under ``rag_experiments/bundled/`` (``setup.py`` copies them at build
time), so the same layout is found in both cases::

    PROJECT_ROOT/conf/config.yaml              (CONF_DIR)
    PROJECT_ROOT/datasets/sample/eval.jsonl    (SAMPLE_DIR)

``PROJECT_ROOT`` is the checkout (editable install, ``PYTHONPATH``) or that bundle folder
(wheel install). The ``${rx.root:}`` resolver of the configs returns it. Nothing is written
there: runs write their outputs, MLflow store and caches relative to the current folder.

A folder the user runs from may hold its own ``conf/`` overlay (``rag-exp init`` writes one);
:func:`with_user_conf` puts it on Hydra's config search path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

PACKAGE_DIR: Path = Path(__file__).resolve().parent
BUNDLE_DIR: Path = PACKAGE_DIR / "bundled"  # filled by setup.py when a wheel is built

PROJECT_ROOT: Path = BUNDLE_DIR if (BUNDLE_DIR / "conf").is_dir() else PACKAGE_DIR.parent
CONF_DIR: Path = PROJECT_ROOT / "conf"
SAMPLE_DIR: Path = PROJECT_ROOT / "datasets" / "sample"

USER_CONF = "conf"  # the overlay folder looked for in the current folder
_CONFIG_DIR_FLAGS = ("--config-dir", "-cd")


def user_conf_dir(cwd: Path | None = None) -> Path | None:
    """The user's config overlay ``<cwd>/conf``, or None when there is none.

    Args:
        cwd: The folder to look in (default: the current working directory).

    Returns:
        The absolute overlay folder, or None when ``<cwd>/conf`` is not a folder or is the
        bundled :data:`CONF_DIR` itself (running inside the checkout).
    """
    folder = ((cwd or Path.cwd()) / USER_CONF).resolve()
    if not folder.is_dir() or folder == CONF_DIR.resolve():
        return None
    return folder


def with_user_conf(argv: Sequence[str], cwd: Path | None = None) -> list[str]:
    """Hydra command-line ``argv`` with the current folder's ``conf/`` added to the search path.

    Hydra's ``--config-dir`` appends a folder after the bundled configs (the first match wins,
    so the overlay adds groups and options; it does not replace bundled ones). Nothing is added
    when the user passes ``--config-dir``/``-cd`` themselves or there is no overlay.

    Args:
        argv: Hydra flags and overrides as typed after ``rag-exp run``.
        cwd: The folder to look in (default: the current working directory).

    Returns:
        A new list: ``argv`` or ``["--config-dir", <overlay>, *argv]``.
    """
    args = list(argv)
    given = any(a in _CONFIG_DIR_FLAGS or a.startswith("--config-dir=") for a in args)
    folder = None if given else user_conf_dir(cwd)
    return args if folder is None else ["--config-dir", str(folder), *args]


def add_user_code_path(cwd: Path | None = None) -> Path | None:
    """Make the user's own modules importable (a metric, a target, a chat model the overlay's
    ``_target_`` names): append the folder that holds the ``conf/`` overlay to ``sys.path``,
    as ``python -m`` would put it first. Appended, so a file there never shadows an installed
    package.

    Args:
        cwd: The folder to look in (default: the current working directory).

    Returns:
        The folder added (or already on the path), or None when it has no overlay.
    """
    import sys

    if user_conf_dir(cwd) is None:
        return None
    folder = (cwd or Path.cwd()).resolve()
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    return folder
