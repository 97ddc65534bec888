"""What the HTTP embedders share: batching, retries, L2 normalisation, query/document
prefixes and the id."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, TakesRetry
from rag_experiments.errors import ConfigError, LLMError


class RemoteEmbedder(TakesRetry):
    """Base of :class:`~rag_experiments.embedding.ollama.OllamaEmbedder` and
    :class:`~rag_experiments.embedding.openai_compat.OpenAICompatEmbedder`.

    Args:
        model: Model name on the server.
        batch_size: Texts per request.
        normalize: L2-normalise vectors (cosine search = dot product).
        query_prefix: Prepended to queries (``"search_query: "`` for nomic-embed,
            ``"query: "`` for E5); part of the id.
        document_prefix: Prepended to documents (``"search_document: "``, ``"passage: "``).
        dim: The vector dimension if known; None = asked of the server once (one request).
        retry: How long one attempt may take and how failed ones (timeouts, connection errors,
            HTTP 429/5xx) are retried (:class:`~rag_experiments.common.http.RetryPolicy`).

    Raises:
        ConfigError: ``batch_size`` < 1 or ``dim`` < 1.
    """

    provider = "remote"

    def __init__(
        self,
        model: str,
        *,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        document_prefix: str = "",
        dim: int | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"embedder.batch_size must be >= 1, got {batch_size}")
        if dim is not None and dim < 1:
            raise ConfigError(f"embedder.dim must be >= 1 or null, got {dim}")
        if not model:
            raise ConfigError("embedder.model is empty; name the embedding model")
        self.model = model
        self.batch_size = batch_size
        self.normalize = normalize
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._dim = dim
        self.retry = retry

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        """One request for a batch (no retry). Raises typed :class:`LLMError` s."""
        raise NotImplementedError

    def _identity(self) -> str:
        """Provider-specific part of :attr:`id`."""
        raise NotImplementedError

    def check(self) -> None:
        """The server answers and has the model (one or two requests, no retry).

        Raises:
            LLMError: ``unreachable``, ``timeout``, ``model_not_found`` or ``http_error``.
        """
        raise NotImplementedError

    @property
    def where(self) -> str:
        """``"<provider> embedder <model>"`` for messages."""
        return f"{self.provider} embedder {self.model}"

    @property
    def id(self) -> str:
        """``<identity>:norm<0|1>[:p<hash of the prefixes>]``."""
        ident = f"{self._identity()}:norm{int(self.normalize)}"
        if self.query_prefix or self.document_prefix:
            h = hashlib.sha256(f"{self.query_prefix}\x00{self.document_prefix}".encode())
            ident += f":p{h.hexdigest()[:8]}"
        return ident

    @property
    def dim(self) -> int:
        """Vector dimension (configured, or from one probe request)."""
        if self._dim is None:
            self._dim = int(self._embed(["dimension probe"]).shape[1])
        return self._dim

    def _embed(self, texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            batch = texts[i : i + self.batch_size]
            vectors = self.retry.call(lambda b=batch: self._embed_batch(b), self.where)
            if len(vectors) != len(batch):
                raise LLMError(
                    f"{self.where}: {len(vectors)} vectors for {len(batch)} texts; is the model "
                    "an embedding model?",
                    reason="bad_response",
                )
            rows.extend(vectors)
        out = np.asarray(rows, dtype=np.float32)
        if out.ndim != 2 or out.shape[1] == 0:
            raise LLMError(f"{self.where}: got vectors of shape {out.shape}", reason="bad_response")
        if self._dim is not None and out.shape[1] != self._dim:
            raise ConfigError(
                f"{self.where}: vectors have {out.shape[1]} dimensions, the config "
                f"says dim={self._dim}; fix embedder.dim (or set it to null)"
            )
        if self.normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.where(norms == 0.0, 1.0, norms)
        return out.astype(np.float32, copy=False)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts (with ``document_prefix``), ``batch_size`` per request.

        Args:
            texts: The texts.

        Returns:
            float32 ``(len(texts), dim)``, rows of L2 norm 1 when ``normalize``.

        Raises:
            LLMError: The server failed (after retries) or answered the wrong number of
                vectors.
        """
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed([self.document_prefix + t for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (with ``query_prefix``).

        Args:
            text: The query.

        Returns:
            float32 ``(dim,)``.
        """
        return self._embed([self.query_prefix + text])[0]
