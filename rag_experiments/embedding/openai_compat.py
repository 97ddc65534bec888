"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` (vLLM, llama.cpp's server started
with embeddings on, LM Studio, Ollama's ``/v1``)."""

from __future__ import annotations

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, bearer_headers
from rag_experiments.embedding.remote import RemoteEmbedder
from rag_experiments.errors import LLMError
from rag_experiments.llm.errors import LLMHTTPError, ModelNotFoundError
from rag_experiments.llm.openai_compat import check_listed_model
from rag_experiments.llm.transport import JsonHttp


class OpenAICompatEmbedder(RemoteEmbedder):
    """An embedding model behind an OpenAI-compatible server.

    Args:
        model: Model name as the server knows it.
        base_url: API root including ``/v1``.
        api_key_env: Environment variable holding the API key (never logged), or None.
        api_key: The key itself (prefer ``api_key_env``); not both.
        dimensions: Ask the server for this many dimensions (models that support it), or None.
        batch_size: Texts per request.
        normalize: L2-normalise vectors.
        query_prefix: Prepended to queries.
        document_prefix: Prepended to documents.
        dim: The dimension if known (None = one probe request).
        retry: How long one attempt may take and how failed ones (timeouts, connection errors,
            HTTP 429/5xx) are retried (:class:`~rag_experiments.common.http.RetryPolicy`).

    The id holds the model and the base_url: such servers report no digest, and two servers
    may serve different weights under one name.

    Raises:
        ConfigError: ``api_key_env`` names a variable that is not set.
    """

    provider = "openai"

    def __init__(
        self,
        model: str = "default",
        base_url: str = "http://127.0.0.1:8080/v1",
        api_key_env: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        document_prefix: str = "",
        dim: int | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        super().__init__(
            model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            document_prefix=document_prefix,
            dim=dim if dim is not None else dimensions,
            retry=retry,
        )
        self.base_url = base_url.rstrip("/")
        self.dimensions = dimensions
        headers = bearer_headers(api_key_env, self.where, "embedder.api_key_env", api_key=api_key)
        self.http = JsonHttp(
            self.base_url,
            self.retry.timeout_s,
            where=f"{self.where} at {self.base_url}",
            headers=headers,
            unreachable_hint="start the server or set embedder.base_url",
        )

    def __repr__(self) -> str:
        return f"OpenAICompatEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    def check(self) -> None:
        """``GET /models`` answers; a model it does not list is sent one one-text embedding
        request (a "model not found" answer fails the check).

        Raises:
            LLMUnreachableError: Nothing answers at ``base_url``.
            ModelNotFoundError: The server does not have the model.
            LLMHTTPError: The key is refused (401/403) or the server is not an
                OpenAI-compatible ``/v1`` root.
        """
        where = f"{self.where} at {self.base_url}"
        if check_listed_model(self.http, self.model, where, "embedder.api_key_env") is None:
            self._embed_batch(["check"])

    def _identity(self) -> str:
        dims = f":d{self.dimensions}" if self.dimensions else ""
        return f"openai:{self.model}@{self.base_url}{dims}"

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        payload: dict = {"model": self.model, "input": texts}
        if self.dimensions:
            payload["dimensions"] = self.dimensions
        try:
            data = self.http.request("POST", "/embeddings", payload)
        except LLMHTTPError as exc:
            if exc.status == 404 and "model" in exc.body.lower():
                raise ModelNotFoundError(
                    f"{self.where} at {self.base_url}: the server has no model {self.model!r}; "
                    f"set embedder.model to one listed by GET {self.base_url}/models"
                ) from exc
            raise
        rows = sorted(data.get("data") or [], key=lambda r: int(r.get("index", 0)))
        vectors = [list(r.get("embedding") or []) for r in rows]
        if any(v and isinstance(v[0], list) for v in vectors):
            raise LLMError(
                f"{self.where} at {self.base_url}: the server returned one vector per token, not "
                "one per text (the model has no pooling; llama-cpp-python's server does this for "
                "chat models); serve an embedding model, or llama.cpp's `llama-server "
                "--embeddings --pooling mean`",
                reason="bad_response",
            )
        return vectors
