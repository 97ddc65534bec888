"""Embeddings from Ollama's ``/api/embed`` (``bge-m3``, ``nomic-embed-text`` …)."""

from __future__ import annotations

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, bearer_headers
from rag_experiments.embedding.remote import RemoteEmbedder
from rag_experiments.llm.errors import LLMHTTPError
from rag_experiments.llm.ollama import (
    DEFAULT_BASE_URL,
    check_ollama_model,
    not_found_error,
    specialise_http_error,
    tagged_digest,
    unreachable_hint,
)
from rag_experiments.llm.transport import JsonHttp


class OllamaEmbedder(RemoteEmbedder):
    """An Ollama embedding model.

    Args:
        model: Ollama model name.
        base_url: Ollama's root URL.
        batch_size: Texts per request.
        normalize: L2-normalise vectors (Ollama already does; kept for safety).
        truncate: Let Ollama cut inputs longer than the model's context (``true``, Ollama's
            default) instead of failing them.
        keep_alive: How long Ollama keeps the model loaded.
        query_prefix: Prepended to queries.
        document_prefix: Prepended to documents.
        dim: The dimension if known (None = one probe request).
        retry: How long one attempt may take and how failed ones (timeouts, connection errors,
            HTTP 429/5xx) are retried (:class:`~rag_experiments.common.http.RetryPolicy`).
        api_key_env: Environment variable holding a key for an Ollama behind an
            authenticating proxy (sent as ``Authorization: Bearer``), or None.
        api_key: The key itself (prefer ``api_key_env``); not both.
    """

    provider = "ollama"

    def __init__(
        self,
        model: str = "bge-m3",
        base_url: str = DEFAULT_BASE_URL,
        batch_size: int = 32,
        normalize: bool = True,
        truncate: bool = True,
        keep_alive: str = "5m",
        query_prefix: str = "",
        document_prefix: str = "",
        dim: int | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        api_key_env: str | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__(
            model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
            dim=dim,
            retry=retry,
        )
        self.base_url = base_url.rstrip("/")
        self.truncate = truncate
        self.keep_alive = keep_alive
        self.http = JsonHttp(
            self.base_url,
            self.retry.timeout_s,
            where=f"{self.where} at {self.base_url}",
            headers=bearer_headers(
                api_key_env, self.where, "embedder.api_key_env", api_key=api_key
            ),
            unreachable_hint=unreachable_hint("embedder.base_url"),
        )
        self._digest: str | None = None

    def check(self) -> None:
        """One ``GET /api/tags``: Ollama answers and has the model.

        Raises:
            LLMUnreachableError: Nothing answers at ``base_url``.
            ModelNotFoundError: The model is not pulled.
            LLMHTTPError: The server answered an error.
        """
        check_ollama_model(self.http, self.model, f"{self.where} at {self.base_url}")

    def digest(self) -> str:
        """The model's digest from ``/api/tags`` (asked once).

        Raises:
            ModelNotFoundError: The model is not pulled.
        """
        if self._digest is None:
            data = self.retry.call(lambda: self.http.request("GET", "/api/tags"), self.where)
            digest = tagged_digest(data, self.model)
            if digest is None:
                raise not_found_error(f"{self.where} at {self.base_url}", self.model)
            self._digest = digest
        return self._digest

    def _identity(self) -> str:
        return f"ollama:{self.model}:{self.digest()[:12]}:trunc{int(self.truncate)}"

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        payload = {
            "model": self.model,
            "input": texts,
            "truncate": self.truncate,
            "keep_alive": self.keep_alive,
        }
        try:
            data = self.http.request("POST", "/api/embed", payload)
        except LLMHTTPError as exc:
            err = specialise_http_error(exc, f"{self.where} at {self.base_url}", self.model)
            raise err from exc
        return list(data.get("embeddings") or [])


__all__ = ["OllamaEmbedder"]
