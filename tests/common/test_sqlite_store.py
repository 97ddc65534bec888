"""The caches' SQLite plumbing under contention: many writers opening a fresh file at once."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from rag_experiments.common.sqlite_store import connect, init_store, is_busy, write

SCHEMA = "CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)"
WRITERS = 12
ROWS_EACH = 40


def test_concurrent_inits_and_writes_on_a_fresh_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "store.sqlite"
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            start.wait()
            init_store(path, SCHEMA, "the test store", "")
            for i in range(0, ROWS_EACH, 10):  # several transactions per writer
                rows = [(f"{w}-{j}", w * 1000 + j) for j in range(i, i + 10)]
                write(path, "INSERT OR IGNORE INTO kv VALUES (?, ?)", rows)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        got = dict(conn.execute("SELECT k, v FROM kv").fetchall())
    assert got == {f"{w}-{j}": w * 1000 + j for w in range(WRITERS) for j in range(ROWS_EACH)}


def test_write_waits_for_a_writer_holding_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    init_store(path, SCHEMA, "the test store", "")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO kv VALUES ('held', 1)")
    timer = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    timer.start()
    write(path, "INSERT OR REPLACE INTO kv VALUES (?, ?)", [("after", 2)])
    timer.join()
    holder.close()
    with connect(path) as conn:
        assert dict(conn.execute("SELECT k, v FROM kv").fetchall()) == {"held": 1, "after": 2}


def test_a_failed_write_rolls_back_the_whole_batch(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    init_store(path, SCHEMA, "the test store", "")
    try:
        write(path, "INSERT INTO kv VALUES (?, ?)", [("a", 1), ("a", 2)])  # duplicate key
    except sqlite3.IntegrityError:
        pass
    else:
        raise AssertionError("a duplicate primary key must raise")
    with connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM kv").fetchone()[0] == 0


def test_only_lock_errors_are_retryable() -> None:
    assert is_busy(sqlite3.OperationalError("database is locked"))
    assert is_busy(sqlite3.OperationalError("database is busy"))
    assert not is_busy(sqlite3.OperationalError("no such table: kv"))
    assert not is_busy(sqlite3.IntegrityError("UNIQUE constraint failed: kv.k"))
