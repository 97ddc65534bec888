"""The client side of the metric batch endpoint decides from the server's answer: written,
no such endpoint (remembered per server, ``log_batch`` instead), the endpoint failed (this
request by ``log_batch``), or MLflow's own error (raised)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import mlflow.utils.rest_utils as rest_utils
import pytest
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException

import rag_experiments.tracking.metric_batch as metric_batch

METRICS = [Metric("nDCG_at_10", 0.5, 1_000, 0)]


class _Answer:
    def __init__(self, status: int, text: str) -> None:
        self.status_code = status
        self.text = text

    def json(self) -> Any:
        return json.loads(self.text)


def _send(monkeypatch: pytest.MonkeyPatch, answer: _Answer, host: str) -> bool:
    requests: list[str] = []

    def http_request(creds: Any, endpoint: str, method: str, **kwargs: Any) -> _Answer:
        requests.append(endpoint)
        return answer

    monkeypatch.setattr(rest_utils, "http_request", http_request)
    monkeypatch.setattr(metric_batch, "has_batch_endpoint", lambda store: True)
    store = SimpleNamespace(get_host_creds=lambda: SimpleNamespace(host=host))
    sent = metric_batch.send_metrics(store, "r1", METRICS)
    assert requests == [metric_batch.METRICS_PATH]
    return sent


def test_written_missing_failed_and_mlflow_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metric_batch, "_MISSING", set())
    ok = _Answer(200, json.dumps({"metrics": 1, "fast": True}))
    assert _send(monkeypatch, ok, "http://a") is True
    page = _Answer(404, "<html>Not Found</html>")  # a server without the route
    assert _send(monkeypatch, page, "http://b") is False
    assert metric_batch._MISSING == {"http://b"}  # remembered: no second request to b
    unknown_run = _Answer(404, json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST"}))
    with pytest.raises(MlflowException, match="RESOURCE_DOES_NOT_EXIST"):
        _send(monkeypatch, unknown_run, "http://c")
    failed = _Answer(500, json.dumps({"error_code": "INTERNAL_ERROR", "message": "x"}))
    assert _send(monkeypatch, failed, "http://d") is False  # this request by log_batch
    assert metric_batch._MISSING == {"http://b"}  # the endpoint is tried again next time
