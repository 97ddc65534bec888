"""A verifier served by Hugging Face Text Embeddings Inference (``verifier=tei``).

TEI serves a sequence-classification model on ``POST /predict`` and a one-logit cross-encoder
(a "reranker") on ``POST /rerank``; both shapes below are read from TEI's own code
(``router/src/http/types.rs``: ``PredictRequest``, ``PredictResponse``, ``RerankRequest``,
``Rank``; ``router/src/http/server.rs``: predictions sorted best first, labels from the
model's ``id2label``):

=========  ===================================================  ===============================
route      request                                              answer
=========  ===================================================  ===============================
predict    ``{"inputs": [[premise, hypothesis], …],             ``[[{"score", "label"}, …], …]``
           "truncate": true, "raw_scores": false}``             one list per pair, best first
rerank     ``{"query": premise, "texts": [hypothesis, …],       ``[{"index", "score"}, …]``
           "truncate": true, "raw_scores": false}``             best first
=========  ===================================================  ===============================

With ``raw_scores: false`` TEI returns probabilities (softmax over the labels; a sigmoid for a
one-logit model), so ``predict`` reads the score of the "supported" label (``verifier.label``,
a name; null = detected from the labels of the first answer,
:data:`~rag_experiments.verifier.base.SUPPORTED_LABELS`) and ``rerank`` reads each text's
score. ``rerank`` pairs its ``query`` first (TEI encodes ``(query, text)``), so the premise is
sent as the query and the hypotheses as the texts: one request per premise window.

**Length.** The premise is cut into windows of ``window_words`` words sharing
``overlap_words`` (:func:`~rag_experiments.verifier.base.word_windows`; TEI has the tokenizer,
the client does not) and a pair scores the maximum over its windows; ``truncate: true`` lets
TEI cut what still does not fit. **Calls** are bounded and retried as every HTTP call of the
package (:class:`~rag_experiments.common.http.RetryPolicy`, an
:class:`~rag_experiments.llm.gate.EndpointGate`); failures raise the model layer's typed errors
(reasons ``timeout``, ``unreachable``, ``http_error``) or :class:`VerifierResponseError`
(``bad_response``), which the metric turns into that row's NaN reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from rag_experiments.common.http import (
    DEFAULT_RETRY,
    HttpTransport,
    RetryPolicy,
    TakesRetry,
    bearer_headers,
    retry_after_s,
)
from rag_experiments.common.redact import public_url
from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.errors import (
    LLMBadBodyError,
    LLMConnectionDroppedError,
    LLMHTTPError,
    LLMTimeoutError,
    LLMUnreachableError,
)
from rag_experiments.llm.gate import EndpointGate
from rag_experiments.llm.transport import CHECK_TIMEOUT_S
from rag_experiments.verifier.base import SUPPORTED_LABELS, VerifierBase, word_windows

ROUTES = ("predict", "rerank")
"""TEI routes a verifier can use."""

CHECK_PAIR = ("The sky is blue.", "The sky is blue.")
"""The one pair :meth:`TeiVerifier.check` sends."""


class VerifierResponseError(LLMError):
    """The server's answer does not have the shape of its route (reason ``bad_response``; not
    retried: the same request would get the same answer)."""

    reason = "bad_response"


class TeiVerifier(VerifierBase, TakesRetry):
    """A classification or rerank model behind TEI (see the module docstring).

    Args:
        url: The server's root (``http://127.0.0.1:8080``); the route is appended.
        route: ``predict`` (sequence classification) or ``rerank`` (one-logit cross-encoder).
        label: ``predict``: the name of the "supported" label (null = detected); unused by
            ``rerank``.
        window_words: Words of premise per window.
        overlap_words: Words shared by neighbouring windows.
        batch_size: Pairs (``predict``) or texts (``rerank``) per request; TEI refuses more
            than its ``--max-client-batch-size`` (32 by default).
        max_concurrency: Rows scored at once, and requests in flight (the gate's limit).
        truncate: Sent as ``truncate`` (TEI cuts a pair longer than the model reads).
        headers: Extra headers sent with every request (never logged).
        api_key_env: Environment variable holding a key sent as ``Authorization: Bearer``.
        api_key: The key itself; not both.
        retry: Limit of one attempt and retries
            (:class:`~rag_experiments.common.http.RetryPolicy`).

    Raises:
        ConfigError: A bad URL, route or number, or an unset ``api_key_env``.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        route: str = "predict",
        label: str | None = None,
        window_words: int = 200,
        overlap_words: int = 40,
        batch_size: int = 32,
        max_concurrency: int = 4,
        truncate: bool = True,
        headers: Mapping[str, str] | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        if urlsplit(str(url)).scheme not in ("http", "https"):
            raise ConfigError(
                f"verifier.url must start with http:// or https://, got {public_url(str(url))!r}"
            )
        if route not in ROUTES:
            raise ConfigError(f"verifier.route={route!r}: choose one of {', '.join(ROUTES)}")
        if min(int(window_words), int(batch_size), int(max_concurrency)) < 1 or not (
            0 <= int(overlap_words) < int(window_words)
        ):
            raise ConfigError(
                "verifier.window_words, batch_size and max_concurrency must be >= 1 and "
                f"0 <= overlap_words < window_words; got {window_words}, {batch_size}, "
                f"{max_concurrency}, {overlap_words}"
            )
        bearer = bearer_headers(api_key_env, "verifier", "verifier.api_key_env", api_key=api_key)
        self.url = str(url).rstrip("/")
        self.route = route
        self.label = None if label is None or str(label) == "" else str(label)
        self.window_words = int(window_words)
        self.overlap_words = int(overlap_words)
        self.batch_size = int(batch_size)
        self.max_concurrency = int(max_concurrency)
        self.truncate = bool(truncate)
        self.retry = retry
        self.where = f"verifier {public_url(self.url)}/{self.route}"
        self.gate = EndpointGate(self.max_concurrency, where=self.where)
        self._http = HttpTransport(
            timeout_s=retry.timeout_s,
            headers={**dict(headers or {}), **bearer},
            max_connections=max(10, self.max_concurrency),
            max_keepalive=self.max_concurrency,
        )

    def __repr__(self) -> str:
        return f"TeiVerifier(url={public_url(self.url)!r}, route={self.route!r})"

    @property
    def id(self) -> str:
        """``tei:<url>/<route>:<label>:<window_words>:<overlap_words>:<truncate>``."""
        return (
            f"tei:{public_url(self.url)}/{self.route}:{self.label or 'auto'}:"
            f"{self.window_words}:{self.overlap_words}:{self.truncate}"
        )

    def describe(self) -> dict[str, str]:
        """``provider`` (``tei``), ``model`` (the route's URL), ``label``, ``route``."""
        return {
            "provider": "tei",
            "model": f"{public_url(self.url)}/{self.route}",
            "route": self.route,
            "label": self.label or "auto",
        }

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(premise supports hypothesis) of each pair: the maximum over the premise's word
        windows of the server's probability.

        Returns:
            One probability in [0, 1] per pair, same order; ``[]`` for no pairs.

        Raises:
            LLMError: After the retries: ``timeout``, ``unreachable``, ``http_error``, or
                ``bad_response`` (:class:`VerifierResponseError`).
        """
        flat: list[tuple[str, str]] = []
        owner: list[int] = []
        for i, (premise, hypothesis) in enumerate(pairs):
            for window in word_windows(premise, self.window_words, self.overlap_words):
                flat.append((window, hypothesis))
                owner.append(i)
        values = self._predict(flat) if self.route == "predict" else self._rerank(flat)
        best = [0.0] * len(list(pairs))
        for i, p in zip(owner, values, strict=True):
            best[i] = max(best[i], p)
        return best

    def _predict(self, flat: list[tuple[str, str]]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(flat), self.batch_size):
            batch = flat[start : start + self.batch_size]
            body = {
                "inputs": [[p, h] for p, h in batch],
                "truncate": self.truncate,
                "raw_scores": False,
            }
            payload = self._call(body)
            if not isinstance(payload, list) or len(payload) != len(batch):
                raise VerifierResponseError(
                    f"{self.where}: expected a list of {len(batch)} prediction lists, got "
                    f"{str(payload)[:200]}"
                )
            out += [self._supported(item) for item in payload]
        return out

    def _supported(self, predictions: Any) -> float:
        """The probability of the "supported" label in one pair's predictions."""
        if not isinstance(predictions, list) or not predictions:
            raise VerifierResponseError(f"{self.where}: a pair got no predictions: {predictions}")
        scores: dict[str, float] = {}
        for item in predictions:
            if not isinstance(item, dict) or "label" not in item or "score" not in item:
                raise VerifierResponseError(f"{self.where}: not a {{label, score}}: {item}")
            scores[str(item["label"])] = float(item["score"])
        if len(scores) == 1 and self.label is None:
            (value,) = scores.values()
            return _unit(value, self.where)
        names = {k.lower(): k for k in scores}
        if self.label is not None:
            key = names.get(self.label.lower())
            if key is None:
                raise ConfigError(
                    f"{self.where}: verifier.label={self.label!r} is not one of the model's "
                    f"labels ({', '.join(scores)})"
                )
        else:
            found = [names[n] for n in names if n in SUPPORTED_LABELS]
            if len(found) != 1:
                raise ConfigError(
                    f"{self.where}: cannot tell which label means 'supported' from "
                    f"{', '.join(scores)}; set verifier.label to its name"
                )
            key = found[0]
        return _unit(scores[key], self.where)

    def _rerank(self, flat: list[tuple[str, str]]) -> list[float]:
        out = [math.nan] * len(flat)
        by_premise: dict[str, list[int]] = {}
        for i, (premise, _) in enumerate(flat):
            by_premise.setdefault(premise, []).append(i)
        for premise, indices in by_premise.items():
            for start in range(0, len(indices), self.batch_size):
                part = indices[start : start + self.batch_size]
                body = {
                    "query": premise,
                    "texts": [flat[i][1] for i in part],
                    "truncate": self.truncate,
                    "raw_scores": False,
                }
                payload = self._call(body)
                if not isinstance(payload, list) or len(payload) != len(part):
                    raise VerifierResponseError(
                        f"{self.where}: expected {len(part)} ranks, got {str(payload)[:200]}"
                    )
                for rank in payload:
                    index = rank.get("index") if isinstance(rank, dict) else None
                    if not isinstance(index, int) or not 0 <= index < len(part):
                        raise VerifierResponseError(f"{self.where}: bad rank {rank}")
                    out[part[index]] = _unit(float(rank.get("score", math.nan)), self.where)
        return out

    def check(self) -> None:
        """Preflight: one pair must be answered in the route's shape (no retry, at most
        :data:`~rag_experiments.llm.transport.CHECK_TIMEOUT_S`).

        Raises:
            LLMError: Unreachable, timeout, an error status, or an answer of another shape.
            ConfigError: The "supported" label cannot be found among the model's labels.
        """
        limit = min(self.retry.timeout_s, CHECK_TIMEOUT_S)
        premise, hypothesis = CHECK_PAIR
        if self.route == "predict":
            body: dict[str, Any] = {"inputs": [[premise, hypothesis]], "truncate": self.truncate}
            payload = self._post(body, limit)
            if not isinstance(payload, list) or len(payload) != 1:
                raise VerifierResponseError(f"{self.where}: unexpected answer {str(payload)[:200]}")
            self._supported(payload[0])
        else:
            body = {"query": premise, "texts": [hypothesis], "truncate": self.truncate}
            payload = self._post(body, limit)
            if not isinstance(payload, list) or len(payload) != 1:
                raise VerifierResponseError(f"{self.where}: unexpected answer {str(payload)[:200]}")

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _call(self, body: dict[str, Any]) -> Any:
        return self.retry.call(lambda: self.gate.call(lambda: self._post(body)), self.where)

    def _post(self, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """One request (no retry); every failure raised as a typed :class:`LLMError`."""
        import httpx

        limit = self.retry.timeout_s if timeout_s is None else timeout_s
        url = f"{self.url}/{self.route}"
        try:
            reply = self._http.send("POST", url, json=body, timeout_s=limit)
        except httpx.TimeoutException as exc:
            raise LLMTimeoutError(
                f"{self.where}: no answer within {limit:g} s ({type(exc).__name__}); raise "
                "verifier.timeout_s or lower verifier.batch_size"
            ) from None
        except httpx.ConnectError as exc:
            raise LLMUnreachableError(
                f"verifier.url {public_url(self.url)} cannot be reached ({type(exc).__name__}: "
                f"{exc}); start TEI (text-embeddings-router --model-id …) or fix verifier.url"
            ) from None
        except httpx.TransportError as exc:
            raise LLMConnectionDroppedError(
                f"{self.where}: the connection was dropped before an answer "
                f"({type(exc).__name__}: {exc or 'no detail'})"
            ) from None
        if reply.status_code >= 400:
            hint = {
                413: "lower verifier.batch_size (TEI allows 32 by default)",
                424: "the model is not a classifier for this route: try verifier.route=rerank "
                "or predict",
            }.get(reply.status_code)
            raise LLMHTTPError(
                f"{self.where}: POST failed" + (f" ({hint})" if hint else ""),
                status=reply.status_code,
                body=reply.text,
                retry_after_s=retry_after_s(reply.headers),
            )
        try:
            return reply.json()
        except ValueError:
            raise LLMBadBodyError(
                f"{self.where}: the answer is not JSON (is verifier.url a TEI server?)",
                status=reply.status_code,
                body=reply.text,
            ) from None


def _unit(value: float, where: str) -> float:
    """``value`` when it is a probability; else :class:`VerifierResponseError` (a raw logit
    means the server was asked for ``raw_scores``)."""
    if not (isinstance(value, float) and 0.0 <= value <= 1.0):
        raise VerifierResponseError(f"{where}: score {value} is not a probability in [0, 1]")
    return value
