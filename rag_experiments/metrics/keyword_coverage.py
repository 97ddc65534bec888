"""Keyword coverage of the retrieved contexts (no LLM).

``keyword_coverage`` = |{k ∈ keywords : k occurs in the top-k contexts}| / |keywords|, matched
case-insensitively as a substring of the concatenated contexts after collapsing whitespace.
It tells whether retrieval surfaced the terms an answer needs; it says nothing about the
answer. NaN with ``no_keywords`` when the sample has none, ``unanswerable`` for unanswerable
samples, ``target_error`` when the target failed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from rag_experiments.common.memo import forgetting
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.protocols import MetricBase
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


_norm_context = functools.lru_cache(maxsize=4096)(_norm)
"""``_norm`` of one context text, memoised (a run sees the same chunk texts for many questions)."""


def haystack(contexts: Sequence[str]) -> str:
    """The contexts as keywords are searched in: ``_norm(" ".join(contexts))``, computed as the
    non-empty ``_norm`` of each context joined by single spaces.

    The two are equal: ``_norm`` turns each maximal whitespace run into one space and strips
    the ends, so both leave the non-whitespace segments of all contexts, in order, one space
    apart (``re``'s ``\\s`` and ``str.strip`` agree on whitespace, and case folding maps each
    character on its own; a test checks it on random Unicode).
    """
    return " ".join(n for n in map(_norm_context, contexts) if n)


class KeywordCoverage(MetricBase):
    """Share of a sample's keywords found in its retrieved contexts."""

    name = "keyword_coverage"
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "keyword_coverage",
                True,
                0.0,
                1.0,
                "share of the sample's keywords in the contexts",
                "this project",
                key=60,
                answer_level=False,
            ),
        )
    )

    def specs(self) -> list[MetricSpec]:
        """One spec: ``keyword_coverage`` in [0, 1], higher is better."""
        return [self.declaration.output(self.name).spec()]

    @forgetting(_norm_context)
    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]:
        """Per-sample coverage; see the module docstring for the formula and NaN reasons."""
        out = []
        for sample, resp in zip(samples, responses, strict=True):
            out.append({self.name: self._one(sample, resp)})
        return out

    @staticmethod
    def _one(sample: Sample, resp: RagResponse) -> MetricValue:
        if not sample.answerable:
            return MetricValue.nan("unanswerable")
        keywords = [k for k in (_norm(k) for k in sample.keywords) if k]
        if not keywords:
            return MetricValue.nan("no_keywords")
        if resp.error is not None:
            return MetricValue.nan("target_error")
        text = haystack(resp.retrieved_contexts)
        found = sum(1 for k in keywords if k in text)
        return MetricValue(found / len(keywords))
