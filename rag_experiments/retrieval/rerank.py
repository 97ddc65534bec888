"""Rerankers: re-score the first ``candidates`` hits of a retriever's ranking for a question.

- :class:`HttpReranker` (``reranker=http``): a cross-encoder served over HTTP behind the rerank
  API that these servers share (each shape read from the server's own code):

  ===============================  ================================  =============================
  server                           endpoint                          answer
  ===============================  ================================  =============================
  llama.cpp ``llama-server         ``POST /v1/rerank`` (also         ``{"results": [{"index",
  --reranking``                    ``/rerank``, ``/v1/reranking``)   "relevance_score"}]}``, best
                                   ``{model, query, documents,       first, cut to ``top_n``
                                   top_n}``
  vLLM (a cross-encoder or         ``POST /v1/rerank`` (also         ``{"results": [{"index",
  ``--task score`` model)          ``/rerank``, ``/v2/rerank``),     "document", "relevance_score"}
                                   ``top_n`` 0 or absent = all       ]}``
  Infinity                         ``POST /rerank``, ``top_n`` > 0   ``{"object": "rerank",
                                   or absent                         "results": [{"relevance_score",
                                                                     "index"}]}``
  Hugging Face TEI                 ``POST /rerank`` ``{query,        ``[{"index", "score"}]``, best
                                   texts}`` (no model, no top_n)     first (``http_tei.yaml``)
  ===============================  ================================  =============================

  The request's field names (:class:`RerankRequestFields`) and the JMESPath expressions that
  find the scores in the answer (:class:`RerankResponseMapping`) are configurable, so any
  other server with a rerank-like API fits too. The result list may come in any order: each
  score is put back at its item's ``index``.
- :class:`FakeReranker` (``reranker=fake``): the share of the question's words a document
  holds (:func:`word_overlap`), for tests and dry runs.

**Calls.** One request per question (``batch_size`` documents per request when set), bounded
and retried as every other HTTP call of the package: the shared
:class:`~rag_experiments.common.http.HttpTransport` and
:class:`~rag_experiments.common.http.RetryPolicy` (``timeout_s``, ``max_retries``,
``backoff_s``, ``backoff_max_s``; timeouts, lost connections, HTTP 429 and 5xx are retried) and
an :class:`~rag_experiments.llm.gate.EndpointGate` (at most ``max_concurrency`` requests at
once; a request refused with 429/503 retried after its ``Retry-After``; a breaker that fails
calls at once when the server is gone). Failures raise the model layer's
typed errors (:mod:`rag_experiments.llm.errors`: reason ``timeout``, ``unreachable``,
``http_error``), :class:`RerankResponseError` or :class:`RerankBadBodyError` (a body that is
not JSON; both ``bad_response``); a caller turns one into
that question's row error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from rag_experiments.common.http import (
    DEFAULT_RETRY,
    HttpTransport,
    RetryPolicy,
    TakesRetry,
    bearer_headers,
    retry_after_s,
)
from rag_experiments.common.jsonpath import compile_expression, peek
from rag_experiments.common.redact import public_url
from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.base import Completion
from rag_experiments.llm.cache import ResponseCache, cache_in_use
from rag_experiments.llm.errors import (
    LLMBadBodyError,
    LLMConnectionDroppedError,
    LLMHTTPError,
    LLMTimeoutError,
    LLMUnreachableError,
)
from rag_experiments.llm.gate import EndpointGate
from rag_experiments.llm.transport import CHECK_TIMEOUT_S
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.retrieval.base import RerankerBase

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+")

CHECK_TEXT = "preflight check"
"""The query and the one document of the request :meth:`HttpReranker.check` sends."""

STATUS_HINTS: dict[int, str] = {
    401: "the server wants a key: set reranker.api_key_env",
    403: "the key is refused: check reranker.api_key_env",
    404: (
        "is reranker.url the rerank endpoint (/v1/rerank for llama.cpp and vLLM, /rerank for "
        "TEI and Infinity) and reranker.model a model the server has?"
    ),
    413: "too many documents in one request: lower reranker.batch_size (TEI allows 32)",
    422: (
        "the server refused the request's shape: check reranker.request.* against its API "
        "(TEI: reranker=http_tei), or lower reranker.batch_size"
    ),
    501: "the server does not rerank: start llama-server with --reranking",
}
"""The fix a failed status suggests, appended to the error message."""


def words(text: str) -> set[str]:
    """The distinct lower-cased word tokens (``\\w+``) of ``text``."""
    return set(_WORD.findall(text.lower()))


def word_overlap(query: str, document: str) -> float:
    """The share of the query's distinct words that the document holds.

    ``|words(query) ∩ words(document)| / |words(query)|`` with :func:`words` (lower-cased
    ``\\w+`` tokens); a query without words scores 0.0 against every document.

    Args:
        query: The question.
        document: One candidate text.

    Returns:
        A float in [0, 1].
    """
    q = words(query)
    if not q:
        return 0.0
    return len(q & words(document)) / len(q)


class RerankResponseError(LLMError):
    """The rerank server's answer does not fit ``reranker.response`` (reason
    ``bad_response``; not retried: the same request would get the same answer)."""

    reason = "bad_response"


class RerankBadBodyError(LLMBadBodyError):
    """A success status whose body is not JSON: reason ``bad_response`` as any answer that
    does not fit ``reranker.response`` (retried like the model clients' garbled bodies: a
    server under load may cut one)."""

    reason = "bad_response"


@dataclass(frozen=True)
class RerankRequestFields:
    """The JSON field names of a rerank request (null = the field is not sent).

    Attributes:
        query: Field of the question.
        documents: Field of the list of document texts (``texts`` for TEI).
        model: Field of ``reranker.model`` (sent only when a model is set).
        top_n: Field of ``reranker.top_n`` (sent only when set).
        extra: More fields sent as they are (``{"truncate": true}`` for TEI,
            ``{"truncate_prompt_tokens": 512}`` for vLLM).

    Raises:
        ConfigError: ``query`` or ``documents`` is empty, or a field of ``extra`` is one of
            the named fields.
    """

    query: str = "query"
    documents: str = "documents"
    model: str | None = "model"
    top_n: str | None = "top_n"
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.query or not self.documents:
            raise ConfigError(
                "reranker.request.query and reranker.request.documents must name the JSON "
                f"fields of the question and the documents, got {self.query!r}, {self.documents!r}"
            )
        named = {self.query, self.documents, self.model, self.top_n}
        clash = sorted(k for k in self.extra if k in named)
        if clash:
            raise ConfigError(
                f"reranker.request.extra sets {clash}, which the reranker fills itself; drop "
                "them from extra"
            )

    def body(
        self, query: str, documents: list[str], model: str | None, top_n: int | None
    ) -> dict[str, Any]:
        """The JSON body of one request: ``extra`` plus the named fields."""
        out: dict[str, Any] = {**self.extra, self.query: query, self.documents: documents}
        if model and self.model:
            out[self.model] = model
        if top_n is not None and self.top_n:
            out[self.top_n] = top_n
        return out


class RerankResponseMapping:
    """Where a rerank answer holds the scores, as JMESPath expressions (https://jmespath.org).

    Args:
        results: Expression of the list of result items, on the whole answer (``results``;
            ``@`` for TEI, whose answer is the list itself).
        index: Sub-expression of an item's document index (0-based, into the documents sent),
            on each item; null = the items are in the order of the documents sent.
        score: Sub-expression of an item's score (``relevance_score``; ``score`` for TEI).

    Raises:
        ConfigError: An expression is invalid, or ``results`` / ``score`` is empty.
    """

    def __init__(
        self, results: str = "results", index: str | None = "index", score: str = "relevance_score"
    ) -> None:
        self.exprs = {"results": results, "index": index, "score": score}
        self._results = compile_expression(results, "reranker.response.results")
        self._index = compile_expression(index, "reranker.response.index")
        self._score = compile_expression(score, "reranker.response.score")
        if self._results is None or self._score is None:
            raise ConfigError(
                "reranker.response.results and reranker.response.score must be JMESPath "
                "expressions (e.g. results and relevance_score; @ and score for TEI)"
            )

    def _bad(self, key: str, message: str) -> RerankResponseError:
        return RerankResponseError(
            f"rerank answer: {message}; fix reranker.response.{key} "
            f"(now {self.exprs[key]!r}, a JMESPath expression)"
        )

    def scores(self, payload: Any, n: int, *, partial: bool = False) -> list[float]:
        """The score of each of the ``n`` documents sent, in the order they were sent.

        Args:
            payload: The decoded JSON answer.
            n: How many documents the request held.
            partial: The server may leave documents out (``top_n`` below ``n``): each one left
                out scores ``-inf`` (after every scored one). False: every document must have a
                score.

        Returns:
            ``n`` floats (finite, or ``-inf`` for a document left out).

        Raises:
            RerankResponseError: No list at ``results``, an item without a valid index
                (an integer in ``[0, n)``, not repeated) or without a finite number at
                ``score``, or (unless ``partial``) a document without a score.
        """
        items = self._results.search(payload)
        if not isinstance(items, list):
            raise self._bad("results", f"no list of results, got {peek(payload)}")
        found: list[float | None] = [None] * n
        for position, item in enumerate(items):
            where = self._index.search(item) if self._index is not None else position
            if isinstance(where, bool) or not isinstance(where, int) or not 0 <= where < n:
                raise self._bad(
                    "index",
                    f"item {position} has index {where!r}, expected 0..{n - 1}: {peek(item)}",
                )
            if found[where] is not None:
                raise self._bad("index", f"document {where} is scored twice")
            value = self._score.search(item)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise self._bad("score", f"item {position} has score {value!r}: {peek(item)}")
            found[where] = float(value)
        missing = sum(s is None for s in found)
        if missing and not partial:
            raise self._bad(
                "results",
                f"{missing} of {n} documents got no score (a server that cuts its list to "
                "top_n: set reranker.top_n to the same value)",
            )
        return [-math.inf if s is None else s for s in found]


class HttpReranker(RerankerBase, TakesRetry):
    """A cross-encoder behind an HTTP rerank API (see the module docstring).

    Args:
        url: The rerank endpoint, ``http(s)://host:port/path`` (``…/v1/rerank``).
        model: Model name sent in the request (null = not sent: the server's only model).
        candidates: How many of the retriever's hits are re-scored (>= 1).
        top_n: Sent as ``top_n``: the server returns only its best ``top_n`` (the others
            score ``-inf`` and keep their retriever order after the scored ones); null = not
            sent (every document is scored).
        batch_size: Documents per request (null = all candidates in one request); scores of
            a cross-encoder are per (question, document) pair, so batches compare.
        max_concurrency: Requests in flight at once (the gate's limit, >= 1).
        headers: Extra headers sent with every request (never logged).
        api_key_env: Environment variable holding a key sent as ``Authorization: Bearer``
            (prefer it: the key is then written nowhere).
        api_key: The key itself; not both, and not with an ``Authorization`` header.
        request: Field names of the request (:class:`RerankRequestFields` or its keywords).
        response: Where the scores are in the answer (:class:`RerankResponseMapping` or its
            keywords).
        retry: Limit of one attempt and retries of failed ones
            (:class:`~rag_experiments.common.http.RetryPolicy`).

    Raises:
        ConfigError: A bad URL or number, an unset ``api_key_env``, a key given twice, an
            invalid expression, ``model``/``top_n`` set while its request field is null, or
            ``top_n`` with ``batch_size`` below ``candidates`` (``top_n`` would apply per
            batch).
    """

    def __init__(
        self,
        url: str,
        model: str | None = None,
        candidates: int = 20,
        top_n: int | None = None,
        batch_size: int | None = None,
        max_concurrency: int = 4,
        headers: Mapping[str, str] | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
        request: RerankRequestFields | Mapping[str, Any] | None = None,
        response: RerankResponseMapping | Mapping[str, Any] | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        if urlsplit(str(url)).scheme not in ("http", "https"):
            raise ConfigError(
                f"reranker.url must start with http:// or https://, got {public_url(str(url))!r}"
            )
        for name, value in (("candidates", candidates), ("max_concurrency", max_concurrency)):
            if int(value) < 1:
                raise ConfigError(f"reranker.{name} must be >= 1, got {value}")
        for name, value in (("top_n", top_n), ("batch_size", batch_size)):
            if value is not None and int(value) < 1:
                raise ConfigError(f"reranker.{name} must be >= 1 or null, got {value}")
        if top_n is not None and batch_size is not None and batch_size < candidates:
            raise ConfigError(
                f"reranker.top_n ({top_n}) applies to each request, and reranker.batch_size "
                f"({batch_size}) splits the {candidates} candidates into several: set top_n: null "
                "or batch_size >= candidates"
            )
        self.request = (
            request
            if isinstance(request, RerankRequestFields)
            else RerankRequestFields(**dict(request or {}))
        )
        self.mapping = (
            response
            if isinstance(response, RerankResponseMapping)
            else RerankResponseMapping(**dict(response or {}))
        )
        if model and not self.request.model:
            raise ConfigError(
                "reranker.model is set but reranker.request.model is null; set both or neither"
            )
        if top_n is not None and not self.request.top_n:
            raise ConfigError(
                "reranker.top_n is set but reranker.request.top_n is null; set both or neither"
            )
        bearer = bearer_headers(api_key_env, "reranker", "reranker.api_key_env", api_key=api_key)
        if bearer and any(str(k).lower() == "authorization" for k in (headers or {})):
            raise ConfigError(
                "reranker: both reranker.headers.Authorization and reranker.api_key(_env) are "
                "set; keep one"
            )
        self.url = str(url)
        self.model = model or None
        self.candidates = int(candidates)
        self.top_n = None if top_n is None else int(top_n)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.retry = retry
        self.where = f"reranker {public_url(self.url)}" + (f" ({self.model})" if self.model else "")
        self.gate = EndpointGate(int(max_concurrency), where=self.where)
        self._http = HttpTransport(
            timeout_s=retry.timeout_s,
            headers={**dict(headers or {}), **bearer},
            max_connections=max(10, int(max_concurrency)),
            max_keepalive=int(max_concurrency),
        )

    def __repr__(self) -> str:
        return f"HttpReranker(url={public_url(self.url)!r}, model={self.model!r})"

    def describe(self) -> dict[str, str]:
        """Tags naming the reranker (no header, no key): ``reranker``, ``reranker.url``,
        ``reranker.model``, ``reranker.candidates``, ``reranker.top_n``."""
        return {
            "reranker": "http",
            "reranker.url": public_url(self.url),
            "reranker.model": self.model or "",
            "reranker.candidates": str(self.candidates),
            "reranker.top_n": "" if self.top_n is None else str(self.top_n),
        }

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        """Score each document for the question: one request (or one per ``batch_size``
        documents), retried on timeouts, lost connections, HTTP 429 and 5xx.

        Args:
            query: The question.
            documents: The candidate texts, in the retriever's order.

        Returns:
            One score per document, same order; higher = more relevant (the server's scale:
            a probability or a raw logit). ``-inf`` for a document the server left out
            (``top_n``). An empty list for no documents (no request).

        Raises:
            LLMError: After the retries: ``timeout``, ``unreachable``, ``http_error``
                (:mod:`rag_experiments.llm.errors`; ``EndpointDownError`` when the breaker is
                open), or ``bad_response`` (:class:`RerankResponseError`).
        """
        docs = list(documents)
        step = self.batch_size or max(1, len(docs))
        scores: list[float] = []
        for start in range(0, len(docs), step):
            batch = docs[start : start + step]
            body = self.request.body(query, batch, self.model, self.top_n)
            payload = self.retry.call(
                lambda b=body: self.gate.call(lambda: self._post(b)), self.where
            )
            scores += self.mapping.scores(payload, len(batch), partial=self.top_n is not None)
        return scores

    def check(self) -> None:
        """Preflight: one rerank request of one document (no retry, at most
        :data:`~rag_experiments.llm.transport.CHECK_TIMEOUT_S` or ``timeout_s``, whichever is
        shorter) must be answered and its answer must fit ``reranker.response``. A refused
        connection fails at once.

        Raises:
            LLMUnreachableError: Nothing listens at ``reranker.url`` (the message names it and
                the fix).
            LLMTimeoutError: No answer in time.
            LLMHTTPError: An error status (404: wrong path or model; 501: llama-server without
                ``--reranking``; 401/403: the key).
            RerankResponseError: The answer does not fit ``reranker.response``.
        """
        limit = min(self.retry.timeout_s, CHECK_TIMEOUT_S)
        body = self.request.body(CHECK_TEXT, [CHECK_TEXT], self.model, self.top_n)
        payload = self._post(body, timeout_s=limit)
        self.mapping.scores(payload, 1, partial=self.top_n is not None)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _post(self, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """One request (no retry); every failure raised as a typed :class:`LLMError`."""
        limit = self.retry.timeout_s if timeout_s is None else timeout_s
        url = public_url(self.url)
        try:
            reply = self._http.send("POST", self.url, json=body, timeout_s=limit)
        except httpx.TimeoutException as exc:
            raise LLMTimeoutError(
                f"{self.where}: no answer within {limit:g} s ({type(exc).__name__}); raise "
                "reranker.timeout_s or lower reranker.candidates"
            ) from None
        except httpx.ConnectError as exc:
            raise LLMUnreachableError(
                f"reranker.url {url} cannot be reached ({type(exc).__name__}: {exc}); start the "
                "rerank server (llama-server --reranking, vllm serve, TEI, Infinity) or fix "
                "reranker.url"
            ) from None
        except httpx.TransportError as exc:
            raise LLMConnectionDroppedError(
                f"{self.where}: the connection was dropped before an answer "
                f"({type(exc).__name__}: {exc or 'no detail'}); retried; if it persists, read "
                "the server's log"
            ) from None
        if reply.status_code >= 400:
            hint = STATUS_HINTS.get(reply.status_code)
            raise LLMHTTPError(
                f"{self.where}: POST {url} failed" + (f" ({hint})" if hint else ""),
                status=reply.status_code,
                body=reply.text,
                retry_after_s=retry_after_s(reply.headers),
            )
        try:
            return reply.json()
        except ValueError:
            raise RerankBadBodyError(
                f"{self.where}: the answer is not JSON (is reranker.url a rerank endpoint?)",
                status=reply.status_code,
                body=reply.text,
            ) from None


def rerank_key(identity: Mapping[str, str], query: str, documents: Sequence[str]) -> str:
    """SHA-256 hex digest of one rerank request: the reranker's identity (``describe()``: url,
    model, candidates, top_n), the question and the documents, as canonical JSON (the document
    is tagged ``rerank`` so it can never equal a chat request's key).

    Returns:
        64 hex characters.
    """
    doc = {"rerank": {"identity": dict(identity), "query": query, "documents": list(documents)}}
    blob = json.dumps(doc, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def scores_json(scores: Sequence[float]) -> str:
    """Scores as a JSON list, ``-inf`` (a document left out under ``top_n``) as null."""
    return json.dumps([None if math.isinf(s) and s < 0 else float(s) for s in scores])


def scores_from_json(text: str) -> list[float]:
    """The inverse of :func:`scores_json` (null back to ``-inf``).

    Raises:
        ValueError: Not a JSON list of numbers and nulls.
    """
    values = json.loads(text)
    if not isinstance(values, list):
        raise ValueError("not a list")
    return [-math.inf if v is None else float(v) for v in values]


class CachedReranker(RerankerBase):
    """Wraps a reranker with the LLM response cache (``paths.llm_cache``) and the usage meter
    of role ``reranker``, as :class:`~rag_experiments.llm.cache.CachedChat` wraps a chat model:
    a rerun answers every rerank from the cache (0 requests, the same scores, so the same
    contexts) and reports its calls as ``reranker.llm_calls`` / ``reranker.llm_cache_hits``.

    The key is :func:`rerank_key` (the reranker's ``describe()`` + question + documents), so a
    changed url, model, candidates or ``top_n`` is a miss. The scores are stored as the row's
    text (:func:`scores_json`; ``provider`` ``reranker``, no tokens). Only answered requests
    are stored. ``cache.mode``: ``read_write`` looks up and stores, ``read_only`` looks up,
    ``off`` (or no cache) calls every time; a reranker that declares ``cacheable = False`` (the
    free fake) is never cached but still metered.

    Args:
        inner: The reranker.
        meter: The ``reranker`` role's usage meter.
        cache: The store, or None for no cache.
        mode: One of :data:`~rag_experiments.llm.cache.CACHE_MODES`.

    Raises:
        ConfigError: Unknown ``mode``.
    """

    def __init__(
        self,
        inner: RerankerBase,
        meter: UsageMeter,
        cache: ResponseCache | None = None,
        mode: str = "read_write",
    ) -> None:
        self.cache = cache_in_use(cache, mode, inner.cacheable)
        self.inner = inner
        self.meter = meter
        self.mode = mode
        self.candidates = int(inner.candidates)

    def __repr__(self) -> str:
        return f"CachedReranker({self.inner!r})"

    def describe(self) -> dict[str, str]:
        """The inner reranker's tags."""
        return self.inner.describe()

    def check(self) -> None:
        """The inner reranker's check."""
        self.inner.check()

    def close(self) -> None:
        """Close the inner reranker's connections (when it has any)."""
        self.inner.close()

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        """The cached scores of this request, or the inner reranker's (stored in
        ``read_write``); each call counted on the meter (a hit as a cache hit).

        Returns:
            One score per document, as the inner reranker's :meth:`rerank`.

        Raises:
            RagExpError: The inner reranker failed (counted as an error, nothing stored).
        """
        identity = self.inner.describe() if self.cache is not None else {}
        key = rerank_key(identity, query, documents)
        if self.cache is not None:
            try:
                hit = self.cache.get(key)
                if hit is not None:
                    scores = scores_from_json(hit.text)
                    if len(scores) == len(documents):
                        self.meter.record(hit)
                        return scores
            except (sqlite3.Error, ValueError, TypeError) as exc:
                log.warning("rerank cache entry unusable (%s); calling the reranker", exc)
        start = time.perf_counter()
        try:
            scores = list(self.inner.rerank(query, documents))
        except Exception:
            self.meter.record_error()
            raise
        done = Completion(
            text=scores_json(scores),
            latency_ms=(time.perf_counter() - start) * 1000.0,
            finish_reason="rerank",
            model=identity.get("reranker.model", ""),
        )
        self.meter.record(done)
        if self.cache is not None and self.mode == "read_write":
            try:
                self.cache.put(key, "reranker", done)
            except sqlite3.Error as exc:
                log.warning("cannot store in the LLM cache %s: %s", self.cache.path, exc)
        return scores


class FakeReranker(RerankerBase):
    """A deterministic reranker for tests and dry runs: each document scores the share of the
    question's words it holds (:func:`word_overlap`); no model, no request.

    Args:
        candidates: How many of the retriever's hits are re-scored (>= 1).

    Raises:
        ConfigError: ``candidates`` < 1.
    """

    cacheable = False
    """Free and deterministic: never cached (its tests count its calls), still metered."""

    def __init__(self, candidates: int = 20) -> None:
        if int(candidates) < 1:
            raise ConfigError(f"reranker.candidates must be >= 1, got {candidates}")
        self.candidates = int(candidates)

    def describe(self) -> dict[str, str]:
        """Tags naming the reranker: ``reranker`` (``fake``), ``reranker.candidates``."""
        return {"reranker": "fake", "reranker.candidates": str(self.candidates)}

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        """:func:`word_overlap` of the question with each document (floats in [0, 1])."""
        return [word_overlap(query, d) for d in documents]

    def check(self) -> None:
        """Nothing to check: the fake needs no server."""


def reranked_order(scores: Sequence[float]) -> list[int]:
    """Indices of ``scores`` from the highest score to the lowest; equal scores keep their
    original (retriever) order (a stable sort).

    Args:
        scores: One score per document, as :meth:`RerankerBase.rerank` returns them.

    Returns:
        A permutation of ``range(len(scores))``.
    """
    return sorted(range(len(scores)), key=lambda i: -scores[i])
