"""The metric batch endpoint of our server app writes the rows MLflow's ``log_batch`` writes
(``metrics`` and ``latest_metrics``), and a retried request writes nothing twice."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import mlflow.server.handlers as handlers
import pytest
import sqlalchemy
from flask import Flask
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

from rag_experiments.tracking.metric_batch import METRICS_PATH, write_metrics
from rag_experiments.tracking.server_app import create_app

pytestmark = pytest.mark.slow  # two sqlite stores with MLflow's migrations: seconds each

METRICS = [
    Metric("faithfulness/mean", 0.75, 1_000, 0),
    Metric("faithfulness/mean", 0.5, 1_000, 2),  # a later step: the latest value
    Metric("faithfulness/mean", 0.9, 999, 1),
    Metric("Hit_at_5/mean", 1.0, 1_000, 0),
    Metric("Hit_at_5/mean", 1.0, 1_000, 0),  # an exact repeat: stored once, as log_batch does
    Metric("n_questions", 345.0, 1_000, 0),
]


def _store(tmp_path: Path, name: str) -> tuple[SqlAlchemyStore, str]:
    store = SqlAlchemyStore(f"sqlite:///{tmp_path / name}.db", str(tmp_path / name))
    experiment_id = store.create_experiment("e")
    return store, store.create_run(experiment_id, "u", 0, [], "r").info.run_id


def _rows(store: SqlAlchemyStore) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of both metric tables, without the run id (the stores' run ids differ)."""
    out = {}
    with store.engine.connect() as connection:
        for table in ("metrics", "latest_metrics"):
            query = f"SELECT key, value, timestamp, step, is_nan FROM {table} ORDER BY 1, 2, 3, 4"  # noqa: S608
            out[table] = [tuple(r) for r in connection.execute(sqlalchemy.text(query))]
    return out


def _payload(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "metrics": [[m.key, m.value, m.timestamp, m.step] for m in METRICS]}


def test_the_rows_equal_log_batch_and_a_retry_doubles_nothing(tmp_path: Path) -> None:
    mlflow_store, mlflow_run = _store(tmp_path, "mlflow")
    mlflow_store.log_batch(mlflow_run, METRICS, [], [])
    ours, run_id = _store(tmp_path, "ours")
    assert write_metrics(ours, _payload(run_id)) == {"metrics": 6, "fast": True}
    expected = _rows(mlflow_store)
    assert len(expected["metrics"]) == 5  # the repeat once
    assert expected["latest_metrics"][1] == ("faithfulness/mean", 0.5, 1_000, 2, False)
    assert _rows(ours) == expected
    assert write_metrics(ours, _payload(run_id)) == {"metrics": 6, "fast": False}  # retried
    assert _rows(ours) == expected


def test_the_endpoint_answers_mlflow_errors_with_their_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id = _store(tmp_path, "server")
    monkeypatch.setattr(handlers, "_tracking_store", store)
    client = create_app(Flask("test-app")).test_client()
    headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}

    def post(payload: dict[str, Any]) -> Any:
        return client.post(
            METRICS_PATH, data=gzip.compress(json.dumps(payload).encode()), headers=headers
        )

    answer = post(_payload(run_id))
    assert answer.status_code == 200 and answer.get_json() == {"metrics": 6, "fast": True}
    store.delete_run(run_id)
    refused = post(_payload(run_id))  # a deleted run takes no metrics, as in log_batch
    with pytest.raises(MlflowException) as mlflow_error:
        store.log_batch(run_id, METRICS, [], [])
    assert refused.status_code == mlflow_error.value.get_http_status_code() == 400
    assert refused.get_json()["error_code"] == mlflow_error.value.error_code
    assert post({"run_id": run_id}).status_code == 400  # no metrics: malformed


def test_a_retried_request_over_log_batchs_limit_is_written_in_chunks(tmp_path: Path) -> None:
    """A retry of a request of 2,300 metrics (a run's aggregates) falls back to ``log_batch``,
    which takes at most 1,000 per call: the fallback sends chunks and stores nothing twice."""
    store, run_id = _store(tmp_path, "big")
    payload = {"run_id": run_id, "metrics": [[f"m{i}", i / 2300, 1_000, 0] for i in range(2300)]}
    assert write_metrics(store, payload) == {"metrics": 2300, "fast": True}
    first = _rows(store)
    assert len(first["metrics"]) == len(first["latest_metrics"]) == 2300
    assert write_metrics(store, payload) == {"metrics": 2300, "fast": False}  # retried
    assert _rows(store) == first
