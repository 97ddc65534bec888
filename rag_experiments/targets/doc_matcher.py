"""Which corpus document a context returned by a black-box endpoint comes from.

Doc-level retrieval metrics (``Hit@k``, ``MRR@k`` …) rank document ids. An endpoint that returns
only context texts gives none, so :class:`~rag_experiments.targets.http.HttpTarget` maps each
context to a corpus document by text, with the normalisation of the chunk-level matching rule
(:mod:`rag_experiments.text.overlap`: NFKC, case-folded, ``\\w+`` word tokens):

1. A context **belongs to** the first document, in corpus order, whose normalised text
   contains the context's normalised text as a run of whole words (a verbatim chunk of it,
   whatever its punctuation, case or line breaks).
2. Otherwise it belongs to the document holding the largest share of the context's distinct
   words, ``|T(ctx) ∩ T(doc)| / |T(ctx)|``, when that share is at least ``min_overlap``
   (default 0.7, the chunk-level default); ties go to the first document in corpus order.
   This catches contexts the endpoint rewrote slightly (a heading prefixed, whitespace or
   markup changed).
3. Otherwise, or when the context has no word token, it belongs to no document.

The document ranking is then the contexts' documents in rank order, deduplicated (first
occurrence wins, as the baseline does with chunks). A context that belongs to no document keeps
its rank as a placeholder id ``unmatched:<rank>`` that no sample judges relevant, so the
documents after it are not moved up: it counts as a retrieved, non-relevant document.

The ranking is only as deep as the contexts the endpoint returns (usually its ``top_k``), so
``Hit@10`` of a black-box endpoint that returns 5 contexts is ``Hit@5``; the baseline ranks
documents deeper. Word-overlap matching is generous (step 2): two documents sharing long
boilerplate passages can be confused, and a document in the corpus but not in the endpoint's
index can still be matched. Map the endpoint's own document ids
(``target.response.doc_ids`` or ``target.response.context_doc_id``) when it returns them:
they are used instead of this rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_experiments.records import Document

# The chunk-level rule's normalisation, reused so that both matchers see the same words.
from rag_experiments.text.overlap import NormalisedText, check_overlap

UNMATCHED_PREFIX = "unmatched:"
"""Prefix of the placeholder id of a context that belongs to no document."""


class CorpusDocMatcher:
    """Map context texts to corpus document ids (rule in the module docstring).

    Word-overlap shares are computed over an inverted index (word → documents) with one
    ``numpy.bincount`` per context, so a corpus of thousands of documents stays fast.

    Args:
        corpus: The documents, in corpus order (ties go to the earlier one).
        min_overlap: Share in (0, 1] of a context's distinct words a document must hold.

    Raises:
        ConfigError: ``min_overlap`` outside (0, 1].
    """

    def __init__(self, corpus: Sequence[Document], min_overlap: float = 0.7) -> None:
        self.min_overlap = check_overlap(
            min_overlap,
            "target.doc_min_overlap",
            "share of a context's words its document must hold",
        )
        self.doc_ids = [d.id for d in corpus]
        self._docs = [NormalisedText.of(d.text) for d in corpus]
        postings: dict[str, list[int]] = {}
        for i, doc in enumerate(self._docs):
            for token in doc.tokens:
                postings.setdefault(token, []).append(i)
        self._postings = {t: np.asarray(ix, dtype=np.int64) for t, ix in postings.items()}

    def match(self, context: str) -> str | None:
        """The id of the document ``context`` belongs to, or None.

        Args:
            context: One context text.

        Returns:
            A corpus document id, or None when no document contains the context and none
            holds ``min_overlap`` of its words.
        """
        ctx = NormalisedText.of(context)
        if ctx.empty or not self._docs:
            return None
        lists = [self._postings[t] for t in ctx.tokens if t in self._postings]
        if not lists:
            return None
        shared = np.bincount(np.concatenate(lists), minlength=len(self._docs))
        n = len(ctx.tokens)
        for i in np.flatnonzero(shared == n):  # only a doc with every word can contain it
            if ctx.padded in self._docs[int(i)].padded:
                return self.doc_ids[int(i)]
        best = int(np.argmax(shared))  # first index among ties
        if shared[best] / n >= self.min_overlap:
            return self.doc_ids[best]
        return None

    def rank(self, contexts: Sequence[str]) -> list[str]:
        """The document ranking of a context ranking.

        Args:
            contexts: Context texts, best first.

        Returns:
            Document ids in rank order, deduplicated (first occurrence wins); a context that
            belongs to no document is ``unmatched:<rank>`` (1-based).
        """
        ranking: list[str] = []
        for rank, text in enumerate(contexts, start=1):
            doc_id = self.match(text)
            ranking.append(doc_id if doc_id is not None else f"{UNMATCHED_PREFIX}{rank}")
        return list(dict.fromkeys(ranking))
