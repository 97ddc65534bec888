"""Keyword faithfulness: a cheap lexical proxy of faithfulness (no LLM).

``keyword_faithfulness`` ∈ [0, 1], higher is better::

    keyword_faithfulness = |W(response) ∩ W(contexts)| / |W(response)|

where W(text) is the set of *content words* of the text: word tokens (``\\w+`` after Unicode
NFKC and case folding) that are not English stop words (scikit-learn's
``ENGLISH_STOP_WORDS``, 318 words) and are at least 3 characters long or hold a digit (so
"2" in "2 business days" counts). W(contexts) is taken over all retrieved contexts.

It is only a proxy: it rewards copying words from the contexts and cannot see a claim that
recombines supported words into an unsupported statement ("approved by the manager" vs "not
approved by the manager"), nor a faithful paraphrase. Use ``faithfulness`` (LLM-judged) for
decisions; this one is free and shows gross hallucination at no cost.

Edges: target failed → NaN ``target_error``; no answer recorded → NaN ``no_response``; a refusal
(:func:`~rag_experiments.metrics.refusal.is_refusal`) → NaN ``refusal``; a response without any
content word (empty, or only stop words) → NaN ``no_content_words``; contexts ``[]`` or only
blank texts → 0.0 flagged ``empty_context``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from rag_experiments.common.memo import forgetting
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.metrics.judge import has_context
from rag_experiments.metrics.refusal import compile_patterns, is_refusal
from rag_experiments.protocols import MetricBase
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.text.normalize import word_tokens
from rag_experiments.text.stop_words import ENGLISH_STOP_WORDS


def _stop_words() -> frozenset[str]:
    return ENGLISH_STOP_WORDS  # scikit-learn's list, copied (its import costs seconds)


def content_words(text: str, stop_words: frozenset[str]) -> set[str]:
    """W(text): the content words of ``text`` (rule in the module docstring)."""
    words = word_tokens(text)
    return {
        w for w in words if w not in stop_words and (len(w) >= 3 or any(ch.isdigit() for ch in w))
    }


@functools.lru_cache(maxsize=4096)
def _context_words(text: str, stop_words: frozenset[str]) -> frozenset[str]:
    """W(text) of one context, memoised (a run sees the same chunk texts for many questions)."""
    return frozenset(content_words(text, stop_words))


def contexts_words(contexts: Sequence[str], stop_words: frozenset[str]) -> frozenset[str]:
    """W(contexts): the content words of the contexts joined by spaces, as the union of each
    context's content words.

    The two are equal: a space never composes with a neighbour under NFKC nor starts a
    reordering span (it is a starter with no composition), case folding maps each character on
    its own, and a ``\\w+`` token never spans a space; so the tokens of ``a + " " + b`` are the
    tokens of ``a`` then those of ``b`` (a test checks it on random Unicode).
    """
    return frozenset().union(*(_context_words(c, stop_words) for c in contexts))


class KeywordFaithfulness(MetricBase):
    """Share of the response's content words found in its retrieved contexts.

    Args:
        refusal_patterns: Extra refusal patterns (see :mod:`~rag_experiments.metrics.refusal`).
        prefix: Column-name prefix.
    """

    name = "keyword_faithfulness"
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "keyword_faithfulness",
                True,
                0.0,
                1.0,
                "share of the response's content words found in the contexts (a cheap proxy, "
                "no LLM)",
                "this project (a lexical proxy of faithfulness)",
                key=120,
            ),
        )
    )

    def __init__(self, refusal_patterns: Sequence[str] | None = None, prefix: str = "") -> None:
        self.refusal_patterns = compile_patterns(refusal_patterns)
        self.prefix = prefix
        self._stop = _stop_words()

    def specs(self) -> list[MetricSpec]:
        """One spec: ``keyword_faithfulness`` in [0, 1], higher is better."""
        return [self.declaration.output(self.name).spec(self.prefix)]

    @forgetting(_context_words)
    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]:
        """Per-row values; see the module docstring for the formula and the edges."""
        return [
            {self.prefix + self.name: self._one(resp)}
            for _, resp in zip(samples, responses, strict=True)
        ]

    def _one(self, resp: RagResponse) -> MetricValue:
        if resp.unanswered:
            return MetricValue.nan(resp.unanswered)
        if is_refusal(resp.response, self.refusal_patterns):
            return MetricValue.nan("refusal")
        words = content_words(resp.response, self._stop)
        if not words:
            return MetricValue.nan("no_content_words")
        if not has_context(resp.retrieved_contexts):
            return MetricValue(0.0, "empty_context")
        found = contexts_words(resp.retrieved_contexts, self._stop)
        return MetricValue(len(words & found) / len(words))
