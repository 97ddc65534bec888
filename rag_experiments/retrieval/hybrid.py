"""Hybrid retrieval: the dense and the BM25 rankings fused into one.

Two fusions:

- ``rrf``, reciprocal rank fusion (Cormack, Clarke and Büttcher, "Reciprocal Rank Fusion
  outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009):
  ``score(d) = Σ_s 1 / (k + rank_s(d))`` over the sources ``s`` whose ranking holds ``d``
  (ranks from 1; ``k`` = 60 in the paper).
- ``convex``, a weighted sum of normalised scores (Bruch, Gai and Ingber, "An Analysis of Fusion
  Functions for Hybrid Retrieval", TOIS 2023): ``score(d) = α · dense(d) + (1 − α) · bm25(d)``,
  each source's scores normalised over its own ranking (``minmax``: ``(s − min) / (max − min)``;
  ``zscore``: ``(s − mean) / std``); a document a source did not return gets that source's
  lowest normalised value (0 for minmax).

Ties keep the order of first appearance (dense first). Each fused hit carries both source
ranks (``ranks = {"dense": …, "bm25": …}``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from rag_experiments.errors import ConfigError
from rag_experiments.retrieval.base import Hit, RetrievalResult, RetrieverBase
from rag_experiments.retrieval.bm25 import Bm25Retriever
from rag_experiments.retrieval.retriever import Retriever

if TYPE_CHECKING:
    from rag_experiments.index.chroma import ChromaIndex
    from rag_experiments.protocols import Embedder
    from rag_experiments.records import Chunk

log = logging.getLogger(__name__)

FUSIONS = ("rrf", "convex")
NORMS = ("minmax", "zscore")


def rrf(rankings: dict[str, Sequence[Hit]], k: float = 60.0) -> list[Hit]:
    """Reciprocal rank fusion of ``rankings`` (source → hits, best first).

    Args:
        rankings: Source name → its ranking.
        k: The RRF constant (> 0).

    Returns:
        The union of the hits by ``Σ 1 / (k + rank)``, highest first; ``score`` is that sum and
        ``ranks`` holds each source's 1-based rank.
    """
    fused: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    first: dict[str, Hit] = {}
    for source, hits in rankings.items():
        for rank, hit in enumerate(hits, start=1):
            first.setdefault(hit.chunk_id, hit)
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + 1.0 / (k + rank)
            ranks.setdefault(hit.chunk_id, {})[source] = rank
    order = sorted(first, key=lambda cid: -fused[cid])  # stable: ties keep first appearance
    return [_fused(first[cid], fused[cid], ranks[cid]) for cid in order]


def normalise(scores: np.ndarray, norm: str) -> np.ndarray:
    """``minmax`` → ``(s − min) / (max − min)`` (all 1.0 when the scores are equal);
    ``zscore`` → ``(s − mean) / std`` (population std; all 0.0 when it is 0)."""
    if scores.size == 0:
        return scores
    if norm == "minmax":
        span = scores.max() - scores.min()
        return (scores - scores.min()) / span if span > 0 else np.ones_like(scores)
    std = scores.std()
    return (scores - scores.mean()) / std if std > 0 else np.zeros_like(scores)


def convex(rankings: dict[str, Sequence[Hit]], weights: dict[str, float], norm: str) -> list[Hit]:
    """Weighted sum of normalised scores (see the module docstring).

    Args:
        rankings: Source name → its ranking (hits with scores).
        weights: Source name → weight (``α`` and ``1 − α``).
        norm: ``minmax`` or ``zscore``.

    Returns:
        The union of the hits by fused score, highest first, with each source's rank.
    """
    normed: dict[str, dict[str, float]] = {}
    floor: dict[str, float] = {}
    for source, hits in rankings.items():
        values = normalise(np.asarray([h.score for h in hits], dtype=np.float64), norm)
        normed[source] = {h.chunk_id: float(v) for h, v in zip(hits, values, strict=True)}
        floor[source] = float(values.min()) if values.size else 0.0
    first: dict[str, Hit] = {}
    ranks: dict[str, dict[str, int]] = {}
    for source, hits in rankings.items():
        for rank, hit in enumerate(hits, start=1):
            first.setdefault(hit.chunk_id, hit)
            ranks.setdefault(hit.chunk_id, {})[source] = rank
    fused = {
        cid: sum(w * normed[s].get(cid, floor[s]) for s, w in weights.items()) for cid in first
    }
    order = sorted(first, key=lambda cid: -fused[cid])
    return [_fused(first[cid], fused[cid], ranks[cid]) for cid in order]


def _fused(hit: Hit, score: float, ranks: dict[str, int]) -> Hit:
    return Hit(hit.chunk_id, hit.doc_id, hit.text, float(score), dict(ranks))


class HybridRetriever(RetrieverBase):
    """Dense and BM25 rankings fused (``retriever=hybrid``).

    Args:
        top_k: Chunks handed to the generator (>= 1).
        depth: Length of the fused ranking kept for retrieval metrics; None = ``top_k``.
        fusion: ``rrf`` or ``convex``.
        k: RRF constant (> 0; 60 as Cormack et al.); ``rrf`` only.
        alpha: Weight of the dense scores in ``convex`` (``1 − alpha`` for BM25), in [0, 1];
            ``convex`` only (a value other than 0.5 with ``rrf`` logs a warning).
        norm: Score normalisation of ``convex``: ``minmax`` or ``zscore``; ``convex`` only
            (``zscore`` with ``rrf`` logs a warning).
        dense_depth: How deep the dense ranking that is fused goes (>= 1); raised to the fused
            ranking's depth (``max(top_k, depth)``) when below it, so a deeper ranking (metrics
            at depth 200, ``reranker.candidates``) is never silently cut by the sources.
        bm25_depth: How deep the BM25 ranking that is fused goes (>= 1); raised likewise.
        bm25: Keyword arguments of :class:`~rag_experiments.retrieval.bm25.Bm25Retriever`
            (``k1``, ``b``, ``method``, ``stemmer``, ``stopwords``, ``index_title``,
            ``index_dir`` …).

    Raises:
        ConfigError: An unknown fusion or norm, or a value out of range (the message names
            the key).
    """

    uses_vectors: ClassVar[bool] = True
    sources: ClassVar[tuple[str, ...]] = ("dense", "bm25")
    ranks_every_chunk: ClassVar[bool] = True

    def __init__(
        self,
        top_k: int = 5,
        depth: int | None = None,
        fusion: str = "rrf",
        k: float = 60.0,
        alpha: float = 0.5,
        norm: str = "minmax",
        dense_depth: int = 100,
        bm25_depth: int = 100,
        bm25: dict | None = None,
    ) -> None:
        super().__init__(top_k, depth)
        if fusion not in FUSIONS:
            raise ConfigError(
                f"retriever.fusion must be one of {', '.join(FUSIONS)}, got {fusion!r}."
            )
        if norm not in NORMS:
            raise ConfigError(f"retriever.norm must be one of {', '.join(NORMS)}, got {norm!r}.")
        if k <= 0:
            raise ConfigError(f"retriever.k must be > 0, got {k}.")
        if not 0 <= alpha <= 1:
            raise ConfigError(f"retriever.alpha must be in [0, 1], got {alpha}.")
        if fusion == "rrf" and (alpha != 0.5 or norm != "minmax"):
            log.warning(
                "retriever.alpha=%g and retriever.norm=%s apply to retriever.fusion=convex only; "
                "fusion=rrf ignores them",
                alpha,
                norm,
            )
        self.fusion, self.k, self.alpha, self.norm = fusion, float(k), float(alpha), norm
        # each source ranks at least as deep as the fused ranking is cut, so a larger
        # ranking depth (metrics' depth, reranker.candidates) is never silently cut
        self.dense = Retriever(top_k=max(int(dense_depth), self.ranking_depth))
        self.bm25 = Bm25Retriever(top_k=max(int(bm25_depth), self.ranking_depth), **(bm25 or {}))

    def bind(self, index: ChromaIndex, collection: str, embedder: Embedder) -> None:
        """Bind the dense side to the built collection."""
        self.dense.bind(index, collection, embedder)

    def prepare(self, chunks: list[Chunk], corpus_key: str) -> None:
        """Build or reuse the BM25 side's index."""
        self.bm25.prepare(chunks, corpus_key)

    def describe(self) -> dict[str, str]:
        """``retriever`` tag, the fusion and the BM25 parameters."""
        fusion = (
            f"rrf-k={self.k:g}" if self.fusion == "rrf" else f"convex-{self.norm}-a={self.alpha:g}"
        )
        return {
            **super().describe(),
            "retriever.fusion": fusion,
            **self.bm25.describe(),
            "retriever": "dense+bm25",
        }

    def retrieve(self, query: str) -> RetrievalResult:
        """Both rankings, fused, cut to ``ranking_depth``. A source that ranks nothing (BM25
        for a query of stop words or emoji only) leaves the other one to rank alone (its order
        kept: RRF and convex fusion of one ranking are monotone in it), noted
        ``"<source>:<its note>"`` (``bm25:no_query_terms``).

        Raises:
            RagExpError: Either side failed (not bound/prepared, index error).
        """
        results = {"dense": self.dense.retrieve(query), "bm25": self.bm25.retrieve(query)}
        rankings = {s: r.hits for s, r in results.items() if r.hits}
        notes = [f"{s}:{r.note or 'empty'}" for s, r in results.items() if not r.hits]
        note = ";".join(notes) or None
        if not rankings:
            return RetrievalResult(note=note)
        if self.fusion == "rrf":
            fused = rrf(rankings, self.k)
        else:
            weights = {"dense": self.alpha, "bm25": 1.0 - self.alpha}
            fused = convex(rankings, {s: weights[s] for s in rankings}, self.norm)
        return RetrievalResult.from_hits(fused[: self.ranking_depth], self.top_k, note)
