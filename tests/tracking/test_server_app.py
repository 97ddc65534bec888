"""The trace batch endpoint of ``mlflow server --app-name rag-experiments``
(rag_experiments/tracking/server_app.py), in process: the client's batch writer posts through
Flask's test client into a sqlite backend store, which must then hold the rows the direct
multi-row INSERT path writes (itself checked against MLflow's own API in test_traces.py).
The real server over PostgreSQL is in test_server_store.py (slow)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import mlflow.server.handlers as handlers
import pytest
import requests
from flask import Flask
from mlflow.exceptions import MlflowException
from mlflow.tracing.client import TracingClient

from rag_experiments.errors import TrackingError
from rag_experiments.tracking import trace_batch as traces_mod
from rag_experiments.tracking.client import open_client
from rag_experiments.tracking.server_app import MAX_MB_ENV, create_app
from rag_experiments.tracking.trace_sql import TraceIdConflictError
from tests.tracking.test_traces import _log, _rows_of, _store

pytestmark = pytest.mark.slow  # a sqlite store per test: 2-20 s on the shared machine

PLUGIN_URI = "http://plugin.test"
"""A server URL the client believes runs the app (its probe answer cached): no socket."""


SENT: list[tuple[int, bytes]] = []
"""``(HTTP status, decompressed body)`` of each batch request the fixture routed."""


@pytest.fixture
def app_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str, str]:
    """``(Flask test client of the app, server store URI, experiment id)``: the app over a
    sqlite backend store, the client's batch requests routed to it (recorded in
    :data:`SENT`)."""
    uri, experiment_id, _ = _store(tmp_path, "server")
    monkeypatch.setattr(handlers, "_tracking_store", TracingClient(uri).store)
    flask_client = create_app(Flask("test-app")).test_client()
    monkeypatch.setitem(traces_mod._PLUGIN_PROBED, PLUGIN_URI, True)
    SENT.clear()

    def post(self: Any, data: bytes) -> requests.Response:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        answer = flask_client.post(traces_mod.BATCH_PATH, data=data, headers=headers)
        SENT.append((answer.status_code, gzip.decompress(data)))
        response = requests.Response()  # what MLflow's http_request returns
        response.status_code = answer.status_code
        response._content = answer.get_data()
        response.headers["Content-Type"] = answer.content_type
        response.encoding = "utf-8"
        return response

    monkeypatch.setattr(traces_mod.PluginTraceWriter, "_post", post)
    return flask_client, uri, experiment_id


def test_the_endpoint_says_it_can_write_a_database_store(app_store: tuple[Any, str, str]) -> None:
    flask_client, _, _ = app_store
    status = flask_client.get(traces_mod.BATCH_PATH).get_json()
    assert status["protocol"] == traces_mod.BATCH_PROTOCOL and status["writable"] is True


def test_batch_requests_store_the_rows_of_the_direct_path_and_a_repeat_replaces_them(
    tmp_path: Path, app_store: tuple[Any, str, str]
) -> None:
    _, server_uri, experiment_id = app_store
    stats = _log(PLUGIN_URI, experiment_id, "run-0")  # through the endpoint
    assert (stats.traces, stats.spans, stats.assessments, stats.replaced) == (2, 5, 4, 0)
    direct_uri, direct_experiment, _ = _store(tmp_path, "direct")
    _log(direct_uri, direct_experiment, "run-0")  # the client's own multi-row INSERTs
    via_app, direct = _rows_of(server_uri), _rows_of(direct_uri)
    assert {table: len(rows) for table, rows in via_app.items()} == {
        "trace_info": 2, "trace_tags": 8, "trace_request_metadata": 6, "assessments": 4,
        "spans": 5,
    }  # fmt: skip
    for table in direct:
        assert via_app[table] == direct[table], table
    again = _log(PLUGIN_URI, experiment_id, "run-0")  # a retried request: replaced, not doubled
    assert again.replaced == 2
    assert _rows_of(server_uri) == via_app


def test_a_request_of_another_protocol_or_not_gzip_is_refused_with_400(
    app_store: tuple[Any, str, str],
) -> None:
    flask_client, server_uri, experiment_id = app_store
    body = {"protocol": traces_mod.BATCH_PROTOCOL + 1, "experiment_id": experiment_id}
    headers = {"Content-Encoding": "gzip"}
    wrong = flask_client.post(
        traces_mod.BATCH_PATH, data=gzip.compress(json.dumps(body).encode()), headers=headers
    )
    assert wrong.status_code == 400
    assert "install the same rag-experiments version" in wrong.get_json()["message"]
    garbled = flask_client.post(traces_mod.BATCH_PATH, data=b"not gzip", headers=headers)
    assert garbled.status_code == 400 and garbled.get_json()["error_code"] == (
        "INVALID_PARAMETER_VALUE"
    )
    assert _rows_of(server_uri)["trace_info"] == []


def test_a_body_over_the_cap_is_refused_with_413_and_the_client_halves_its_requests(
    app_store: tuple[Any, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    flask_client, server_uri, experiment_id = app_store
    _log(PLUGIN_URI, experiment_id, "run-0")  # no cap hit: one request of both traces
    ((status, body),) = SENT
    payload = json.loads(body)
    alone = [  # the body of a request of one trace, as the client encodes it
        len(json.dumps({**payload, "traces": [t]}, ensure_ascii=False).encode())
        for t in payload["traces"]
    ]
    assert status == 200 and max(alone) < len(body)
    one_trace = max(alone)  # either trace alone fits, both do not
    monkeypatch.setenv(MAX_MB_ENV, str(one_trace / 1e6))
    bomb = gzip.compress(b" " * (one_trace + 1))  # ~0.1% of its decompressed size
    refused = flask_client.post(
        traces_mod.BATCH_PATH, data=bomb, headers={"Content-Encoding": "gzip"}
    )
    assert refused.status_code == 413
    message = refused.get_json()["message"]
    assert MAX_MB_ENV in message and "\n" not in message
    SENT.clear()
    again = _log(PLUGIN_URI, experiment_id, "run-0")
    assert [s for s, _ in SENT] == [413, 200, 200]  # halved once, then one trace a request
    ids = [[t["trace_id"] for t in json.loads(b)["traces"]] for _, b in SENT]
    assert ids == [ids[1] + ids[2], ids[1], ids[2]] and len(set(ids[0])) == 2
    assert (again.traces, again.replaced) == (2, 2)
    assert len(_rows_of(server_uri)["trace_info"]) == 2
    monkeypatch.setenv(MAX_MB_ENV, "0.000001")  # 1 byte: even one trace is refused
    with pytest.raises(TrackingError, match=MAX_MB_ENV):
        _log(PLUGIN_URI, experiment_id, "run-0")


def test_a_trace_id_of_another_experiment_is_refused_with_409_never_overwritten(
    app_store: tuple[Any, str, str],
) -> None:
    _, server_uri, experiment_id = app_store
    other = open_client(server_uri).create_experiment("other")
    _log(PLUGIN_URI, experiment_id, "run-0")
    before = _rows_of(server_uri)
    SENT.clear()
    with pytest.raises(MlflowException, match="another experiment") as raised:
        _log(PLUGIN_URI, other, "run-0")  # the same trace ids, another experiment
    assert [s for s, _ in SENT] == [409]
    assert raised.value.error_code == "RESOURCE_ALREADY_EXISTS"
    with pytest.raises(TraceIdConflictError, match=f"experiment {experiment_id}"):
        _log(server_uri, other, "run-0")  # the direct path refuses it the same way
    assert _rows_of(server_uri) == before  # nothing deleted, nothing written
