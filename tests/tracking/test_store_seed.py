"""A new sqlite store seeded from the cached empty schema is the store MLflow makes itself."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow
import pytest

from rag_experiments.tracking.client import seed_sqlite_store
from rag_experiments.tracking.mlflow_tracker import MlflowTracker

pytestmark = pytest.mark.slow  # MLflow's own migrations on a new file take seconds


_OBJECTS = "SELECT type, name, tbl_name, sql FROM sqlite_master"


def _clauses(sql: str | None) -> tuple[str, ...] | None:
    """A CREATE statement as its sorted clauses: SQLAlchemy writes a table's constraints in the
    order of a set, which differs between processes (hash seed) and between a table created
    from the metadata and one rebuilt by a migration; the column order is checked by the rows
    (``SELECT *``)."""
    return None if sql is None else tuple(sorted(part.strip() for part in sql.split(", \n")))


def _dump(path: Path) -> tuple[list[tuple[str, ...]], dict[str, list[tuple[object, ...]]]]:
    """The file's schema objects and every table's rows (time columns left out)."""
    with sqlite3.connect(path) as con:
        schema = sorted(
            ((t, n, tbl, _clauses(sql)) for t, n, tbl, sql in con.execute(_OBJECTS)), key=str
        )
        tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {}
        for table in tables:
            cursor = con.execute(f'SELECT * FROM "{table}"')
            keep = [i for i, d in enumerate(cursor.description) if "time" not in d[0]]
            rows[table] = sorted(tuple(r[i] for i in keep) for r in cursor)
    return schema, rows


def test_a_seeded_store_equals_the_one_mlflow_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    own, seeded = tmp_path / "own" / "mlruns.db", tmp_path / "seeded" / "mlruns.db"
    own.parent.mkdir()
    seeded.parent.mkdir()
    mlflow.MlflowClient(f"sqlite:///{own}")  # MLflow creates the tables and migrates them
    assert seed_sqlite_store(f"sqlite:///{seeded}") is True
    assert seed_sqlite_store(f"sqlite:///{seeded}") is False  # an existing file is left alone
    mlflow.MlflowClient(f"sqlite:///{seeded}")  # opened as MLflow's own: default experiment
    own_schema, own_rows = _dump(own)
    seeded_schema, seeded_rows = _dump(seeded)
    assert len(own_schema) > 100  # every table, index and trigger of the latest revision
    assert seeded_schema == own_schema
    # same rows but for the artifact location of the default experiment (the folder differs)
    for rows, folder in ((own_rows, own.parent), (seeded_rows, seeded.parent)):
        rows["experiments"] = [
            tuple(str(v).replace(str(folder), "<db>") for v in r) for r in rows["experiments"]
        ]
    assert seeded_rows == own_rows
    assert len(own_rows["alembic_version"]) == 1
    assert list((tmp_path / "cache" / "rag-experiments" / "mlflow-schema").glob("*.db"))


def test_a_run_logs_to_a_seeded_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracker = MlflowTracker(uri, "seeded")
    with tracker.start_run(params={"a": 1}, config_yaml="a: 1\n", tags={}) as run_id:
        tracker.log_metrics({"nDCG@10": 0.5})
    run = mlflow.MlflowClient(uri).get_run(run_id)
    assert run.data.metrics == {"nDCG_at_10": 0.5}
    assert run.data.params["a"] == "1"
    assert run.info.status == "FINISHED"
