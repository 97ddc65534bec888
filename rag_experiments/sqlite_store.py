"""The small SQLite plumbing shared by the on-disk caches (embeddings, LLM responses).

Both caches are single-table key/value stores that several processes (parallel sweep jobs)
may open at once: WAL journal mode, a 60 s busy timeout, one short transaction per use.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from rag_experiments.errors import ConfigError

BUSY_TIMEOUT_S = 60.0


def init_store(path: Path, schema: str, what: str, fix: str) -> None:
    """Create the folder, switch the database to WAL and run ``schema`` (idempotent DDL).

    Args:
        path: Database file.
        schema: ``CREATE TABLE IF NOT EXISTS …`` statement.
        what: What the store is, for the message ("the embedding cache").
        fix: What the user should do if it cannot be opened (appended to the message).

    Raises:
        ConfigError: The file cannot be created or is not a SQLite database.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with connect(path) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(schema)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"Cannot open {what} {path}: {exc}. {fix}") from exc


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection committed on success, rolled back on error, and always closed."""
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as conn, conn:
        yield conn
