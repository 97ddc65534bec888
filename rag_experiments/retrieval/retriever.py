"""Dense retrieval for the baseline: embed the question, rank chunks in the vector index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rag_experiments.errors import ConfigError, VectorIndexError

if TYPE_CHECKING:
    from rag_experiments.index.chroma import ChromaIndex
    from rag_experiments.protocols import Embedder


@dataclass(frozen=True)
class RetrievalResult:
    """What one retrieval returned.

    Attributes:
        contexts: Texts of the ``top_k`` best chunks, best first (what the generator sees).
        chunk_ids: Ids of those ``top_k`` chunks.
        doc_ids: Parent document ids of the deep ranking (``max(top_k, depth)`` chunks),
            deduplicated, first occurrence wins. Since several chunks can come from one
            document, this list can be shorter than ``depth``: a doc-level Recall@100 over
            chunked documents sees only as many documents as the 100 chunks cover.
        ranked_chunk_ids: The deep chunk ranking (``max(top_k, depth)`` ids).
        scores: Cosine similarities of ``ranked_chunk_ids``, same order.
    """

    contexts: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    ranked_chunk_ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)


class Retriever:
    """Top-k dense retrieval over a :class:`~rag_experiments.index.chroma.ChromaIndex`.

    Made from config with ``top_k``/``depth`` only, then bound to an index, a collection and
    the embedder that built it (:meth:`bind`, called by the baseline target's ``prepare``).

    Args:
        top_k: Chunks handed to the generator (>= 1).
        depth: Length of the chunk ranking kept for retrieval metrics (e.g. 100 for
            Recall@100); the ranking is ``max(top_k, depth)`` deep. None = ``top_k``.

    Raises:
        ConfigError: ``top_k`` < 1 or ``depth`` < 1.
    """

    def __init__(self, top_k: int = 5, depth: int | None = None) -> None:
        if top_k < 1:
            raise ConfigError(f"retriever.top_k must be >= 1, got {top_k}.")
        if depth is not None and depth < 1:
            raise ConfigError(f"retriever.depth must be >= 1 or null, got {depth}.")
        self.top_k = top_k
        self.depth = depth
        self.index: ChromaIndex | None = None
        self.collection: str | None = None
        self.embedder: Embedder | None = None

    @property
    def ranking_depth(self) -> int:
        """``max(top_k, depth)``: how many chunks each query ranks."""
        return max(self.top_k, self.depth or self.top_k)

    def bind(self, index: ChromaIndex, collection: str, embedder: Embedder) -> None:
        """Point the retriever at a built collection.

        Args:
            index: The index holding the collection.
            collection: Name returned by :meth:`ChromaIndex.ensure`.
            embedder: The embedder the collection was built with (queries must use it too).
        """
        self.index = index
        self.collection = collection
        self.embedder = embedder

    def retrieve(self, query: str) -> RetrievalResult:
        """Rank chunks for one query.

        Args:
            query: The question.

        Returns:
            The ``top_k`` contexts and the deeper rankings (see :class:`RetrievalResult`).

        Raises:
            VectorIndexError: Not bound yet, or the index query failed.
        """
        if self.index is None or self.collection is None or self.embedder is None:
            raise VectorIndexError(
                "Retriever is not bound to a vector index; call bind(index, collection, "
                "embedder) first (BaselineTarget.prepare does this)."
            )
        hits = self.index.query(
            self.collection, self.embedder.embed_query(query), self.ranking_depth
        )
        top = hits[: self.top_k]
        doc_ids = list(dict.fromkeys(doc_id for _, doc_id, _, _ in hits))
        return RetrievalResult(
            contexts=[text for _, _, text, _ in top],
            chunk_ids=[cid for cid, _, _, _ in top],
            doc_ids=doc_ids,
            ranked_chunk_ids=[cid for cid, _, _, _ in hits],
            scores=[score for _, _, _, score in hits],
        )
