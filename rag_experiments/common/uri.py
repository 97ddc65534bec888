"""Tracking-store URIs made independent of the working directory (shared by the tracker and
by the loaders that read an MLflow store, e.g. ``dataset=mlflow_traces``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from sqlalchemy.engine import make_url

from rag_experiments.errors import TrackingError

__all__ = ["require_existing_store", "resolve_tracking_uri"]


def resolve_tracking_uri(uri: str, root: str | Path | None = None) -> str:
    """Make a tracking URI independent of the working directory.

    ``sqlite:///relative.db`` becomes ``sqlite:////<root>/relative.db`` (its folder is created); a
    bare path becomes an absolute path; server URIs (``http://…``) are returned unchanged.

    Args:
        uri: The tracking URI from the config.
        root: The folder relative paths are taken from (default: the working directory).

    Returns:
        The absolute URI, printable so the user can find the run again.

    Raises:
        TrackingError: If ``uri`` is empty or an in-memory sqlite database (runs would vanish).
    """
    if not uri or not uri.strip():
        raise TrackingError(
            "Tracking URI is empty: set tracking.uri, e.g. sqlite:///mlruns.db or "
            "http://127.0.0.1:5000."
        )
    if uri.startswith("sqlite:"):
        url = make_url(uri)
        if not url.database or url.database == ":memory:":
            raise TrackingError(
                f"Tracking URI {uri!r} is an in-memory sqlite database, whose runs vanish when "
                "the process ends: name a file, e.g. sqlite:///mlruns.db."
            )
        path = Path(url.database).expanduser()
        if not path.is_absolute():
            path = Path(root or Path.cwd()) / path
        path.parent.mkdir(parents=True, exist_ok=True)
        return url.set(database=str(path)).render_as_string(hide_password=False)
    if not urlparse(uri).scheme:
        return str((Path(root or Path.cwd()) / Path(uri).expanduser()).resolve())
    return uri


def require_existing_store(uri: str) -> None:
    """Refuse a sqlite store file that does not exist, before MLflow opens it: MLflow would
    create an empty ``mlruns.db`` (and its ``.lock``) and then say the run is not there, e.g.
    in a folder where ``rag-exp compare a b`` was typed by mistake. Server URIs and existing
    files pass.

    Args:
        uri: A tracking URI as the user gives it (``sqlite:///relative.db`` is relative to the
            working directory).

    Raises:
        TrackingError: No such sqlite file; the message says how to point at the runs.
    """
    if not uri.startswith("sqlite:"):
        return
    database = make_url(uri).database or ""
    path = Path(database).expanduser()
    if database and database != ":memory:" and not path.exists():
        raise TrackingError(
            f"no MLflow store here: {path.absolute()} does not exist; pass --tracking-uri "
            "(the sqlite:///… file or http://… server the runs were logged to) or run the "
            "command in the folder of the runs"
        )
