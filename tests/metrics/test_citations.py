"""ALCE citation recall and precision: hand-computed values for good, wrong, fabricated,
redundant and missing citations."""

from __future__ import annotations

import math

import pytest

from rag_experiments.metrics.citations import CitationAccuracy, citation_scores, parse_citations
from rag_experiments.metrics.claim_layer import ClaimLayer, SentenceClaimExtractor
from rag_experiments.records import RagResponse, Sample

CONTEXTS = [
    "Form AR-1 requests an account.",
    "The Service Desk needs 2 days.",
    "Badges are collected at reception.",
]


class Substring:
    """Checker: a statement is entailed by a passage holding it (case-insensitive, no final
    period)."""

    batch = True

    def check(self, claims, texts, question=""):
        from rag_experiments.metrics.claim_layer import Checked, Usage

        table = tuple(tuple(c.lower().rstrip(".") in t.lower() for t in texts) for c in claims)
        return Checked(table), Usage()


def _score(response, ids=None):
    layer = ClaimLayer(SentenceClaimExtractor(), Substring())
    resp = RagResponse(response=response, retrieved_contexts=CONTEXTS, retrieved_ids=ids)
    values, record = CitationAccuracy(layer=layer).score_row(Sample(id="q", user_input="?"), resp)
    return values["citation_recall"], values["citation_precision"], record


def test_markers_are_parsed_and_removed():
    assert parse_citations("Badges are collected at reception [3][1, 9].", 3, None) == (
        "Badges are collected at reception.",
        [2, 0, None],
    )
    assert parse_citations("X [c2].", 3, ["c1", "c2", "c3"]) == ("X.", [1])


def test_good_wrong_and_missing_citations_by_hand():
    # s1 good ([1] entails it); s2 wrong ([3] does not); s3 cites nothing
    recall, precision, record = _score(
        "Form AR-1 requests an account [1]. The Service Desk needs 2 days [3]. "
        "Badges are collected at reception."
    )
    assert recall.value == pytest.approx(1 / 3)  # s1 only
    assert precision.value == pytest.approx(1 / 2)  # 2 citations, [1] precise, [3] not
    assert record["rationale"][2] == "Badges are collected at reception. | cites nothing"


def test_a_redundant_citation_is_irrelevant_and_a_needed_one_is_not():
    # s1 cites [1, 3]: joint entails; [1] alone entails (precise); [3] alone does not, and
    # without it [1] still entails -> [3] irrelevant. precision 1/2, recall 1.
    recall, precision, _ = _score("Form AR-1 requests an account [1, 3].")
    assert (recall.value, precision.value) == (1.0, 0.5)


def test_a_fabricated_citation_fails_its_statement():
    recall, precision, _ = _score("Form AR-1 requests an account [7].", None)
    assert (recall.value, precision.value) == (0.0, 0.0)
    recall, precision, _ = _score("Form AR-1 requests an account [c1].", ["c1", "c2", "c3"])
    assert (recall.value, precision.value) == (1.0, 1.0)


def test_no_citation_at_all_recall_zero_precision_nan():
    recall, precision, _ = _score("Form AR-1 requests an account.")
    assert recall.value == 0.0
    assert math.isnan(precision.value) and precision.reason == "no_citations"


def test_joint_support_counts_both_citations():
    def entails(passage, s):
        return "AR-1" in passage and "2 days" in passage

    statements = [("AR-1 takes 2 days", [0, 1])]
    recall, precision = citation_scores(statements, CONTEXTS, entails)
    # joint entails; neither alone does; removing either breaks it -> both precise
    assert (recall.value, precision.value) == (1.0, 1.0)
