"""How many requests one model endpoint gets at once: a bound that slows down under back
pressure, and a breaker that stops calling a server that has gone away.

Every HTTP chat model (:class:`~rag_experiments.llm.remote.RemoteChat`) sends each attempt
through its :class:`EndpointGate`:

- **Bound.** At most ``limit`` attempts are in flight (``llm.max_concurrency``,
  ``judge.max_concurrency``). A caller beyond that waits for a slot; so does a caller of any
  thread, whatever pool it comes from.
- **Back pressure.** By default an answer ``429`` or ``503`` makes only the refused call wait:
  its retry comes after at least the server's ``Retry-After``
  (:class:`~rag_experiments.common.http.RetryPolicy`), while the other calls go on at the
  configured bound. Two stronger reactions exist as options, measured against it by
  ``bench/backpressure.py`` (2000 calls at 32 in flight, 5 % answered ``429`` with
  ``Retry-After: 1``; docs/benchmarks.md): ``hold_all`` holds *every* new attempt until the
  ``Retry-After`` has passed (the behaviour until issue 42: 136.6 s against 11.6 s, never more
  than 22 calls in flight), and ``decrease_every_s`` halves the bound (never below 1) at most
  once per that many seconds and raises it by ``1 / bound`` per success back to ``limit``
  (additive increase, multiplicative decrease, as TCP congestion control: Jacobson 1988,
  *Congestion Avoidance and Control*, SIGCOMM; MLflow's GenAI evaluation does the same to its
  request rate, ``mlflow/genai/evaluation/rate_limiter.py``, halving at most once per 5 s:
  12.6 s). Each honours the server's ``Retry-After``; the default finishes soonest. In-flight
  attempts are never cut, so the count never exceeds the configured limit.
- **Breaker.** After ``trip_after`` consecutive connection failures (refused, reset) with no
  success for ``quiet_s`` seconds (the server is gone, not just dropping a few connections)
  the gate opens: every attempt fails at once with
  :class:`EndpointDownError` (reason ``unreachable``, not retried) instead of waiting out its
  retries, until ``probe_after_s`` seconds later one attempt is let through to probe; a success
  closes the gate again. So a server that dies mid-run fails the remaining rows quickly.

The gate knows nothing of HTTP: callers tell it what happened (:meth:`EndpointGate.call`
classifies the exceptions of the model layer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from rag_experiments.errors import ConfigError
from rag_experiments.llm.errors import LLMHTTPError, LLMUnreachableError

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKPRESSURE_STATUS = frozenset({429, 503})
"""Statuses that mean "too many requests": the bound is lowered."""


class EndpointDownError(LLMUnreachableError):
    """The endpoint failed to connect ``trip_after`` times in a row; calls fail at once until
    the next probe. Reason ``unreachable``; never retried (see
    :func:`~rag_experiments.common.http.is_retryable`)."""

    retryable = False


class EndpointGate:
    """Concurrency bound, back-pressure pause and breaker of one model endpoint (thread-safe).

    Args:
        limit: Most attempts in flight at once (>= 1).
        where: Names the endpoint in messages (``"openai qwen at http://…"``).
        trip_after: Consecutive connection failures that open the breaker (>= 1).
        quiet_s: ... and seconds without a success (so a server that drops some connections
            but answers others never trips it).
        probe_after_s: Seconds an open breaker waits before letting one probe through.
        clock: Monotonic clock in seconds (tests pass a fake).
        hold_all: On a ``429``/``503`` with ``Retry-After``, hold every new attempt until then
            (True), or let only the refused call wait it (False, the default: its retry waits
            at least ``Retry-After``, :class:`~rag_experiments.common.http.RetryPolicy`).
        decrease_every_s: Fewest seconds between two halvings of the bound (0 = on every
            back-pressure answer); None (the default) = never lower it (a fixed limit).

    Attributes:
        in_flight: Attempts running now.
        peak_in_flight: Highest ``in_flight`` seen.

    Raises:
        ConfigError: ``limit`` or ``trip_after`` < 1, or ``probe_after_s`` < 0.
    """

    def __init__(
        self,
        limit: int,
        *,
        where: str = "model endpoint",
        trip_after: int = 3,
        quiet_s: float = 1.0,
        probe_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        hold_all: bool = False,
        decrease_every_s: float | None = None,
    ) -> None:
        if int(limit) < 1 or int(trip_after) < 1 or probe_after_s < 0:
            raise ConfigError(
                f"{where}: max_concurrency must be >= 1 (got {limit}); trip_after >= 1 and "
                f"probe_after_s >= 0 (got {trip_after}, {probe_after_s})"
            )
        self.limit = int(limit)
        self.where = where
        self.trip_after = int(trip_after)
        self.probe_after_s = float(probe_after_s)
        self.quiet_s = float(quiet_s)
        self._clock = clock
        self.hold_all = bool(hold_all)
        self.decrease_every_s = decrease_every_s
        self._last_decrease = float("-inf")
        self._cond = threading.Condition()
        self._bound = float(self.limit)
        self._paused_until = 0.0
        self._failures = 0
        self._last_ok = float("-inf")
        self._opened_at: float | None = None
        self._probing = False
        self.in_flight = 0
        self.peak_in_flight = 0

    @property
    def bound(self) -> int:
        """Attempts allowed in flight now (``limit`` unless back pressure lowered it)."""
        with self._cond:
            return max(1, int(self._bound))

    def call(self, attempt: Callable[[], T]) -> T:
        """Run one attempt inside the gate.

        Args:
            attempt: One request to the endpoint; raises the model layer's typed errors.

        Returns:
            ``attempt()``'s result.

        Raises:
            EndpointDownError: The breaker is open (no request was sent).
            LLMError: Whatever ``attempt`` raised (after the gate noted it).
        """
        probe = self._enter()
        try:
            result = attempt()
        except LLMUnreachableError:
            self._leave(probe, outcome="unreachable")
            raise
        except LLMHTTPError as exc:
            self._leave(
                probe,
                outcome="backpressure" if exc.status in BACKPRESSURE_STATUS else "answered",
                retry_after_s=exc.retry_after_s,
            )
            raise
        except BaseException:
            self._leave(probe, outcome="answered")
            raise
        self._leave(probe, outcome="ok")
        return result

    def _enter(self) -> bool:
        """Wait for a slot; True when this attempt is the breaker's probe."""
        with self._cond:
            while True:
                now = self._clock()
                probe = False
                if self._opened_at is not None:
                    waited = now - self._opened_at
                    if self._probing or waited < self.probe_after_s:
                        raise EndpointDownError(
                            f"{self.where}: {self.trip_after} connections in a row failed; not "
                            f"calling it again for {max(0.0, self.probe_after_s - waited):.1f} s "
                            "(the server is down or base_url is wrong: start it, then resume "
                            "the run with resume=<run id>)"
                        )
                    probe = True
                if now < self._paused_until:
                    self._cond.wait(self._paused_until - now)
                    continue
                if self.in_flight < max(1, int(self._bound)):
                    self.in_flight += 1
                    self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                    if probe:
                        self._probing = True
                    return probe
                self._cond.wait(0.5)

    def _leave(self, probe: bool, *, outcome: str, retry_after_s: float | None = None) -> None:
        with self._cond:
            self.in_flight -= 1
            if probe:
                self._probing = False
            if outcome == "unreachable":
                self._failures += 1
                quiet = self._clock() - self._last_ok >= self.quiet_s
                if probe or (
                    self._failures >= self.trip_after and quiet and self._opened_at is None
                ):
                    self._opened_at = self._clock()
                    log.warning(
                        "%s: %d connection failures in a row; failing its calls at once for %.0f s",
                        self.where,
                        self._failures,
                        self.probe_after_s,
                    )
            else:
                self._failures = 0
                self._last_ok = self._clock()
                if self._opened_at is not None:
                    log.info("%s answers again", self.where)
                self._opened_at = None
            if outcome == "backpressure":
                now = self._clock()
                every = self.decrease_every_s
                if every is not None and now - self._last_decrease >= every:
                    self._bound = max(1.0, self._bound / 2)
                    self._last_decrease = now
                if retry_after_s and self.hold_all:
                    self._paused_until = max(self._paused_until, now + retry_after_s)
                log.info(
                    "%s asks to slow down: at most %d requests at once%s",
                    self.where,
                    int(self._bound),
                    f", pausing {retry_after_s:g} s" if retry_after_s else "",
                )
            elif outcome == "ok" and self._bound < self.limit and self.decrease_every_s is not None:
                self._bound = min(float(self.limit), self._bound + 1.0 / self._bound)
            self._cond.notify_all()
