"""Lexical retrieval for the baseline: BM25 over the chunks, through ``bm25s``.

Defaults are Pyserini's BEIR "flat" settings (Kamalloo et al., "Resources for Brewing BEIR",
SIGIR 2024): title + text indexed as one field, k1 0.9, b 0.4, Lucene's BM25 variant, Porter
stemming, Lucene's English stop words. Lucene's BM25 (Kamphuis et al., ECIR 2020, the variant
bm25s calls ``lucene``) scores a document ``d`` for a query ``q`` as

    Σ_{t ∈ q ∩ d} ln(1 + (N − df_t + 0.5) / (df_t + 0.5))
                  · tf / (tf + k1 · (1 − b + b · |d| / avgdl))

(no ``(k1 + 1)`` factor in the numerator: it does not change the ranking).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rag_experiments.errors import ConfigError, VectorIndexError
from rag_experiments.index.bm25 import Analyzer, Bm25Store
from rag_experiments.index.bm25_params import INDEX_TITLE, LANGUAGES, Bm25Params
from rag_experiments.retrieval.base import Hit, RetrievalResult, RetrieverBase

if TYPE_CHECKING:
    from rag_experiments.records import Chunk

METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
"""bm25s's scoring variants."""


def index_text(chunk: Chunk, index_title: bool) -> str:
    """The text indexed for a chunk: ``title + " " + text`` when ``index_title`` and the chunk
    has a title (Anserini's BEIR "flat" index: one field of title and text), else ``text``."""
    title = chunk.metadata.get("title") if index_title else None
    return f"{title} {chunk.text}" if title else chunk.text


class Bm25Retriever(RetrieverBase):
    """Top-k BM25 retrieval (``retriever=bm25``); hit scores are BM25 scores (>= 0), each hit
    carries its ``bm25`` rank. Chunks with score 0 (no query term) are not returned.

    Args:
        top_k: Chunks handed to the generator (>= 1).
        depth: Length of the ranking kept for retrieval metrics; None = ``top_k``.
        k1: Term-frequency saturation (>= 0).
        b: Length normalisation in [0, 1].
        method: ``lucene`` | ``robertson`` | ``atire`` | ``bm25l`` | ``bm25+``.
        delta: δ of ``bm25l``/``bm25+``.
        stemmer: PyStemmer algorithm (``porter``, ``english`` …) or None.
        stopwords: ``en`` or None.
        language: ``auto`` | ``en`` | ``cjk``: how words are found (see
            :attr:`~rag_experiments.index.bm25_params.Bm25Params.language`; ``auto`` analyses
            text without CJK characters exactly as ``en``).
        index_title: Index ``title + " " + text`` for chunks with a title.
        index_dir: Folder of the cached indexes (``paths.bm25_dir``).

    The defaults are :class:`~rag_experiments.index.bm25_params.Bm25Params`'s (and
    :data:`~rag_experiments.index.bm25_params.INDEX_TITLE`), as the config schema's are.

    Raises:
        ConfigError: A value out of range or an unknown method.
    """

    sources: ClassVar[tuple[str, ...]] = ("bm25",)

    def __init__(
        self,
        top_k: int = 5,
        depth: int | None = None,
        k1: float = Bm25Params.k1,
        b: float = Bm25Params.b,
        method: str = Bm25Params.method,
        delta: float = Bm25Params.delta,
        stemmer: str | None = Bm25Params.stemmer,
        stopwords: str | None = Bm25Params.stopwords,
        language: str = Bm25Params.language,
        index_title: bool = INDEX_TITLE,
        index_dir: str = ".cache/bm25",
    ) -> None:
        super().__init__(top_k, depth)
        if method not in METHODS:
            raise ConfigError(
                f"retriever.method must be one of {', '.join(METHODS)}, got {method!r}."
            )
        if k1 < 0 or not 0 <= b <= 1:
            raise ConfigError(
                f"retriever.k1 must be >= 0 and retriever.b in [0, 1], got {k1}, {b}."
            )
        if stopwords not in (None, "en"):
            raise ConfigError(f"retriever.stopwords must be en or null, got {stopwords!r}.")
        if language not in LANGUAGES:
            raise ConfigError(
                f"retriever.language must be one of {', '.join(LANGUAGES)}, got {language!r}."
            )
        self.params = Bm25Params(k1, b, method, delta, stemmer, stopwords, language=language)
        self.analyzer = Analyzer(self.params)
        self.index_title = index_title
        self.store = Bm25Store(index_dir)
        self.model: Any = None
        self.chunks: list[Chunk] = []
        self._lock = threading.Lock()

    def prepare(self, chunks: list[Chunk], corpus_key: str) -> None:
        """Build (or reuse) the BM25 index of ``chunks`` under ``index_dir``.

        Raises:
            VectorIndexError: No chunks, or the index cannot be written.
        """
        texts = [index_text(c, self.index_title) for c in chunks]
        key = f"{corpus_key}|title={int(self.index_title)}"
        self.model = self.store.ensure(texts, [c.id for c in chunks], key, self.params)
        self.chunks = list(chunks)

    def describe(self) -> dict[str, str]:
        """``retriever`` tag plus the BM25 parameters."""
        return {**super().describe(), "retriever.bm25": self.params.key()}

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every chunk for ``query``, float32 ``(n_chunks,)``; all 0.0 when the
        query has no token after analysis (bm25s raises ``IndexError`` on an empty query).

        Raises:
            VectorIndexError: Not prepared.
        """
        if self.model is None:
            raise VectorIndexError(
                "Bm25Retriever is not prepared; call prepare(chunks, corpus_key) first "
                "(BaselineTarget.prepare does this)."
            )
        (tokens,) = self.analyzer.tokens([query])
        return self._scores(tokens)

    def _scores(self, tokens: list[str]) -> np.ndarray:
        if not tokens:
            return np.zeros(len(self.chunks), dtype=np.float32)
        with (
            self._lock
        ):  # bm25s keeps no per-query state, but its caches are not documented thread-safe
            return np.asarray(self.model.get_scores(tokens), dtype=np.float32)

    def retrieve(self, query: str) -> RetrievalResult:
        """Rank chunks for one query by BM25, ``ranking_depth`` deep (fewer when fewer chunks
        share a term with the query); ties keep corpus order.

        A query with no token after analysis (only stop words, emoji or punctuation) ranks
        nothing, noted ``no_query_terms``; one whose terms are in no chunk ranks nothing,
        noted ``no_matching_terms``.

        Raises:
            VectorIndexError: Not prepared.
        """
        if self.model is None:
            self.scores(query)  # raises: not prepared
        (tokens,) = self.analyzer.tokens([query])
        if not tokens:
            return RetrievalResult(note="no_query_terms")
        scores = self._scores(tokens)
        if not scores.any():
            return RetrievalResult(note="no_matching_terms")
        k = min(self.ranking_depth, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]
        hits = []
        for rank, i in enumerate((int(i) for i in top if scores[i] > 0), start=1):
            c = self.chunks[i]
            hits.append(Hit(c.id, c.doc_id, c.text, float(scores[i]), {"bm25": rank}))
        return RetrievalResult.from_hits(hits, self.top_k)
