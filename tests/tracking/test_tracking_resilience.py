"""Logging through tracking-server outages (:mod:`rag_experiments.tracking.resilience`), without
a server: a port nobody listens on, and fake calls that fail a given number of times. The real
server killed and restarted is in ``tests/tracking/test_server_store.py`` (slow)."""

from __future__ import annotations

import shlex
import time

import pytest
import requests
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from rag_experiments.errors import TrackingError, TrackingUnavailableError
from rag_experiments.tracking.resilience import (
    Outage,
    bounded_http,
    check_server,
    is_transient,
    resumable_message,
    resume_command,
)
from tests.mlflow_server import free_port


def _refused() -> requests.exceptions.ConnectionError:
    return requests.exceptions.ConnectionError("[Errno 111] Connection refused")


def test_transient_errors_are_told_from_real_refusals() -> None:
    assert is_transient(_refused())
    assert is_transient(requests.exceptions.ReadTimeout("read timed out"))
    try:  # how MLflow's REST client wraps a refused connection
        try:
            raise _refused()
        except Exception as e:
            raise MlflowException(f"API request to http://x/api failed with exception {e}")  # noqa: B904
    except MlflowException as wrapped:
        assert is_transient(wrapped)
    # the server answered: a refusal of the request itself is not retried
    assert not is_transient(MlflowException("Changing param values is not allowed"))
    assert not is_transient(ValueError("bad value"))


def test_an_outage_is_retried_with_backoff_until_the_call_succeeds() -> None:
    sleeps: list[float] = []
    outage = Outage("http://127.0.0.1:1", retry_s=60, sleep=sleeps.append)
    calls = []

    def flaky(x: int) -> int:
        calls.append(x)
        if len(calls) <= 3:
            raise _refused()
        return x * 2

    assert outage.call("metrics", flaky, 21) == 42
    assert len(calls) == 4
    assert sleeps == [0.5, 1.0, 2.0]  # 0.5 * 2^n (tenacity's wait_exponential), capped at 8 s
    assert outage.down is None and outage._since is None  # the outage ended with the success


def test_a_server_that_stays_away_fails_every_call_after_retry_s() -> None:
    outage = Outage("http://127.0.0.1:1", retry_s=0.3)
    calls = []

    def down() -> None:
        calls.append(1)
        raise _refused()

    started = time.monotonic()
    with pytest.raises(TrackingUnavailableError, match=r"unreachable for 0.3 s .* logging traces"):
        outage.call("traces", down)
    assert time.monotonic() - started < 2.0
    assert len(calls) >= 2
    n = len(calls)
    with pytest.raises(TrackingUnavailableError) as again:  # at once, without trying again
        outage.call("metrics", down)
    assert len(calls) == n and again.value is outage.down


def test_non_transient_errors_are_raised_at_once() -> None:
    outage = Outage("http://127.0.0.1:1", retry_s=60, sleep=lambda s: pytest.fail("slept"))

    def refused() -> None:
        raise MlflowException("INVALID_PARAMETER_VALUE: param changed")

    with pytest.raises(MlflowException, match="param changed"):
        outage.call("params", refused)


def test_a_sqlite_store_is_called_as_it_is() -> None:
    outage = Outage("sqlite:////tmp/x.db", retry_s=60)

    def once() -> None:
        raise _refused()

    with pytest.raises(requests.exceptions.ConnectionError):
        outage.call("metrics", once)


def test_mlflow_rest_calls_are_bounded_by_retry_s_not_by_urllib3() -> None:
    # MLflow's defaults retry a refused connection 7 times with a backoff factor of 2
    # (minutes); inside the outage the whole wait is retry_s
    client = MlflowClient(f"http://127.0.0.1:{free_port()}")
    outage = Outage(client.tracking_uri, retry_s=1.0)
    started = time.monotonic()
    with pytest.raises(TrackingUnavailableError, match="the experiment"):
        outage.call("the experiment", client.get_experiment_by_name, "x")
    assert time.monotonic() - started < 5.0


def test_bounded_http_sets_and_restores_mlflows_request_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow.environment_variables import (
        MLFLOW_HTTP_REQUEST_MAX_RETRIES,
        MLFLOW_HTTP_REQUEST_TIMEOUT,
    )

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "77")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with bounded_http(4.2):
        assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 0
        assert MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 5
    assert MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 77
    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 7  # MLflow's default again


def test_the_preflight_refuses_a_server_that_is_not_running_in_seconds() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(TrackingError) as err:
        check_server(f"http://127.0.0.1:{port}")
    assert time.monotonic() - started < 5.0
    message = str(err.value)
    assert "\n" not in message
    assert f"http://127.0.0.1:{port} cannot be reached" in message
    assert f"mlflow server --host 127.0.0.1 --port {port}" in message


def test_the_resume_command_repeats_the_jobs_overrides_and_names_the_run() -> None:
    command = resume_command("abc123", ["llm=fake", "resume=old", "run_name=my run", "+x='a b'"])
    assert shlex.split(command) == [
        "rag-exp", "run", "llm=fake", "run_name=my run", "+x='a b'", "resume=abc123",
    ]  # fmt: skip
    error = TrackingUnavailableError("the server stayed unreachable", "metrics", "abc123")
    line = resumable_message(error, "/jobs/1", command)
    assert "\n" not in line
    assert "the answers are in /jobs/1 and run abc123 is left RUNNING" in line
    assert line.endswith(f"with: {command}")
    no_run = TrackingUnavailableError("the server stayed unreachable", "the experiment")
    assert "no run was opened" in resumable_message(no_run, None, command)
