"""Open an MLflow tracking store safely when several processes start together: a lock per
sqlite file (:func:`store_lock`), a new sqlite file's tables copied from a cached empty schema
(:func:`seed_sqlite_store`), the client (:func:`open_client`) and the experiment
(:func:`ensure_experiment`) created once.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import mlflow
from filelock import FileLock, Timeout
from mlflow.exceptions import MlflowException
from sqlalchemy.engine import make_url

from rag_experiments.errors import TrackingError
from rag_experiments.tracking.names import sanitize_metric_name

log = logging.getLogger(__name__)


STORE_LOCK_TIMEOUT_S = 300.0
"""Longest wait for another process creating the same sqlite store or experiment."""


def racing(exc: BaseException) -> bool:
    """True for the errors of two processes creating the same row or table at once."""
    text = str(exc)
    return any(s in text for s in ("UNIQUE constraint", "IntegrityError", "already exists"))


def store_lock(uri: str) -> AbstractContextManager[Any]:
    """A lock held while a sqlite store or an experiment is created: a :class:`filelock.
    FileLock` on ``<db file>.lock`` next to the database (so processes started together create
    the tables and the experiment once); no lock for a server URI (the server serialises).

    Args:
        uri: Resolved tracking URI (see :func:`resolve_tracking_uri`).

    Returns:
        A context manager.
    """
    if not uri.startswith("sqlite:"):
        return nullcontext()
    database = make_url(uri).database or "mlruns.db"
    return FileLock(f"{database}.lock", timeout=STORE_LOCK_TIMEOUT_S)


def schema_cache_dir() -> Path:
    """Folder of the empty MLflow sqlite schemas (:func:`seed_sqlite_store`):
    ``$XDG_CACHE_HOME/rag-experiments/mlflow-schema`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rag-experiments" / "mlflow-schema"


def _schema_template() -> Path:
    """An empty sqlite database holding MLflow's tables at its latest schema revision, made
    once per MLflow version and revision, exactly as MLflow makes a new store's tables
    (``mlflow.store.db.utils._initialize_tables``: the initial tables, then every alembic
    migration) on MLflow's own engine, without the rows a store adds when it opens."""
    from mlflow.store.db import utils as db_utils

    head = db_utils._get_latest_schema_revision()
    folder = schema_cache_dir()
    path = folder / f"mlflow-{mlflow.__version__}-{head}.db"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{path}.lock", timeout=STORE_LOCK_TIMEOUT_S):
        if not path.is_file():
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
            partial.unlink(missing_ok=True)
            engine = db_utils.create_sqlalchemy_engine_with_retry(f"sqlite:///{partial}")
            try:
                db_utils._initialize_tables(engine)
            finally:
                engine.dispose()
            os.replace(partial, path)
    return path


def seed_sqlite_store(uri: str) -> bool:
    """Give a sqlite store that does not exist yet MLflow's empty tables by copying them from
    :func:`_schema_template`, instead of MLflow running its ~60 schema migrations on every new
    file (about 2 s). MLflow then finds every table at the latest revision and opens the
    store as one it made itself (``SqlAlchemyStore.__init__``: ``_all_tables_exist``,
    ``_verify_schema``); the default experiment is added by MLflow when it opens it, as for
    any new store. Call it under :func:`store_lock`.

    Args:
        uri: Resolved tracking URI.

    Returns:
        True when the file was created from the template; False for a server, an existing
        file, or when no template can be made (MLflow then creates the tables itself).
    """
    if not uri.startswith("sqlite:"):
        return False
    database = make_url(uri).database
    if not database or database == ":memory:" or Path(database).exists():
        return False
    target = Path(database)
    try:
        template = _schema_template()
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        shutil.copyfile(template, partial)
        os.replace(partial, target)
    except Exception as exc:  # noqa: BLE001 - MLflow creates the tables itself instead
        log.info(
            "no MLflow schema template (%s: %s); MLflow creates the tables", type(exc).__name__, exc
        )
        return False
    return True


def open_client(uri: str, attempts: int = 4) -> mlflow.MlflowClient:
    """The MLflow client of ``uri`` in this process, opened once and shared by every caller
    (the run's tracker, the sweep's parent run, the job's run name), whose store is created
    safely when several processes start together on a fresh sqlite file.

    A new sqlite file gets MLflow's tables from a cached empty schema
    (:func:`seed_sqlite_store`); otherwise the client's constructor creates the tables when
    they are missing. Both run under :func:`store_lock`, and a race with a process that does
    not take the lock (``UNIQUE constraint``, ``already exists``) is retried with a short
    backoff. A failed open is not remembered: the next call tries again.

    Args:
        uri: Resolved tracking URI.
        attempts: Tries before the race error is raised.

    Returns:
        The client (the same object for the same ``uri`` within one process).

    Raises:
        TrackingError: The lock was not free within :data:`STORE_LOCK_TIMEOUT_S`, or the
            store cannot be opened.
    """
    key = (os.getpid(), uri)  # a forked worker opens its own
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
    if client is None:
        client = _open_client(uri, attempts)
        with _CLIENTS_LOCK:
            client = _CLIENTS.setdefault(key, client)
    return client


_CLIENTS: dict[tuple[int, str], mlflow.MlflowClient] = {}
"""The clients :func:`open_client` opened, by (process id, URI)."""
_CLIENTS_LOCK = threading.Lock()


def _open_client(uri: str, attempts: int) -> mlflow.MlflowClient:
    """A new client for ``uri`` (see :func:`open_client`)."""
    for attempt in range(1, attempts + 1):
        try:
            with store_lock(uri):
                seed_sqlite_store(uri)
                return mlflow.MlflowClient(tracking_uri=uri)
        except Timeout as exc:
            raise TrackingError(
                f"Waited {STORE_LOCK_TIMEOUT_S:.0f} s for {exc.lock_file} (another process "
                f"creating the tracking store {uri}); delete the lock file if no such process "
                "runs"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - sqlalchemy/alembic/MLflow errors alike
            if not racing(exc) or attempt == attempts:
                raise TrackingError(f"Cannot open the MLflow store {uri}: {exc}") from exc
            log.info("tracking store created by a parallel process; retrying (%d)", attempt)
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def ensure_experiment(client: mlflow.MlflowClient, name: str, uri: str) -> str:
    """Return the id of experiment ``name``, creating it when missing.

    For a sqlite store the experiment's artifacts go to ``<db folder>/mlartifacts/<name>``
    (MLflow's default, ``./mlruns``, would depend on the working directory); a server picks its
    own artifact root.

    Args:
        client: Client bound to ``uri``.
        name: Experiment name.
        uri: Resolved tracking URI (see :func:`resolve_tracking_uri`).

    Returns:
        The experiment id.

    Raises:
        TrackingError: If the store cannot be reached or the experiment is deleted.
    """
    try:
        with store_lock(uri):  # processes started together create the experiment once
            exp = client.get_experiment_by_name(name)
            if exp is None:
                location = None
                if uri.startswith("sqlite:"):
                    folder = Path(make_url(uri).database or ".").parent / "mlartifacts"
                    location = (folder / sanitize_metric_name(name).replace("/", "_")).as_uri()
                try:
                    return client.create_experiment(name, artifact_location=location)
                except MlflowException:
                    exp = client.get_experiment_by_name(name)  # made meanwhile by a server job
                    if exp is None:
                        raise
    except Timeout as e:
        raise TrackingError(
            f"Waited {STORE_LOCK_TIMEOUT_S:.0f} s for {e.lock_file} to create experiment "
            f"{name!r}; delete the lock file if no other process runs"
        ) from e
    except MlflowException as e:
        raise TrackingError(
            f"Cannot open MLflow experiment {name!r} at {uri}: {e.message}. Check tracking.uri "
            "(is the server running? is the sqlite file writable?)."
        ) from e
    if exp.lifecycle_stage == "deleted":
        raise TrackingError(
            f"MLflow experiment {name!r} at {uri} is deleted: restore it "
            f"(mlflow experiments restore --experiment-id {exp.experiment_id}) or choose "
            "another tracking.experiment."
        )
    return exp.experiment_id
