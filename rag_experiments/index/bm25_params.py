"""The parameters of a BM25 index and their defaults, in a module that imports nothing of the
package: the config schema reads its BM25 defaults from here at start-up without loading the
index code (``filelock``, the Chroma index)."""

from __future__ import annotations

from dataclasses import dataclass

LANGUAGES = ("auto", "en", "cjk")
"""Values of ``retriever.language`` (see :attr:`Bm25Params.language`)."""

INDEX_TITLE = True
"""Default of ``index_title``: index ``title + ' ' + text`` (Anserini's BEIR "flat" index)."""


@dataclass(frozen=True)
class Bm25Params:
    """How texts are analysed and scored (every field is part of the index identity). The
    defaults are Pyserini's BEIR "flat" settings, and the one source of every BM25 default:
    the config schema (``Bm25Conf``) and :class:`~rag_experiments.retrieval.bm25.Bm25Retriever`
    read them from here.

    Attributes:
        k1: Term-frequency saturation (>= 0).
        b: Length normalisation in [0, 1].
        method: bm25s scoring variant: ``lucene``, ``robertson``, ``atire``, ``bm25l``,
            ``bm25+`` (Kamphuis et al., ECIR 2020).
        delta: The δ of ``bm25l`` and ``bm25+`` (ignored by the others).
        stemmer: A PyStemmer algorithm (``porter``: Porter 1980 as Lucene's
            ``PorterStemFilter``; ``english``: Snowball English), or None for no stemming.
        stopwords: ``en`` (Lucene's 33 English stop words, bm25s's list), or None.
        lower: Lower-case before tokenising.
        language: How words are found (:data:`LANGUAGES`): ``auto`` (default) = runs of word
            characters, except that a run of CJK characters (Chinese, Japanese, Korean: written
            without spaces) becomes its overlapping bigrams as in Lucene's ``CJKAnalyzer``
            (:mod:`rag_experiments.text.cjk`) — a text without CJK characters is analysed
            exactly as ``en``; ``en`` = runs of word characters only (a CJK sentence is one
            token); ``cjk`` = Lucene's ``CJKAnalyzer``: CJK bigrams, English stop words, no
            stemming (``stemmer`` ignored).
    """

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    delta: float = 0.5
    stemmer: str | None = "porter"
    stopwords: str | None = "en"
    lower: bool = True
    language: str = "auto"

    def key(self) -> str:
        """The parameters as text for the index key."""
        return (
            f"bm25-{self.method}-k1={self.k1:g}-b={self.b:g}-d={self.delta:g}"
            f"-stem={self.stemmer}-stop={self.stopwords}-lower={int(self.lower)}"
            f"-lang={self.language}"
        )
