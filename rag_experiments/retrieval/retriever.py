"""Dense retrieval for the baseline: embed the question, rank chunks in the vector index."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rag_experiments.errors import VectorIndexError
from rag_experiments.retrieval.base import Hit, RetrievalResult, RetrieverBase

if TYPE_CHECKING:
    from rag_experiments.index.chroma import ChromaIndex
    from rag_experiments.protocols import Embedder

__all__ = ["RetrievalResult", "Retriever"]


class Retriever(RetrieverBase):
    """Top-k dense retrieval over a :class:`~rag_experiments.index.chroma.ChromaIndex`
    (``retriever=dense``; ``retriever=default`` is the same).

    Made from config with ``top_k``/``depth`` only, then bound to an index, a collection and
    the embedder that built it (:meth:`bind`, called by the baseline target's ``prepare``).
    Hit scores are cosine similarities in [-1, 1]; each hit carries its ``dense`` rank.

    Args:
        top_k: Chunks handed to the generator (>= 1).
        depth: Length of the chunk ranking kept for retrieval metrics (e.g. 100 for
            Recall@100); the ranking is ``max(top_k, depth)`` deep. None = ``top_k``.

    Raises:
        ConfigError: ``top_k`` < 1 or ``depth`` < 1.
    """

    uses_vectors: ClassVar[bool] = True
    sources: ClassVar[tuple[str, ...]] = ("dense",)
    ranks_every_chunk: ClassVar[bool] = True

    def __init__(self, top_k: int = 5, depth: int | None = None) -> None:
        super().__init__(top_k, depth)
        self.index: ChromaIndex | None = None
        self.collection: str | None = None
        self.embedder: Embedder | None = None

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
        found = self.index.query(
            self.collection, self.embedder.embed_query(query), self.ranking_depth
        )
        hits = [
            Hit(cid, doc_id, text, score, {"dense": rank})
            for rank, (cid, doc_id, text, score) in enumerate(found, start=1)
        ]
        return RetrievalResult.from_hits(hits, self.top_k)
