"""The shared HTTP retry policy (rag_experiments.common.http): which errors are retried, how
long each wait is (exponential, capped, Retry-After honoured), and the Retry-After header."""

from __future__ import annotations

import calendar
import logging
import re

import httpx
import pytest

from rag_experiments.common.http import (
    RetryableStatusError,
    RetryPolicy,
    is_retryable,
    retry_after_s,
)
from rag_experiments.errors import ConfigError, TargetError
from tests.run_helpers import run_fresh


def _status(code: int, retry_after: str | None = None) -> RetryableStatusError:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return RetryableStatusError(httpx.Response(code, headers=headers))


def _waits(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [float(w) for w in re.findall(r"retrying in ([0-9.]+) s", caplog.text)]


def test_retry_after_header_in_seconds_or_as_an_http_date() -> None:
    assert retry_after_s({"Retry-After": "3"}) == 3.0
    assert retry_after_s({"retry-after": "-5"}) == 0.0
    assert retry_after_s({}) is None and retry_after_s({"Retry-After": "soon"}) is None
    when = calendar.timegm((2015, 10, 21, 7, 28, 0))  # RFC 9110's example date
    assert retry_after_s({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=when - 120) == 120.0


def test_what_is_retried() -> None:
    assert is_retryable(_status(503)) and is_retryable(httpx.ConnectError("refused"))
    assert is_retryable(httpx.ReadTimeout("slow")) and is_retryable(httpx.RemoteProtocolError("x"))
    assert not is_retryable(TargetError("non_json", "x")) and not is_retryable(ValueError("x"))


def test_waits_double_up_to_the_cap_and_honour_retry_after(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="rag_experiments.common.http")
    errors = [_status(503), _status(503), _status(503), _status(503)]
    attempts: list[int] = []

    def fail() -> str:
        attempts.append(1)
        raise errors[len(attempts) - 1]

    policy = RetryPolicy(max_retries=3, backoff_s=0.01, backoff_max_s=0.03, jitter=False)
    with pytest.raises(RetryableStatusError):
        policy.call(fail, "q1")
    assert len(attempts) == 4
    assert _waits(caplog) == [0.01, 0.02, 0.03]  # min(0.03, 0.01 * 2**k), k = 0, 1, 2
    assert "q1: attempt 1/4 failed (HTTP 503)" in caplog.text

    caplog.clear()
    errors[:] = [_status(429, "0.04"), _status(429, "60"), _status(429)]
    attempts.clear()
    counted: list[int] = []
    with pytest.raises(RetryableStatusError):
        RetryPolicy(2, 0.01, 0.05, jitter=False).call(fail, on_attempt=lambda: counted.append(1))
    # max(backoff, Retry-After) capped at backoff_max_s: max(0.01, 0.04), min(max(0.02, 60), 0.05)
    assert _waits(caplog) == [0.04, 0.05] and len(counted) == 3


def test_a_non_retryable_error_is_raised_at_once_and_jitter_stays_below_the_bound(caplog) -> None:
    calls: list[int] = []

    def bad() -> None:
        calls.append(1)
        raise TargetError("mapping_empty", "x")

    with pytest.raises(TargetError):
        RetryPolicy(max_retries=5, backoff_s=0.0).call(bad)
    assert calls == [1]

    caplog.set_level(logging.WARNING, logger="rag_experiments.common.http")
    flaky = iter([httpx.ConnectError("refused")] * 3)

    def once_ok() -> str:
        exc = next(flaky, None)
        if exc is not None:
            raise exc
        return "ok"

    assert RetryPolicy(max_retries=3, backoff_s=0.004, backoff_max_s=0.01).call(once_ok) == "ok"
    bounds = [0.004, 0.008, 0.01]
    assert len(_waits(caplog)) == 3
    assert all(0.0 <= w <= b + 0.005 for w, b in zip(_waits(caplog), bounds, strict=True))
    with pytest.raises(ConfigError, match="max_retries must be >= 0"):
        RetryPolicy(max_retries=-1)


def test_a_first_attempt_that_succeeds_is_counted_once_and_max_retries_0_raises_at_once() -> None:
    counted: list[int] = []
    assert RetryPolicy(max_retries=2).call(lambda: 7, on_attempt=lambda: counted.append(1)) == 7
    assert counted == [1]
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise httpx.ConnectError("refused")

    with pytest.raises(httpx.ConnectError):
        RetryPolicy(0, backoff_s=5.0).call(refused, on_attempt=lambda: counted.append(1))
    assert calls == [1] and counted == [1, 1]


@pytest.mark.slow
def test_httpx_is_imported_on_first_use_not_by_the_run_path() -> None:
    """The engine, the tracker and the HTTP helpers import without httpx (0.2-0.5 s of
    start-up); it loads with the first client, and its failures are retryable then."""
    code = (
        "import sys\n"
        "import rag_experiments.app, rag_experiments.job, rag_experiments.build\n"
        "import rag_experiments.tracking.resilience\n"
        "from rag_experiments.common import http\n"
        "assert 'httpx' not in sys.modules, 'httpx imported at start-up'\n"
        "assert not http.is_retryable(ValueError('x'))\n"
        "import httpx\n"
        "assert http.RETRYABLE_TRANSPORT == (httpx.TimeoutException, httpx.NetworkError,\n"
        "                                    httpx.RemoteProtocolError)\n"
        "assert http.is_retryable(httpx.ConnectError('refused'))\n"
        "assert not http.is_retryable(httpx.HTTPStatusError('x', request=None, response=None))\n"
    )
    run_fresh(code)
