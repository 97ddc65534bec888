"""HTTP for every client of the package: model servers (:mod:`rag_experiments.llm`), embedding
servers (:mod:`rag_experiments.embedding`) and RAG endpoints (:mod:`rag_experiments.targets`).

- :class:`HttpTransport`: one pooled, thread-safe ``httpx.Client`` to one server; one attempt
  per :meth:`~HttpTransport.send`, transport failures raised as httpx raises them (each caller
  turns them into its own typed errors and reasons).
- :class:`RetryPolicy`: the one settings object of how a call is bounded and retried
  (``timeout_s``, ``max_retries``, ``backoff_s``, ``backoff_max_s``; its defaults are the only
  declaration of them, the config schemas take theirs from it), and the attempts with
  exponential backoff (tenacity), only for failures the package calls retryable
  (:func:`is_retryable`); a :class:`RetryableStatusError` carrying ``Retry-After`` waits at
  least that long (up to ``backoff_max_s``). :func:`nest_retry` turns a config node's flat
  keys into the ``retry`` argument the clients take.
- :func:`retry_after_s`, :func:`bearer_headers`: the ``Retry-After`` header and bearer keys.

The module knows nothing of models, metrics or targets (it imports only
:mod:`rag_experiments.errors`).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import ssl
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    before_nothing,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random_exponential,
)

from rag_experiments.errors import ConfigError, RagExpError

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt: rate limited, or a server error that may pass."""


@functools.cache
def retryable_transport() -> tuple[type[Exception], ...]:
    """httpx failures worth another attempt: a timeout, a refused/reset/dropped connection
    (``httpx.TimeoutException``, ``NetworkError``, ``RemoteProtocolError``).

    httpx is imported here, on first use, not with this module: importing it costs 0.2-0.5 s
    of CPU (it also loads its command line's ``rich``), and a run whose parts use no httpx
    client (the judge and model servers go through urllib3) does not pay it at start-up.
    Also readable as the module attribute ``RETRYABLE_TRANSPORT``.
    """
    import httpx

    return (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


def __getattr__(name: str) -> Any:
    """``RETRYABLE_TRANSPORT``: :func:`retryable_transport` (httpx imported on first use)."""
    if name == "RETRYABLE_TRANSPORT":
        return retryable_transport()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def retry_after_s(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds a server asks the client to wait, from its ``Retry-After`` header.

    The header is either a number of seconds or an HTTP date (RFC 9110, section 10.2.3).

    Args:
        headers: Response headers (case-insensitive mapping, as httpx gives them; a plain
            dict is looked up as ``retry-after`` and ``Retry-After``).
        now: The current Unix time for an HTTP date (default: the clock).

    Returns:
        The wait in seconds (>= 0), or None when the header is absent or unreadable.
    """
    value = (headers.get("retry-after") or headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def bearer_headers(
    api_key_env: str | None, where: str, field: str = "api_key_env", api_key: str | None = None
) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` with the key read from environment variable
    ``api_key_env`` (preferred: the key is then written nowhere) or given as ``api_key``;
    ``{}`` when neither is set (a server without a key).

    Args:
        api_key_env: Name of the variable holding the key, or None.
        where: Names the model or server in the message.
        field: The config key that named the variable (for the message), e.g.
            ``judge.api_key_env``; the literal key's field is the same with ``api_key``.
        api_key: The key itself, or None.

    Raises:
        ConfigError: The variable is named but not set (or empty), or both a variable and a
            key are given.
    """
    if api_key_env and api_key:
        literal = field.removesuffix("_env")
        raise ConfigError(
            f"{where}: both {field} and {literal} are set; keep {field} (the name of the "
            f"environment variable holding the key) and drop {literal}"
        )
    if api_key:
        return {"Authorization": f"Bearer {api_key}"}
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ConfigError(
            f"{where}: the environment variable {api_key_env} ({field}) is not "
            f"set; export it or set {field}: null for a server without a key"
        )
    return {"Authorization": f"Bearer {key}"}


class RetryableStatusError(RagExpError):
    """A reply whose status is worth another attempt (429, 5xx); raised by
    :meth:`HttpTransport.send` when the caller names ``retry_statuses``.

    Attributes:
        response: The reply.
        retry_after_s: The server's ``Retry-After`` in seconds, or None.
    """

    retryable = True

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.retry_after_s = retry_after_s(response.headers)
        super().__init__(f"HTTP {response.status_code}")


def is_retryable(exc: BaseException) -> bool:
    """True for errors another attempt may cure: a package error that says so
    (:attr:`RagExpError.retryable <rag_experiments.errors.RagExpError.retryable>`: a timeout,
    no connection, HTTP 429/5xx …) or a retryable httpx failure (:func:`retryable_transport`).

    Args:
        exc: The error raised by one attempt.

    Returns:
        Whether to retry (after a backoff).
    """
    if isinstance(exc, RagExpError):
        return exc.retryable
    if "httpx" not in sys.modules:  # no httpx error can exist before httpx is imported
        return False
    return isinstance(exc, retryable_transport())


class HttpTransport:
    """One pooled ``httpx.Client`` to one server (thread-safe, keeps connections alive).

    Args:
        base_url: Server root that relative paths are joined to (``""``: absolute URLs).
        timeout_s: Limit in seconds for connecting, and for each read or write of one request
            (a non-streamed answer arrives in one read, so this bounds the whole call).
        headers: Headers sent with every request (e.g. ``Authorization``); never logged.
        max_connections: Connection pool size (at least the number of concurrent callers).
        max_keepalive: Idle connections kept open (None = ``max_connections``).
        follow_redirects: Follow 3xx answers.
        verify: Check TLS certificates (True), skip the check (False), or an ``ssl`` context
            (an internal CA).
        trust_env: Read ``HTTP(S)_PROXY`` / ``.netrc`` from the environment. False sends
            requests to the named server only (a proxy is another machine).
    """

    def __init__(
        self,
        base_url: str = "",
        *,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        max_connections: int = 64,
        max_keepalive: int | None = None,
        follow_redirects: bool = False,
        verify: bool | ssl.SSLContext = True,
        trust_env: bool = False,
    ) -> None:
        import httpx  # on first use: see retryable_transport

        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s),
            headers=dict(headers or {}),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=(
                    max_connections if max_keepalive is None else max_keepalive
                ),
            ),
            follow_redirects=follow_redirects,
            verify=verify,
            trust_env=trust_env,
        )

    def send(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
        retry_statuses: frozenset[int] = frozenset(),
    ) -> httpx.Response:
        """Send one request (one attempt, no retry).

        Args:
            method: ``GET``, ``POST`` or ``PUT``.
            url: A path under ``base_url`` or an absolute URL.
            json: JSON body (None = no body).
            params: Query parameters.
            timeout_s: Limit of this request (None = the transport's ``timeout_s``).
            retry_statuses: Statuses raised as :class:`RetryableStatusError` (for a
                :class:`RetryPolicy` to retry); any other status is returned.

        Returns:
            The reply, whatever its status outside ``retry_statuses``.

        Raises:
            RetryableStatusError: The status is in ``retry_statuses``.
            httpx.TimeoutException: No complete answer within the limit.
            httpx.TransportError: Connection refused, reset or name not resolved.
        """
        import httpx

        limit = httpx.Timeout(self.timeout_s if timeout_s is None else timeout_s)
        reply = self._client.request(method, url, json=json, params=params, timeout=limit)
        if reply.status_code in retry_statuses:
            raise RetryableStatusError(reply)
        return reply

    def close(self) -> None:
        """Close the pooled connections."""
        self._client.close()


@dataclass(frozen=True)
class RetryPolicy:
    """How long one attempt of a call may take, how often it is retried and how long to wait.

    The settings object every HTTP client takes as ``retry`` (chat models, embedders, the
    HTTP target): built once from the config (:func:`nest_retry`), and its defaults here are
    the only declaration of them (the schemas in :mod:`rag_experiments.config.schema` read
    them from this class).

    Attempt ``n`` (1-based) that fails with a retryable error (:func:`is_retryable`: timeout,
    no connection, HTTP 429/5xx) is followed, after a
    wait, by attempt ``n + 1``, up to ``max_retries + 1`` attempts; any other error is raised
    at once, and so is the last attempt's error. The wait after attempt ``n``:

    - ``jitter=True`` ("full jitter", Brooker 2015, *Exponential Backoff And Jitter*, AWS
      Architecture Blog; tenacity's ``wait_random_exponential``): drawn uniformly from
      ``[0, min(backoff_max_s, backoff_s * 2**(n-1))]``;
    - ``jitter=False`` (tenacity's ``wait_exponential``):
      ``min(backoff_max_s, backoff_s * 2**(n-1))``;
    - either way, after an error carrying the server's ``Retry-After`` (``retry_after_s``: a
      :class:`RetryableStatusError`, a model client's ``LLMHTTPError``), at least that many
      seconds, capped at ``backoff_max_s``.

    So one call takes at most ``(max_retries + 1) * timeout_s`` plus the waits, and the waits
    without ``Retry-After`` add up to at most :meth:`max_total_wait_s`.

    Attributes:
        max_retries: Extra attempts after the first (0 = no retry).
        backoff_s: Scale of the first wait in seconds.
        backoff_max_s: Cap of any single wait in seconds.
        jitter: Draw each wait at random below its exponential bound.
        timeout_s: Limit of one attempt in seconds (> 0); the client applies it to its
            transport (this class only carries it).

    Raises:
        ConfigError: A negative setting, or ``timeout_s`` <= 0.
    """

    max_retries: int = 2
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    jitter: bool = True
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise ConfigError(
                f"backoff_s and backoff_max_s must be >= 0, got {self.backoff_s}, "
                f"{self.backoff_max_s}"
            )
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout_s must be > 0 seconds, got {self.timeout_s}")

    def max_total_wait_s(self) -> float:
        """Upper bound of the summed backoff waits of one call (no ``Retry-After``), in s."""
        return sum(min(self.backoff_max_s, self.backoff_s * 2**k) for k in range(self.max_retries))

    def call(
        self,
        fn: Callable[[], T],
        what: str = "call",
        *,
        on_attempt: Callable[[], None] | None = None,
        describe: Callable[[BaseException | None], str] = str,
    ) -> T:
        """Run ``fn`` with retries.

        Args:
            fn: One attempt.
            what: Names the call in the retry log lines
                (``"<what>: attempt 1/3 failed (<error>); retrying in 0.50 s"``).
            on_attempt: Called before each attempt (e.g. to count them).
            describe: Renders a failed attempt's error for the log line (e.g. to hide
                secrets).

        Returns:
            ``fn()``'s result from the first attempt that succeeded.

        Raises:
            Exception: The last attempt's error, or the first one that is not retryable.
        """
        # The first attempt runs without tenacity: building its Retrying and stepping its state
        # machine cost more client CPU than a whole request to a local judge server (issue 25).
        # Only a retryable failure enters the retry loop, which replays that failure as its
        # first attempt (same numbering, log lines, waits and on_attempt count).
        if on_attempt is not None:
            on_attempt()
        try:
            return fn()
        except Exception as exc:
            if self.max_retries == 0 or not is_retryable(exc):
                raise
            first: list[Exception] = [exc]

        def attempt() -> T:
            if first:
                raise first.pop()
            return fn()

        if self.jitter:
            backoff = wait_random_exponential(multiplier=self.backoff_s, max=self.backoff_max_s)
        else:
            backoff = wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s)

        def wait(state: RetryCallState) -> float:
            base = float(backoff(state))
            exc = state.outcome.exception() if state.outcome else None
            # RetryableStatusError (httpx clients) and LLMHTTPError (the model clients) both
            # carry the server's Retry-After: the refused call waits at least that long
            after = getattr(exc, "retry_after_s", None)
            if after is not None:
                return min(max(base, float(after)), self.backoff_max_s)
            return base

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.2f s",
                what,
                state.attempt_number,
                self.max_retries + 1,
                describe(exc),
                state.next_action.sleep if state.next_action else 0.0,
            )

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=wait,
            retry=retry_if_exception(is_retryable),
            before=(
                (lambda state: on_attempt() if state.attempt_number > 1 else None)
                if on_attempt is not None
                else before_nothing
            ),
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(attempt)


DEFAULT_RETRY = RetryPolicy()
"""The policy of a client built without one (the defaults of :class:`RetryPolicy`)."""

TARGET_RETRY = RetryPolicy(timeout_s=60.0, jitter=False)
"""The HTTP target's call settings unless configured: a RAG endpoint answers within a minute,
and its waits are not jittered (one client, so no herd to spread); the config schema
(``HttpTargetConf``) takes its defaults from here."""


class TakesRetry:
    """Declares that a client class takes its call settings as one ``retry``
    (:class:`RetryPolicy`) argument, so :func:`nest_retry` folds the flat keys of its config
    node (``timeout_s``, ``max_retries``/``retries``, ``backoff_s``, ``backoff_max_s``) into
    it. A class without this base (a user's own target or model) receives its node's keys as
    they are written."""


RETRY_FIELDS = ("timeout_s", "backoff_s", "backoff_max_s")
"""Flat config keys of a client node that go into its :class:`RetryPolicy` under their own
name (the retry count's key is passed to :func:`nest_retry`)."""


def nest_retry(
    fields: Mapping[str, Any],
    *,
    retries_key: str = "max_retries",
    jitter: bool = True,
    where: str = "",
) -> dict[str, Any]:
    """A client's config node with its flat call settings moved into one ``retry`` node.

    Users keep writing ``llm.timeout_s``, ``llm.max_retries``, ``target.retries`` …; the
    client's constructor takes one :class:`RetryPolicy` as ``retry``. Keys the node does not
    hold take the policy's defaults.

    Args:
        fields: The node (a plain mapping, interpolations resolved), e.g. ``{"_target_": …,
            "model": "m", "timeout_s": 30, "max_retries": 0}``.
        retries_key: The node's key of the retry count (``max_retries``; ``retries`` for the
            HTTP target).
        jitter: The policy's :attr:`RetryPolicy.jitter`.
        where: The node's config key (``llm``, ``judge``, ``target``): a refused setting's
            error names the user's key (``target.retries``), not the policy's field.

    Returns:
        A new dict. A node holding none of those keys (a fake model, a local embedder) comes
        back as it is; any other without them, plus ``retry``, a node Hydra instantiates
        into a :class:`RetryPolicy` (``_target_`` names the class), e.g. ``{"_target_": …,
        "model": "m", "retry": {"_target_": "…RetryPolicy", "timeout_s": 30,
        "max_retries": 0, "jitter": True}}``.
    """
    rest = dict(fields)
    if not any(key in rest for key in (*RETRY_FIELDS, retries_key)):
        return rest
    if not _takes_retry(rest.get("_target_")):
        return rest
    retry: dict[str, Any] = {
        "_target_": f"{RetryPolicy.__module__}.{RetryPolicy.__qualname__}",
        "jitter": jitter,
    }
    for key in RETRY_FIELDS:
        if key in rest:
            retry[key] = rest.pop(key)
    if retries_key in rest:
        retry["max_retries"] = rest.pop(retries_key)
    try:
        RetryPolicy(**{k: v for k, v in retry.items() if k != "_target_"})
    except (ConfigError, TypeError) as exc:
        prefix = f"{where}." if where else ""
        message = re.sub(
            r"\b(timeout_s|backoff_s|backoff_max_s|max_retries)\b",
            lambda m: prefix + (retries_key if m[1] == "max_retries" else m[1]),
            str(exc),
        )
        raise ConfigError(message) from exc
    rest["retry"] = retry
    return rest


def _takes_retry(target: Any) -> bool:
    """Whether the class a ``_target_`` names declares :class:`TakesRetry` (False when it
    cannot be imported: instantiation then reports that in its own words)."""
    from hydra.utils import get_class  # what instantiate will use to find the class

    if not isinstance(target, str):
        return False
    try:
        return issubclass(get_class(target), TakesRetry)
    except (ImportError, ValueError):
        return False
