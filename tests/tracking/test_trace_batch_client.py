"""The client of the trace batch endpoint keeps :data:`~rag_experiments.tracking.trace_batch.
BATCH_IN_FLIGHT` requests in flight, never more, and a failed request is raised only once every
request of the call has ended (a retry of the call never races one of them), alone: a later
failure neither replaces it nor is chained onto it."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from mlflow.exceptions import MlflowException

import rag_experiments.tracking.trace_batch as traces


def _answer(n: int) -> requests.Response:
    response = requests.Response()  # what MLflow's http_request returns
    response.status_code = 200
    response._content = json.dumps({"traces": n, "replaced": 1}).encode()
    return response


class _Posts:
    """Stands in for the server: records how many requests are open at once; the first
    request waits until a second one has arrived (or 5 s), then answers, or fails."""

    def __init__(self, fail_first: bool, fail_second: bool = False) -> None:
        self.fail_first = fail_first
        self.fail_second = fail_second
        self.lock = threading.Lock()
        self.open = 0
        self.most_open = 0
        self.ended: list[int] = []
        self.second_arrived = threading.Event()
        self.count = 0

    def post(self, writer: Any, data: bytes) -> requests.Response:
        with self.lock:
            self.count += 1
            n = self.count
            self.open += 1
            self.most_open = max(self.most_open, self.open)
        if n >= 2:
            self.second_arrived.set()
            time.sleep(0.05)
        else:
            self.second_arrived.wait(5)
        with self.lock:
            self.open -= 1
            self.ended.append(n)
        if n == 1 and self.fail_first:
            raise MlflowException("API request to /batch failed with exception boom")
        if n == 2 and self.fail_second:
            raise MlflowException("API request to /batch failed with exception second")
        return _answer(int(data))


@pytest.fixture
def writer(monkeypatch: pytest.MonkeyPatch) -> traces.PluginTraceWriter:
    monkeypatch.setattr(traces, "parts_to_json", lambda parts: parts)
    monkeypatch.setattr(traces.PluginTraceWriter, "_encode", lambda self, t: str(len(t)).encode())
    store = SimpleNamespace(get_host_creds=lambda: SimpleNamespace(host="http://app"))
    return traces.PluginTraceWriter(store, "1")


def test_two_requests_are_in_flight_and_every_answer_is_counted(
    writer: traces.PluginTraceWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    posts = _Posts(fail_first=False)
    monkeypatch.setattr(traces.PluginTraceWriter, "_post", lambda w, data: posts.post(w, data))
    for size in (100, 100, 100, 45):
        writer.write([object()] * size)  # type: ignore[list-item]
    writer.close()
    assert traces.BATCH_IN_FLIGHT == 2
    assert posts.most_open == 2  # the first waited for the second: both were open together
    assert sorted(posts.ended) == [1, 2, 3, 4]
    assert writer.replaced == 4  # one "replaced" per answer, summed


def test_a_failed_request_is_raised_after_the_other_in_flight_has_ended(
    writer: traces.PluginTraceWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    posts = _Posts(fail_first=True)
    monkeypatch.setattr(traces.PluginTraceWriter, "_post", lambda w, data: posts.post(w, data))
    writer.write([object()] * 100)  # type: ignore[list-item]
    writer.write([object()] * 100)  # type: ignore[list-item]
    with pytest.raises(MlflowException, match="boom"):
        writer.close()
    assert sorted(posts.ended) == [1, 2]  # request 2 ended before the failure was raised
    assert writer.pending == type(writer.pending)()  # nothing left behind


def test_the_first_failure_is_raised_by_write_alone_after_the_other_request_ended(
    writer: traces.PluginTraceWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests 1 and 2 both fail; the third write waits for request 1 and raises its failure,
    after request 2 ended, with nothing chained; close() then has nothing left to raise."""
    posts = _Posts(fail_first=True, fail_second=True)
    monkeypatch.setattr(traces.PluginTraceWriter, "_post", lambda w, data: posts.post(w, data))
    writer.write([object()] * 100)  # type: ignore[list-item]
    writer.write([object()] * 100)  # type: ignore[list-item]
    with pytest.raises(MlflowException, match="boom") as raised:
        writer.write([object()] * 100)  # type: ignore[list-item]
    assert raised.value.__context__ is None and raised.value.__cause__ is None
    assert sorted(posts.ended) == [1, 2] and posts.count == 2  # the third was never sent
    writer.close()  # no second failure
    assert writer.pending == type(writer.pending)()
