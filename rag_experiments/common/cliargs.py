"""Arguments shared by the ``rag-exp`` subcommands that read an MLflow store (``compare``,
``report``, ``merge``, ``rerun``, ``export``, ``agreement``): one spelling of
``--tracking-uri`` and its default (MLflow's download bars are off for every command:
:data:`rag_experiments.offline.QUIET_ENV`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rag_experiments.common.uri import require_existing_store
from rag_experiments.errors import ConfigError

DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"
"""Where ``tracking=local`` logs runs (relative to the folder a command runs in)."""


def add_tracking_uri(parser: argparse.ArgumentParser, what: str = "the runs") -> None:
    """Add ``--tracking-uri`` (default :data:`DEFAULT_TRACKING_URI`) to ``parser``.

    Args:
        parser: The subcommand's parser.
        what: What the store holds, for the help text ("the sweep", "the run").
    """
    parser.add_argument(
        "--tracking-uri",
        default=DEFAULT_TRACKING_URI,
        help=f"MLflow store holding {what} (default {DEFAULT_TRACKING_URI}, as tracking=local)",
    )


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """Add the positional ``key=value`` changes to a logged config (e.g. a secret that was
    redacted when the run was logged)."""
    parser.add_argument(
        "overrides",
        nargs="*",
        help="key=value changes to the logged config, e.g. a redacted secret",
    )


def parse_store_command(
    parser: argparse.ArgumentParser, argv: Sequence[str], *, existing_store: bool = True
) -> argparse.Namespace:
    """Parse ``argv``, refuse a ``--tracking-uri`` sqlite file that does not exist (MLflow
    would create an empty store there) and turn off MLflow's artifact-download progress bars
    (the commands print their own results).

    Args:
        parser: The subcommand's parser.
        argv: Its arguments.
        existing_store: Refuse a missing sqlite ``--tracking-uri`` here (``False``: the
            command calls :func:`~rag_experiments.common.uri.require_existing_store` itself,
            e.g. ``rag-exp gate``, whose input errors exit 2).

    Raises:
        SystemExit: ``--help`` or a usage error (argparse).
        ConfigError: An override (:func:`add_overrides`) that is not ``key=value``.
        TrackingError: ``--tracking-uri`` names a sqlite file that does not exist
            (:func:`~rag_experiments.common.uri.require_existing_store`).
    """
    opts = parser.parse_args(list(argv))
    bad = [o for o in vars(opts).get("overrides") or [] if "=" not in o]
    if bad:
        raise ConfigError(f"overrides must be key=value, got {bad}")
    if existing_store and isinstance(vars(opts).get("tracking_uri"), str):
        require_existing_store(opts.tracking_uri)
    return opts
