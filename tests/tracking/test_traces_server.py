"""Traces logged to a real MLflow tracking server (``http://``, the batched API path of
rag_experiments.tracking.trace_log) equal the ones the sqlite fast path stores, and writing them
again (a resume, a retry) replaces instead of adding."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_experiments.tracking.client import ensure_experiment, open_client
from rag_experiments.tracking.trace_shape import trace_id_for
from tests.mlflow_server import mlflow_server  # noqa: F401  (fixture)
from tests.tracking.test_traces import _check_rows_written, _log, _store, _summaries

pytestmark = pytest.mark.slow


def test_a_server_stores_the_same_traces_spans_and_assessments_as_sqlite(
    mlflow_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    uri, experiment_id, run_id = _store(tmp_path, "local")
    _log(uri, experiment_id, run_id)
    local = _summaries(uri, experiment_id)

    client = open_client(mlflow_server)
    server_experiment = ensure_experiment(client, "traces-on-server", mlflow_server)
    server_run = client.create_run(server_experiment).info.run_id
    stats = _log(mlflow_server, server_experiment, server_run)
    assert (stats.traces, stats.spans, stats.assessments, stats.replaced) == (2, 5, 4, 0)
    remote = _summaries(mlflow_server, server_experiment)
    assert remote == local
    _check_rows_written(remote)

    again = _log(mlflow_server, server_experiment, server_run)  # a resume or a retry
    assert again.replaced == 2
    assert _summaries(mlflow_server, server_experiment) == local
    ids = sorted(s["client_request_id"] for s in remote)
    assert ids == ["a", "b"]
    for trace_id in (trace_id_for(server_run, "a"), trace_id_for(server_run, "b")):
        assert client.get_trace(trace_id).info.trace_metadata["mlflow.sourceRun"] == server_run
