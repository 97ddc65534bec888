"""The multi-row trace writer (rag_experiments.tracking.trace_sql) writes only into a database
at the schema revision it was written and tested against; at any other revision MLflow's own
API writes the traces, and every trace is still logged."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import mlflow.store.db.utils as db_utils
import pytest
from mlflow.tracing.client import TracingClient
from sqlalchemy.engine import make_url

from rag_experiments.tracking import trace_sql
from tests.tracking.test_traces import _check_rows_written, _log, _search, _store, _summaries

OTHER_REVISION = "0123456789ab"
"""A revision no MLflow we were tested with has (a future MLflow's head)."""


def test_a_store_made_by_the_installed_mlflow_is_at_the_recorded_revision(tmp_path: Path) -> None:
    """The installed MLflow's stores are written by the SQL writer (when this fails after an
    MLflow upgrade, traces are still logged, through the API: rerun tests/tracking/test_traces.py at
    the new head and record it as ``SCHEMA_REVISION``)."""
    uri, experiment_id, _ = _store(tmp_path, "head")
    store = TracingClient(uri).store
    assert trace_sql.schema_revision(store) == trace_sql.SCHEMA_REVISION
    assert trace_sql.schema_revision(store) == db_utils._get_latest_schema_revision()
    assert trace_sql.SqlTraceWriter.open(store, experiment_id) is not None


def test_another_schema_revision_takes_mlflows_api_and_still_logs_every_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    uri, experiment_id, run_id = _store(tmp_path, "future")
    # The database as a future MLflow would leave it: another alembic head, which that MLflow
    # (here: the installed one, told its head is OTHER_REVISION) opens as its own.
    with sqlite3.connect(make_url(uri).database) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (OTHER_REVISION,))
    monkeypatch.setattr(db_utils, "_get_latest_schema_revision", lambda: OTHER_REVISION)
    store = TracingClient(uri).store
    assert trace_sql.schema_revision(store) == OTHER_REVISION
    inserted: list[int] = []
    monkeypatch.setattr(trace_sql, "_insert_sql", lambda writer, chunk: inserted.append(1))
    with caplog.at_level(logging.INFO, logger=trace_sql.__name__):
        stats = _log(uri, experiment_id, run_id)
        assert trace_sql.SqlTraceWriter.open(store, experiment_id) is None
    assert inserted == []  # the SQL writer wrote nothing
    (line,) = [r.getMessage() for r in caplog.records if "schema revision" in r.getMessage()]
    assert OTHER_REVISION in line and trace_sql.SCHEMA_REVISION in line and "API" in line
    assert (stats.traces, stats.spans, stats.assessments, stats.replaced) == (2, 5, 4, 0)
    assert len(_search(uri, experiment_id)) == 2  # read back through MLflow's API
    _check_rows_written(_summaries(uri, experiment_id))
