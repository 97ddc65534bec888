"""What a retriever and a reranker declare, and the ranking they exchange.

A retriever (``retriever=dense|bm25|hybrid``) ranks chunks for a query; a reranker
(``reranker=http|fake``, ``reranker=none`` for none) re-scores the first ``candidates`` of that
ranking. Both are swappable parts chosen in ``conf/`` by ``_target_`` and built by the
composition root (:mod:`rag_experiments.build`), which reads what their classes declare here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from rag_experiments.errors import ConfigError, RagExpError

if TYPE_CHECKING:
    from rag_experiments.index.chroma import ChromaIndex
    from rag_experiments.protocols import Embedder
    from rag_experiments.records import Chunk


@dataclass(frozen=True)
class Hit:
    """One ranked chunk.

    Attributes:
        chunk_id: The chunk's id.
        doc_id: Its parent document's id.
        text: The chunk text (what the generator and a reranker read).
        score: The retriever's score (cosine for dense, BM25 for bm25, the fused score for
            hybrid); higher = more relevant.
        ranks: Source → 1-based rank of this chunk in that source's ranking: ``{"dense": 3}``,
            ``{"bm25": 1}``, or both for a fused hit (a source that did not return the chunk
            within its depth is absent).
        rerank_score: The reranker's score; None when it was not reranked, or when the server
            left it out under ``top_n`` (it then ranks after every scored candidate).
        retriever_rank: 1-based rank in the retriever's ranking before reranking, None when not
            reranked (set for every candidate, scored or left out).
    """

    chunk_id: str
    doc_id: str
    text: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    rerank_score: float | None = None
    retriever_rank: int | None = None

    def provenance(self) -> dict[str, Any]:
        """Where the hit comes from, for the trace and the per-query table:
        ``{"rank.dense": 3, "rank.bm25": 1, "score": 0.031}`` plus ``retriever_rank`` and
        ``rerank_score`` for a reranker's candidate (``rerank_score`` None = left out by the
        server under ``top_n``: null in JSON, never ``-Infinity``)."""
        out: dict[str, Any] = {f"rank.{src}": r for src, r in self.ranks.items()}
        out["score"] = float(self.score)
        if self.retriever_rank is not None:
            out["rerank_score"] = None if self.rerank_score is None else float(self.rerank_score)
            out["retriever_rank"] = self.retriever_rank
        return out


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
        scores: Scores of ``ranked_chunk_ids``, same order.
        hits: The deep ranking itself (:class:`Hit`, with source ranks); empty when the
            result was built from the lists above.
        note: Why the ranking is empty or came from fewer sources than the retriever has, as
            a short code (``no_query_terms``: the query has no token after analysis — only
            stop words, emoji or punctuation; ``no_matching_terms``: no chunk shares a term
            with it; ``bm25:no_query_terms`` …: a hybrid's source that returned nothing, the
            other one ranked alone); None otherwise. The baseline copies it into the row's
            ``metadata["retrieval_note"]``.
    """

    contexts: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    ranked_chunk_ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    note: str | None = None

    @classmethod
    def from_hits(cls, hits: list[Hit], top_k: int, note: str | None = None) -> RetrievalResult:
        """The result of a deep ranking ``hits`` (best first) of which ``top_k`` go to the
        generator; ``note`` as the attribute."""
        top = hits[:top_k]
        return cls(
            contexts=[h.text for h in top],
            chunk_ids=[h.chunk_id for h in top],
            doc_ids=list(dict.fromkeys(h.doc_id for h in hits)),
            ranked_chunk_ids=[h.chunk_id for h in hits],
            scores=[h.score for h in hits],
            hits=list(hits),
            note=note,
        )

    @property
    def top_k(self) -> int:
        """How many contexts go to the generator."""
        return len(self.contexts)

    def provenance(self) -> list[dict[str, Any]]:
        """:meth:`Hit.provenance` of each of the ``top_k`` contexts (empty without hits)."""
        return [h.provenance() for h in self.hits[: self.top_k]]


class RetrieverBase:
    """A retriever: ranks the chunks of a corpus for a query (a swappable part).

    Subclasses declare:

    - ``uses_vectors`` (class attribute): the baseline builds (or reuses) the vector index
      with the job's embedder and calls :meth:`bind`; False: no embedder is built for it.
    - ``sources`` (class attribute): the names of the rankings its hits carry ranks from
      (``("dense",)``, ``("bm25",)``, ``("dense", "bm25")``).
    - ``ranks_every_chunk`` (class attribute): True when every query gets a full ranking
      (dense: every chunk has a nearest-neighbour distance), False when a query can rank fewer
      chunks or none (BM25 returns only chunks sharing a term with it).

    Args:
        top_k: Chunks handed to the generator (>= 1).
        depth: Length of the chunk ranking kept for retrieval metrics (e.g. 100 for
            Recall@100); the ranking is ``max(top_k, depth)`` deep. None = ``top_k``.

    Raises:
        ConfigError: ``top_k`` < 1 or ``depth`` < 1.
    """

    uses_vectors: ClassVar[bool] = False
    sources: ClassVar[tuple[str, ...]] = ()
    ranks_every_chunk: ClassVar[bool] = False

    def __init__(self, top_k: int = 5, depth: int | None = None) -> None:
        if top_k < 1:
            raise ConfigError(f"retriever.top_k must be >= 1, got {top_k}.")
        if depth is not None and depth < 1:
            raise ConfigError(f"retriever.depth must be >= 1 or null, got {depth}.")
        self.top_k = top_k
        self.depth = depth

    @property
    def ranking_depth(self) -> int:
        """``max(top_k, depth)``: how many chunks each query ranks."""
        return max(self.top_k, self.depth or self.top_k)

    def bind(self, index: ChromaIndex, collection: str, embedder: Embedder) -> None:
        """Point a vector retriever at a built collection (called by the baseline when
        ``uses_vectors``); nothing to do for the others."""

    def prepare(self, chunks: list[Chunk], corpus_key: str) -> None:
        """Build or reuse the retriever's own index of ``chunks`` (BM25); nothing to do for a
        retriever that only reads the vector index.

        Args:
            chunks: Every chunk of the corpus.
            corpus_key: Identity of the chunks: ``"<chunker_id>|<corpus_digest>"``.
        """

    def describe(self) -> dict[str, str]:
        """Tags naming the retriever (``retriever``: its sources joined by ``+``)."""
        return {"retriever": "+".join(self.sources)}

    def retrieve(self, query: str) -> RetrievalResult:
        """Rank chunks for one query: ``ranking_depth`` hits, best first.

        Raises:
            RagExpError: The retriever is not prepared or its index failed.
        """
        raise NotImplementedError


class RerankerBase:
    """A reranker: re-scores the first ``candidates`` hits of a retriever's ranking (a
    swappable part; ``reranker=http`` serves a cross-encoder, ``reranker=fake`` is
    deterministic).

    Subclasses declare:

    Attributes:
        candidates: How many of the retriever's ranking are re-scored (``reranker.candidates``,
            default 20).
        cacheable: Whether the composition root puts its answers in the LLM response cache
            (``paths.llm_cache``; default True: a served model costs calls and may change).
    """

    candidates: int = 20
    cacheable: bool = True

    def describe(self) -> dict[str, str]:
        """Tags naming the reranker (its identity, part of a cached answer's key)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release connections (nothing by default)."""

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        """One score per document, same order, higher = more relevant.

        Raises:
            RagExpError: The reranker failed (a subclass naming the reason).
        """
        raise NotImplementedError

    def check(self) -> None:
        """Preflight: raise a one-line :class:`RagExpError` when the reranker cannot be used."""
        raise NotImplementedError


def rerank_result(result: RetrievalResult, reranker: RerankerBase, query: str) -> RetrievalResult:
    """Reorder the first ``reranker.candidates`` hits of ``result`` by the reranker's scores
    (highest first; ties keep the retriever's order); the hits beyond them keep their order
    after them. Each reranked hit records its ``retriever_rank`` and ``rerank_score``; a
    candidate scored ``-inf`` (left out by the server under ``top_n``) ranks after every scored
    one, in retriever order, and records ``rerank_score=None``. The ``top_k`` contexts are
    taken from the new order.

    Args:
        result: A retrieval with :attr:`RetrievalResult.hits`.
        reranker: The reranker.
        query: The question.

    Returns:
        The reranked result (same ``top_k``, same deep ranking length).

    Raises:
        RagExpError: The reranker failed, or returned a number of scores other than the number
            of candidates.
    """
    n = min(int(reranker.candidates), len(result.hits))
    if n == 0:
        return result  # nothing ranked: nothing to ask the reranker
    head = result.hits[:n]
    scores = reranker.rerank(query, [h.text for h in head])
    if len(scores) != n:
        raise RagExpError(
            f"the reranker returned {len(scores)} scores for {n} documents; it must return one "
            "score per document"
        )
    order = sorted(range(n), key=lambda i: -float(scores[i]))  # stable: ties keep rank order
    reranked = [
        replace(
            head[i],
            rerank_score=float(scores[i]) if math.isfinite(float(scores[i])) else None,
            retriever_rank=i + 1,
        )
        for i in order
    ]
    return RetrievalResult.from_hits(reranked + result.hits[n:], result.top_k, result.note)
