"""Logging to an MLflow tracking server that may be down, restarting or slow.

MLflow's REST client retries a failed request itself (urllib3, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
= 7 tries with a backoff factor of 2 and a 120 s timeout each by default): a server that
stays down holds one request for minutes, and a run's end-of-run logging (params, tables,
metrics, traces) for a quarter of an hour, before anything says why. Here the wait is ours:

* :func:`check_server` is the preflight: ``GET /health`` with a few seconds' timeout before a
  run opens, so a server that is not running fails the job before any question is answered;
* :class:`Outage` runs each logging call with MLflow's own retries off and a short request
  timeout (:func:`bounded_http`), and retries calls that failed for a transient reason
  (connection refused or reset, timeout, HTTP 5xx: :func:`is_transient`) with exponential
  backoff, for at most ``retry_s`` seconds from the first failure of an outage; a success ends
  the outage. Past that, :class:`TrackingUnavailableError` is raised, and every later call
  fails at once with the same error, so a run that lost its server ends in seconds.

Calls to a database store (``sqlite:///…``) are run as they are: no retry, no HTTP.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar
from urllib.parse import urlparse

import requests
from mlflow.exceptions import MlflowException
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from rag_experiments.errors import TrackingError, TrackingUnavailableError

__all__ = [
    "Outage",
    "TrackingUnavailableError",
    "bounded_http",
    "check_server",
    "is_remote",
    "is_transient",
    "resumable_message",
    "resume_command",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

PREFLIGHT_TIMEOUT_S = 3.0
"""Timeout of one ``GET /health`` of the preflight; two tries, so a dead server is refused in
about 6 s at most (a refused connection in milliseconds)."""

REQUEST_TIMEOUT_S = 60.0
"""Longest a single logging request may take while the server answers (a large trace or
artifact upload); each try is also cut to the time left of ``retry_s``."""

MIN_REQUEST_TIMEOUT_S = 5.0
"""Shortest per-request timeout, so a slow but live server is not mistaken for a dead one."""

_BACKOFF = wait_exponential(multiplier=0.5, min=0.5, max=8.0)
_HTTP_ENV = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT")
_TRANSIENT_STATUS = frozenset({500, 502, 503, 504})


def is_remote(uri: str) -> bool:
    """True for a tracking server URI (``http://``, ``https://``)."""
    return urlparse(uri).scheme in ("http", "https")


def check_server(
    uri: str,
    timeout_s: float = PREFLIGHT_TIMEOUT_S,
    tries: int = 2,
    *,
    where: str = "tracking.uri",
) -> None:
    """Preflight of a tracking server: ``GET <uri>/health`` answers 200.

    Args:
        uri: The server's URL (``http://host:port``).
        timeout_s: Timeout of each try, seconds.
        tries: Tries, one second apart.
        where: What names the store for the caller's user: ``tracking.uri`` (the run's
            preflight: the message says nothing was run) or ``--tracking-uri`` (a command that
            reads logged runs, :func:`~rag_experiments.tracking.store.open_store`).

    Raises:
        TrackingError: The server does not answer (one line naming the fix).
    """
    import httpx  # only for a tracking server (common/http.retryable_transport says why)

    url = f"{uri.rstrip('/')}/health"
    problem = ""
    for attempt in range(tries):
        if attempt:
            time.sleep(1.0)
        try:
            # verify: an http:// URL has no TLS and no certificate to check; loading the CA
            # bundle for it anyway cost 0.16 CPU s a run (profile of bench/logging_throughput)
            response = httpx.get(url, timeout=timeout_s, verify=urlparse(url).scheme != "http")
        except httpx.HTTPError as exc:
            problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            continue
        if response.status_code == 200:
            return
        problem = f"HTTP {response.status_code}"
    start = f"start it (e.g. mlflow server --host 127.0.0.1 --port {urlparse(uri).port or 5000})"
    if where == "tracking.uri":
        raise TrackingError(
            f"preflight: the MLflow tracking server {uri} cannot be reached ({problem}), so "
            f"nothing was run: {start} or point tracking.uri at a running server "
            "(tracking=local logs to a sqlite file)"
        )
    raise TrackingError(
        f"the MLflow tracking server {uri} cannot be reached ({problem}): {start} or pass "
        f"{where} of a running server (or the sqlite:///… file the runs were logged to)"
    )


@contextmanager
def bounded_http(timeout_s: float) -> Iterator[None]:
    """MLflow's REST calls in the block make one try each (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
    = 0) with a ``timeout_s`` timeout (``MLFLOW_HTTP_REQUEST_TIMEOUT``); both are read by
    ``mlflow.utils.rest_utils.http_request`` at each call. The variables are restored after.

    Args:
        timeout_s: Per-request timeout, seconds (rounded up to a whole second).
    """
    saved = {k: os.environ.get(k) for k in _HTTP_ENV}
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, int(timeout_s + 0.999)))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def is_transient(exc: BaseException) -> bool:
    """True when a failed call may succeed later: the connection was refused, reset or timed
    out, or the server answered 5xx (e.g. its database restarting). MLflow wraps the
    ``requests`` error in an :class:`MlflowException`, so the whole cause/context chain is
    searched.

    Args:
        exc: The error a logging call raised.

    Returns:
        Whether to retry.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(
            current,
            (
                requests.exceptions.ConnectionError,
                requests.exceptions.Timeout,
                requests.exceptions.RetryError,
                ConnectionError,
                TimeoutError,
            ),
        ):
            return True
        if isinstance(current, MlflowException):
            if current.get_http_status_code() in _TRANSIENT_STATUS and "API request" in str(
                current
            ):
                return True
            text = str(current)
            if "Max retries exceeded" in text or "Connection refused" in text:
                return True
        current = current.__cause__ or current.__context__
    return False


class Outage:
    """Runs logging calls against one tracking store, retrying through server outages.

    One outage starts at the first transient failure and ends at the next success; all calls
    made during it share its deadline (``retry_s`` after it started), so the whole wait for a
    server that does not come back is ``retry_s`` plus at most one request timeout, whatever
    the number of calls left. After the deadline every call raises the same
    :class:`TrackingUnavailableError` at once.

    Args:
        uri: Resolved tracking URI; calls to a non-HTTP store run unchanged.
        retry_s: Longest wait for a server that went away, seconds (``tracking.retry_s``).
        sleep: Sleep function (tests may pass a fake).

    Raises:
        TrackingError: ``retry_s`` is negative.
    """

    def __init__(
        self, uri: str, retry_s: float, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        if retry_s < 0:
            raise TrackingError(f"tracking.retry_s={retry_s} is negative: use 0 or more seconds")
        self.uri = uri
        self.retry_s = float(retry_s)
        self.remote = is_remote(uri)
        self.down: TrackingUnavailableError | None = None
        """Set once the server stayed away for ``retry_s``."""
        self._since: float | None = None
        self._what = ""
        self._sleep = sleep

    def call(self, what: str, fn: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        """``fn(*args, **kwargs)``, retried through an outage of a tracking server.

        Args:
            what: What the call logs, for messages (``metrics``, ``config.yaml``…).
            fn: The MLflow call; it must be idempotent (the same params, metrics with the same
                timestamps, the same artifact path), since a try whose answer was lost may have
                been applied.

        Returns:
            What ``fn`` returns.

        Raises:
            TrackingUnavailableError: The server stayed unreachable for ``retry_s`` seconds
                (now or earlier in the run).
            Exception: Whatever ``fn`` raised when it is not transient.
        """
        if not self.remote:
            return fn(*args, **kwargs)
        if self.down is not None:
            raise self.down
        self._what = what
        retrying = Retrying(
            retry=retry_if_exception(is_transient),
            stop=self._stop,
            wait=self._wait,
            sleep=self._sleep,
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt, bounded_http(self._timeout()):
                    result = fn(*args, **kwargs)
        except Exception as exc:
            if not is_transient(exc):
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.down = TrackingUnavailableError(
                f"the MLflow tracking server {self.uri} stayed unreachable for "
                f"{self.retry_s:g} s (tracking.retry_s) while logging {what} "
                f"({first[:200]})",
                what,
            )
            raise self.down from exc
        if self._since is not None:
            log.warning(
                "MLflow server %s is back after %.0f s; logging continues",
                self.uri,
                time.monotonic() - self._since,
            )
            self._since = None
        return result

    def _timeout(self) -> float:
        """This try's request timeout: the time left of the outage, within bounds."""
        if self._since is None:
            return REQUEST_TIMEOUT_S
        left = self._since + self.retry_s - time.monotonic()
        return max(MIN_REQUEST_TIMEOUT_S, min(REQUEST_TIMEOUT_S, left))

    def _stop(self, state: RetryCallState) -> bool:
        """Stop retrying once the outage is ``retry_s`` old (it starts at its first failure,
        which is also when its one warning line is printed)."""
        if self._since is None:
            self._since = time.monotonic()
            log.warning(
                "MLflow server %s unreachable while logging %s; retrying for up to %.0f s "
                "(tracking.retry_s)",
                self.uri,
                self._what,
                self.retry_s,
            )
        return time.monotonic() - self._since >= self.retry_s

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff (0.5, 1, 2 … 8 s), never past the outage's deadline."""
        backoff = _BACKOFF(state)
        if self._since is None:
            return backoff
        return max(0.0, min(backoff, self._since + self.retry_s - time.monotonic()))


def resume_command(run_id: str, overrides: list[str], command: str = "rag-exp run") -> str:
    """The command that resumes ``run_id``: the job's own overrides (any ``resume=`` dropped)
    plus ``resume=<run_id>``, shell-quoted.

    Args:
        run_id: The run to resume.
        overrides: The job's command-line overrides (Hydra's ``overrides.task``).
        command: The command name.

    Returns:
        One line, e.g. ``rag-exp run dataset=sample resume=0a1b…``.
    """
    kept = [o for o in overrides if not o.lstrip("+~").startswith("resume=")]
    return " ".join([command, *(shlex.quote(o) for o in kept), f"resume={run_id}"])


def resumable_message(error: TrackingUnavailableError, job_dir: str | None, command: str) -> str:
    """The one line a run that lost its tracking server ends with.

    Args:
        error: The outage error (its :attr:`~TrackingUnavailableError.run_id` set by the
            tracker when a run was open).
        job_dir: The job folder holding the answers, when known.
        command: The resume command (:func:`resume_command`).

    Returns:
        The message: what failed, that nothing computed is lost, and how to resume.
    """
    where = f" in {job_dir}" if job_dir else " in the job folder"
    if error.run_id is None:
        return f"{error}; no run was opened, so run the same command again when it is back"
    return (
        f"{error}. Nothing computed is lost: the answers are{where} and run {error.run_id} is "
        f"left RUNNING; once the server is back, log the rest (no model is asked again) with: "
        f"{command}"
    )
