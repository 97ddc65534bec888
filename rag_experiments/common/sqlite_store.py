"""The small SQLite plumbing shared by the on-disk caches (embeddings, LLM responses).

Both caches are single-table key/value stores that several processes (parallel sweep jobs)
may open at once: WAL journal mode, a 60 s busy timeout, one short transaction per use.

SQLite's busy timeout does not cover every contended case: two processes switching a fresh
file to WAL at the same moment, or a deferred transaction that must upgrade from reading to
writing while another process writes, fail at once with "database is locked" whatever the
timeout (https://www.sqlite.org/rescode.html#busy). :func:`init_store` and :func:`write`
therefore retry such failures themselves (random exponential back-off, up to
:data:`BUSY_TIMEOUT_S`), and writes start with ``BEGIN IMMEDIATE`` so they take the write
lock before they read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from rag_experiments.errors import ConfigError

BUSY_TIMEOUT_S = 60.0


def is_busy(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" / "database is busy" errors (retryable)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    message = str(exc).lower()
    return "locked" in message or "busy" in message


def _busy_retrying() -> Retrying:
    return Retrying(
        retry=retry_if_exception(is_busy),
        wait=wait_random_exponential(multiplier=0.02, max=1.0),
        stop=stop_after_delay(BUSY_TIMEOUT_S),
        reraise=True,
    )


def init_store(path: Path, schema: str, what: str, fix: str) -> None:
    """Create the folder, switch the database to WAL and run ``schema`` (idempotent DDL).

    Several processes may do this at once on a fresh file; a "database is locked" answer is
    retried for up to :data:`BUSY_TIMEOUT_S`.

    Args:
        path: Database file.
        schema: ``CREATE TABLE IF NOT EXISTS …`` statement.
        what: What the store is, for the message ("the embedding cache").
        fix: What the user should do if it cannot be opened (appended to the message).

    Raises:
        ConfigError: The file cannot be created, is not a SQLite database, or stayed locked
            for :data:`BUSY_TIMEOUT_S`.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in _busy_retrying():
            with attempt, connect(path) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(schema)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"Cannot open {what} {path}: {exc}. {fix}") from exc


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection committed on success, rolled back on error, and always closed."""
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as conn, conn:
        yield conn


def write(path: Path, sql: str, rows: Iterable[Sequence[Any]]) -> None:
    """Run one write statement for each of ``rows`` in one ``BEGIN IMMEDIATE`` transaction,
    retrying "database is locked" for up to :data:`BUSY_TIMEOUT_S` (the whole transaction is
    retried, so it must be idempotent: ``INSERT OR IGNORE`` / ``INSERT OR REPLACE``).

    Args:
        path: Database file (already initialised by :func:`init_store`).
        sql: A statement with ``?`` placeholders.
        rows: One parameter tuple per execution.

    Raises:
        sqlite3.Error: Any other database error, or still locked after the timeout.
    """
    rows = list(rows)
    for attempt in _busy_retrying():
        with attempt, closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as conn:
            conn.isolation_level = None  # explicit transaction below
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(sql, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
