"""Evaluate any RAG service over HTTP: send each question with a body template, map the JSON
answer with JMESPath, survive a flaky service.

One question = one request (``method`` to ``url``, JSON body rendered from ``body`` by
:class:`~rag_experiments.targets.request_template.RequestTemplate`, headers with ``{env:NAME}``
tokens), answered by a mapped :class:`~rag_experiments.records.RagResponse`
(:class:`~rag_experiments.targets.response_mapping.ResponseMapping`).

**Failures never raise.** Each comes back as ``RagResponse(error=<reason>, error_message=…)``
and the run goes on (the runner fails the run only above ``max_failure_rate``, after logging):

============================  ================================================================
reason                        when
============================  ================================================================
``timeout``                   no connection or no response byte within ``timeout_s``
``connection_refused``        nothing listens on the port
``connection_error``          any other transport failure (name lookup, connection dropped
                              before a response, reset)
``http_<status>``             a non-2xx status (``http_500``); the message holds a body snippet
``non_json``                  a 2xx body that is not JSON (an HTML error page)
``mapping_empty``             a required field's expression found nothing
``mapping_invalid``           a mapped value has the wrong shape
============================  ================================================================

**Retries** (the shared :class:`~rag_experiments.common.http.RetryPolicy`, no jitter):
timeouts, connection errors and the statuses in ``retry_statuses`` (default 429, 500, 502, 503,
504) are retried ``retries`` times with exponential backoff (``backoff_s``, doubling, at most
``backoff_max_s``; a ``Retry-After`` header is honoured up to that maximum). Other statuses,
non-JSON bodies and mapping errors are not retried: the same request would fail the same way.

**Latency** (``latency_ms``) is the wall time of the whole answer, retries and backoff included,
measured in the worker that sends it (queueing for a worker is not counted). It is recorded on
failed rows too; the run's ``latency_ms_p50``/``p95`` are over successful rows (runner).

**Concurrency**: the target declares ``max_concurrency``; the runner answers that many
questions at once (unless the run's ``max_concurrency`` says otherwise), each with
:meth:`HttpTarget.answer` from its own thread (one shared ``httpx.Client``, which is
thread-safe), and checkpoints every answer as it arrives.

**Document ids** for doc-level retrieval metrics, in order of preference: the endpoint's
``doc_ids`` (or per-context ``context_doc_id``) when mapped and present; else, when
``doc_ids_from_text`` is on and the dataset has a corpus, each context is matched to the corpus
document that contains it (:class:`~rag_experiments.targets.doc_matcher.CorpusDocMatcher`,
rule in :mod:`rag_experiments.targets.doc_matcher`); else None (doc-level metrics are NaN with
``no_doc_ids``). ``metadata["doc_ids_source"]`` says which (``endpoint``/``text_match``).

**Secrets**: header values from ``{env:NAME}`` never appear in logs, error messages or
:meth:`HttpTarget.describe` (see :mod:`rag_experiments.targets.request_template`).
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from rag_experiments.common.http import (
    TARGET_RETRY,
    HttpTransport,
    RetryableStatusError,
    RetryPolicy,
    TakesRetry,
    bearer_headers,
)
from rag_experiments.common.redact import public_url
from rag_experiments.errors import ConfigError, TargetError
from rag_experiments.protocols import TargetBase
from rag_experiments.records import RagResponse, Sample
from rag_experiments.targets.doc_matcher import CorpusDocMatcher
from rag_experiments.targets.request_template import RequestTemplate
from rag_experiments.targets.response_mapping import ResponseMapping

if TYPE_CHECKING:
    from rag_experiments.data.base import EvalDataset

log = logging.getLogger(__name__)

DEFAULT_BODY: dict[str, str] = {"question": "{user_input}"}
"""The default request body: the seed tool's ``POST /ask``."""

SNIPPET_CHARS = 200
"""How much of a response body an error message quotes."""

_METHODS = ("POST", "GET", "PUT")


PROBE_TIMEOUT_S = 5.0
"""Longest wait, in seconds, of each attempt of the reachability check of a target without
``health_url`` (``timeout_s`` when shorter)."""


class HttpStatusError(TargetError):
    """A reply that cannot be used (non-2xx, or not JSON); ``status`` is its HTTP status."""

    def __init__(self, reason: str, message: str, status: int) -> None:
        self.status = status
        super().__init__(reason, message)


def _snippet(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


class HttpTarget(TargetBase, TakesRetry):
    """A RAG system behind an HTTP JSON API (see the module docstring).

    Args:
        url: Endpoint, ``http://`` or ``https://`` (e.g. ``http://127.0.0.1:8000/ask``).
        method: ``POST`` (JSON body), ``PUT`` (JSON body) or ``GET`` (the body template, a
            flat object, is sent as query parameters).
        headers: Extra headers; values may hold ``{env:NAME}``.
        body: Request body template (placeholders ``{user_input}``, ``{id}``,
            ``{question_type}``), as a structure or a JSON string; None =
            ``{"question": "{user_input}"}``.
        response: The JMESPath mapping: a :class:`ResponseMapping` or its keyword arguments.
        retry: ``timeout_s`` (seconds allowed to connect and for each read, httpx
            semantics), ``max_retries`` (extra attempts after a retryable failure; the
            config's ``target.retries``), ``backoff_s`` (first wait, doubling) and
            ``backoff_max_s`` (longest wait, >= ``backoff_s``)
            (:class:`~rag_experiments.common.http.RetryPolicy`); :data:`TARGET_RETRY` by
            default.
        retry_statuses: HTTP statuses that are retried.
        max_concurrency: Questions the runner sends at once (>= 1).
        health_url: If set, ``check`` GETs it (with the same retries) and fails fast unless
            it answers 2xx; if not, ``check`` sends ``HEAD url`` and fails fast only when no
            connection can be made (see :meth:`check`).
        doc_ids_from_text: Match contexts to corpus documents by text when the endpoint gives
            no document ids.
        doc_min_overlap: ``min_overlap`` of that match (share of a context's words).
        verify_tls: Check the server's TLS certificate (https).
        ca_bundle: Path of a PEM bundle of extra CAs to trust (an internal CA); None = system.
        api_key_env: Environment variable holding a key sent as ``Authorization: Bearer``
            (prefer it: the key is then written nowhere), or None.
        api_key: The key itself; not both, and not with an ``Authorization`` header.

    Raises:
        ConfigError: A bad URL, method, number, body placeholder, header placeholder, unset
            environment variable or JMESPath expression.
    """

    def __init__(
        self,
        url: str,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        response: ResponseMapping | Mapping[str, Any] | None = None,
        retry: RetryPolicy = TARGET_RETRY,
        retry_statuses: Sequence[int] = (429, 500, 502, 503, 504),
        max_concurrency: int = 4,
        health_url: str | None = None,
        doc_ids_from_text: bool = True,
        doc_min_overlap: float = 0.7,
        verify_tls: bool = True,
        ca_bundle: str | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
    ) -> None:
        bearer = bearer_headers(api_key_env, "target", "target.api_key_env", api_key=api_key)
        if bearer and any(str(k).lower() == "authorization" for k in (headers or {})):
            raise ConfigError(
                "target: both target.headers.Authorization and target.api_key(_env) are set; "
                "keep one"
            )
        headers = {**(headers or {}), **bearer}
        for name, value in (("url", url), ("health_url", health_url)):
            if value is not None and urlsplit(str(value)).scheme not in ("http", "https"):
                raise ConfigError(
                    f"target.{name} must start with http:// or https://, got "
                    f"{public_url(str(value))!r}"
                )
        self.method = str(method).upper()
        if self.method not in _METHODS:
            raise ConfigError(f"target.method must be one of {list(_METHODS)}, got {method!r}")
        checks = (
            (
                "backoff_max_s",
                retry.backoff_max_s,
                retry.backoff_max_s >= retry.backoff_s,
                ">= backoff_s",
            ),
            ("max_concurrency", max_concurrency, max_concurrency >= 1, ">= 1"),
        )
        for name, value, ok, rule in checks:
            if not ok:
                raise ConfigError(f"target.{name} must be {rule}, got {value}")
        self.url = str(url)
        self.health_url = health_url
        if isinstance(body, str):
            try:
                body = json.loads(body)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"target.body is a string but not JSON ({exc}); give a JSON object such as "
                    '\'{"question": "{user_input}"}\''
                ) from None
        self.template = RequestTemplate(DEFAULT_BODY if body is None else body, headers)
        if self.method == "GET" and not (
            isinstance(self.template.body, Mapping)
            and all(not isinstance(v, (Mapping, list, tuple)) for v in self.template.body.values())
        ):
            raise ConfigError("target.body must be a flat object for method GET (query parameters)")
        if isinstance(response, ResponseMapping):
            self.mapping = response
        else:
            self.mapping = ResponseMapping(**dict(response or {}))
        self.timeout_s = float(retry.timeout_s)
        self.retries = int(retry.max_retries)
        self.backoff_s = float(retry.backoff_s)
        self.backoff_max_s = float(retry.backoff_max_s)
        self.retry_statuses = frozenset(int(s) for s in retry_statuses)
        self.max_concurrency = int(max_concurrency)
        self.doc_ids_from_text = bool(doc_ids_from_text)
        self.doc_min_overlap = float(doc_min_overlap)
        self.matcher: CorpusDocMatcher | None = None
        self._healthy = False
        verify: bool | ssl.SSLContext = bool(verify_tls)
        if verify_tls and ca_bundle:
            verify = ssl.create_default_context(cafile=ca_bundle)
        self._http = HttpTransport(
            timeout_s=self.timeout_s,
            headers=self.template.headers,
            max_connections=max(10, self.max_concurrency),
            max_keepalive=self.max_concurrency,
            follow_redirects=True,
            verify=verify,
            trust_env=True,
        )
        self._retry = retry

    # --- Target protocol --------------------------------------------------------------------
    def check(self) -> None:
        """GET ``health_url`` when one is set (with the configured retries) and require 2xx;
        without one, probe ``url`` itself: one ``HEAD`` request (with the configured retries,
        each within ``min(timeout_s, 5)`` s) must reach the service. Any HTTP reply passes (a
        405 or 404 to ``HEAD`` still shows a listening server; the questions' own statuses are
        row errors), and so does a connection that is accepted but not answered in time; only
        a connection that cannot be made (refused, name not resolved, connect timeout) fails.
        No question is sent, so none is answered (or paid for) twice.

        Raises:
            TargetError: ``endpoint_unavailable``; the message names the URL and the fix.
        """
        if self._healthy:
            return
        if self.health_url:
            self._check_health(self.health_url)
        else:
            self._probe(self.url)
        self._healthy = True

    def prepare(self, dataset: EvalDataset) -> None:
        """Check the endpoint (:meth:`check`, unless it already passed) and get the corpus
        matcher ready.

        Raises:
            TargetError: ``health_url`` does not answer 2xx, or ``url`` cannot be reached.
        """
        log.info(
            "HTTP target: %s %s, headers %s, timeout %.1f s, %d retries, max_concurrency %d",
            self.method,
            public_url(self.url),
            self.template.public_headers(),
            self.timeout_s,
            self.retries,
            self.max_concurrency,
        )
        self.check()
        self.matcher = None
        if self.doc_ids_from_text and dataset.corpus:
            self.matcher = CorpusDocMatcher(dataset.corpus, self.doc_min_overlap)
            log.info(
                "HTTP target: contexts without endpoint doc ids are matched by text to %d corpus "
                "documents (min_overlap %.2f)",
                len(dataset.corpus),
                self.doc_min_overlap,
            )
        elif self.mapping.exprs["doc_ids"] is None and self.mapping.exprs["context_doc_id"] is None:
            log.warning(
                "HTTP target: no doc ids mapped and no corpus to match contexts to; doc-level "
                "retrieval metrics will be NaN (no_doc_ids). Set dataset.corpus or map "
                "target.response.doc_ids"
            )

    def answer(self, sample: Sample) -> RagResponse:
        """Send one question and map the answer. Never raises for a failed request.

        Args:
            sample: The question.

        Returns:
            The mapped response, or ``RagResponse(error=<reason>, error_message=…)`` (reasons in
            the module docstring); ``latency_ms`` is set either way.
        """
        started = time.perf_counter()
        attempts = [0]
        try:
            reply = self._send(sample, attempts)
            resp = self._to_response(reply, attempts[0])
        except TargetError as exc:
            resp = RagResponse(error=exc.reason, error_message=self.template.scrub(str(exc)))
            if isinstance(exc, HttpStatusError):
                resp.metadata["http_status"] = exc.status
        resp.metadata["attempts"] = attempts[0]
        resp.latency_ms = (time.perf_counter() - started) * 1000.0
        return resp

    def describe(self) -> dict[str, str]:
        """Tags: URL, method, headers (secrets redacted), body template, mapping, limits and
        where doc ids come from."""
        if self.mapping.exprs["doc_ids"] or self.mapping.exprs["context_doc_id"]:
            doc_ids = "endpoint"
        else:
            doc_ids = ""
        if self.doc_ids_from_text:
            match = f"text_match(min_overlap={self.doc_min_overlap:g})"
            doc_ids = f"{doc_ids}, else {match}" if doc_ids else match
        return {
            "target": "http",
            "http.url": public_url(self.url),
            "http.method": self.method,
            "http.headers": json.dumps(self.template.public_headers(), ensure_ascii=False),
            "http.body": json.dumps(self.template.body, ensure_ascii=False, default=str),
            "http.response": json.dumps(self.mapping.describe(), ensure_ascii=False),
            "http.timeout_s": f"{self.timeout_s:g}",
            "http.retries": str(self.retries),
            "http.max_concurrency": str(self.max_concurrency),
            "http.doc_ids": doc_ids or "none",
        }

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # --- internals --------------------------------------------------------------------------
    def _with_retries(
        self, what: str, attempts: list[int], fn: Callable[[], httpx.Response]
    ) -> httpx.Response:
        """``fn()`` under the retry policy; ``attempts[0]`` counts the attempts made."""

        def count() -> None:
            attempts[0] += 1

        return self._retry.call(
            fn,
            what,
            on_attempt=count,
            describe=lambda exc: self.template.scrub(_describe_exc(exc)),
        )

    def _request(self, sample: Sample) -> httpx.Response:
        body = self.template.render(sample)
        if self.method == "GET":
            return self._http.send("GET", self.url, params=body, retry_statuses=self.retry_statuses)
        return self._http.send(self.method, self.url, json=body, retry_statuses=self.retry_statuses)

    def _send(self, sample: Sample, attempts: list[int]) -> httpx.Response:
        """The request with retries; transport errors become :class:`TargetError`."""
        where = f"{self.method} {public_url(self.url)}"
        try:
            return self._with_retries(
                f"question {sample.id}: {where}", attempts, lambda: self._request(sample)
            )
        except RetryableStatusError as exc:
            raise self._status_error(exc.response, attempts[0]) from None
        except httpx.TimeoutException as exc:
            raise TargetError(
                "timeout",
                f"{where}: no response within timeout_s={self.timeout_s:g} "
                f"({type(exc).__name__}) after {attempts[0]} attempt(s)",
            ) from None
        except httpx.ConnectError as exc:
            refused = "refused" in str(exc).lower()
            raise TargetError(
                "connection_refused" if refused else "connection_error",
                f"{where}: cannot connect ({exc}) after {attempts[0]} attempt(s); is the "
                "service running at that address?",
            ) from None
        except httpx.HTTPError as exc:
            raise TargetError(
                "connection_error",
                f"{where}: {type(exc).__name__}: {exc or 'connection failed'} after "
                f"{attempts[0]} attempt(s)",
            ) from None

    def _status_error(self, reply: httpx.Response, attempts: int) -> HttpStatusError:
        return HttpStatusError(
            f"http_{reply.status_code}",
            f"{self.method} {public_url(self.url)}: HTTP {reply.status_code} "
            f"{reply.reason_phrase} after {attempts} attempt(s); body: {_snippet(reply.text)!r}",
            reply.status_code,
        )

    def _to_response(self, reply: httpx.Response, attempts: int) -> RagResponse:
        if not reply.is_success:
            raise self._status_error(reply, attempts)
        try:
            payload = reply.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            kind = reply.headers.get("content-type", "no content-type")
            raise HttpStatusError(
                "non_json",
                f"{self.method} {public_url(self.url)}: HTTP {reply.status_code} ({kind}) is not "
                f"JSON: {_snippet(reply.text)!r}",
                reply.status_code,
            ) from None
        mapped = self.mapping.apply(payload)
        doc_ids, source = mapped.doc_ids, "endpoint"
        if doc_ids is None and self.matcher is not None:
            doc_ids, source = self.matcher.rank(mapped.contexts), "text_match"
        resp = RagResponse(
            response=mapped.answer,
            retrieved_contexts=mapped.contexts,
            retrieved_ids=mapped.context_ids,
            retrieved_doc_ids=doc_ids,
            citations=mapped.citations,
        )
        resp.metadata.update(http_status=reply.status_code)
        if doc_ids is not None:
            resp.metadata["doc_ids_source"] = source
        return resp

    def _check_health(self, url: str) -> None:
        attempts = [0]
        where = f"GET {public_url(url)}"

        def get() -> httpx.Response:
            return self._http.send("GET", url, retry_statuses=self.retry_statuses)

        try:
            reply = self._with_retries(f"health check {where}", attempts, get)
        except (httpx.HTTPError, RetryableStatusError) as exc:
            raise TargetError(
                "endpoint_unavailable",
                self.template.scrub(
                    f"health check {where} failed after {attempts[0]} attempt(s): "
                    f"{_describe_exc(exc)}; start the service or fix target.health_url"
                ),
            ) from None
        if not reply.is_success:
            raise TargetError(
                "endpoint_unavailable",
                f"health check {where}: HTTP {reply.status_code}; start the service or fix "
                "target.health_url",
            )
        log.info("HTTP target: health check %s: HTTP %d", where, reply.status_code)

    def _probe(self, url: str) -> None:
        """``HEAD url``: fail unless a connection to the service can be made (see :meth:`check`).

        Any reply passes, and so does a connection that is reset or silent after it was
        accepted. A HEAD asks no question of a RAG endpoint that routes only POST; a framework
        that answers HEAD on a GET route (Flask, Starlette) runs that route's view once.
        """
        attempts = [0]
        where = f"HEAD {public_url(url)}"
        limit = min(self.timeout_s, PROBE_TIMEOUT_S)

        def head() -> httpx.Response | None:
            try:
                return self._http.send("HEAD", url, timeout_s=limit)
            except (
                httpx.ReadError,
                httpx.ReadTimeout,
                httpx.WriteTimeout,
                httpx.RemoteProtocolError,
            ):
                return None  # connected (then reset, silent or garbled): something listens there

        try:
            reply = self._with_retries(f"reachability check {where}", attempts, head)
        except httpx.HTTPError as exc:
            raise TargetError(
                "endpoint_unavailable",
                self.template.scrub(
                    f"target.url {public_url(url)} cannot be reached ({_describe_exc(exc)}, "
                    f"{attempts[0]} attempt(s)); start the service, fix target.url, or set "
                    "target.health_url to its health endpoint"
                ),
            ) from None
        # Any reply passes (a POST-only endpoint answers HEAD with 405): said so, so that a
        # 4xx/5xx status here does not read as an error.
        got = "connected, no reply in time" if reply is None else f"HTTP {reply.status_code}"
        log.info(
            "HTTP target: %s is reachable (%s: %s; any reply counts, the probe asks no question)",
            public_url(url),
            where,
            got,
        )


def _describe_exc(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown error"
    if isinstance(exc, RetryableStatusError):
        return f"HTTP {exc.response.status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
