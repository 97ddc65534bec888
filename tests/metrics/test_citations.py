"""ALCE citation recall and precision: hand-computed values for good, wrong, fabricated,
redundant and missing citations, inline ([k] markers) and structured (by chunk id, doc id and
text, through the recorded target)."""

from __future__ import annotations

import math

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.citations import (
    CitationAccuracy,
    citation_scores,
    match_source,
    parse_citations,
)
from rag_experiments.metrics.claim_layer import ClaimLayer, SentenceClaimExtractor
from rag_experiments.records import Citation, RagResponse, Sample
from rag_experiments.targets.recorded import RecordedTarget

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


# --- structured citations (RagResponse.citations) ---------------------------------------------
ANSWER = (
    "Form AR-1 requests an account. The Service Desk needs 2 days. "
    "Badges are collected at reception."
)
IDS = ["it#0", "it#1", "hr#0"]  # documents: it (contexts 1, 2), hr (context 3)


def _recorded(citations, ids=IDS, doc_ids=None, response=ANSWER):
    """Score a row as the recorded target answers it (the fake target of these tests): the
    row is validated as a dataset line is, then copied into a RagResponse."""
    sample = Sample.model_validate(
        {
            "id": "q",
            "user_input": "?",
            "recorded": {
                "response": response,
                "retrieved_contexts": CONTEXTS,
                "retrieved_ids": ids,
                "retrieved_doc_ids": doc_ids,
                "citations": citations,
            },
        },
        strict=True,
    )
    resp = RecordedTarget(doc_ids_from_text=False).answer(sample)
    layer = ClaimLayer(SentenceClaimExtractor(), Substring())
    values, record = CitationAccuracy(layer=layer).score_row(sample, resp)
    return values["citation_recall"], values["citation_precision"], record


def test_structured_citations_by_chunk_id_good_wrong_and_missing_by_hand():
    # s1 cites it#0 (context 1 holds it: good); s2 cites hr#0 (context 3: wrong); s3 nothing.
    # recall = 1/3 (s1); precision = 1/2 (2 citations, 1 precise)
    recall, precision, record = _recorded(
        [
            {"statement": "Form AR-1 requests an account.", "chunk_id": "it#0"},
            {"statement": "The Service Desk needs 2 days", "chunk_id": "hr#0"},
        ]
    )
    assert (recall.value, precision.value) == (pytest.approx(1 / 3), pytest.approx(1 / 2))
    assert record["citation_source"] == "structured"
    assert [s["cites"] for s in record["statements"]] == [[0], [2], []]


def test_structured_citations_by_text_exact_overlap_and_fabricated_by_hand():
    # s1 by exact text (context 1, whitespace differs): good.
    # s2 by overlap: {badges, are, collected, at, the, reception, desk} vs context 3's
    #    {badges, are, collected, at, reception}: 5/7 = 0.714 >= 0.7 -> context 3: wrong.
    # s3 by a text no context holds (no word in common, share 0 < 0.7): fabricated.
    # recall = 1/3; precision = 1/3
    recall, precision, record = _recorded(
        [
            {
                "statement": "form ar-1 requests an account",
                "text": "Form AR-1  requests\nan account.",
            },
            {
                "statement": "The Service Desk needs 2 days.",
                "text": "Badges are collected at the reception desk",
            },
            {"statement": "Badges are collected at reception.", "text": "Visitors sign the book."},
        ]
    )
    assert (recall.value, precision.value) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert [s["cites"] for s in record["statements"]] == [[0], [2], [None]]


def test_structured_citations_by_doc_id_unknown_ids_and_unattached_by_hand():
    # s2 cites document "it": its contexts 1 and 2 (chunk ids it#0, it#1), joined: they hold
    #    s2 -> good. s1 cites an unknown chunk id and document: fabricated. A citation of a
    #    statement the answer does not make counts and is never precise. s3 cites nothing.
    # recall = 1/3 (s2); precision = 1/3 (s2's of 3 citations)
    recall, precision, record = _recorded(
        [
            {"statement": "Form AR-1 requests an account.", "chunk_id": "x#9", "doc_id": "x"},
            {"statement": "The Service Desk needs 2 days.", "doc_id": "it"},
            {"statement": "Laptops are leased.", "chunk_id": "it#0"},
        ]
    )
    assert (recall.value, precision.value) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert [s["cites"] for s in record["statements"]] == [[None], [[0, 1]], []]
    assert record["unattached_citations"] == 1
    # no chunk ids, one document id per context: the document's rank names its context
    recall, precision, _ = _recorded(
        [{"statement": "Badges are collected at reception.", "doc_id": "hr"}],
        ids=None,
        doc_ids=["it", "it2", "hr"],
    )
    assert (recall.value, precision.value) == (pytest.approx(1 / 3), 1.0)


def test_structured_redundant_citation_and_empty_list_by_hand():
    # s1 cites context 1 (by id) and context 3 (by text): joint holds, 1 alone holds,
    # 3 alone does not and 1 suffices without it -> 3 irrelevant. recall 1, precision 1/2.
    recall, precision, _ = _recorded(
        [
            {"statement": "Form AR-1 requests an account.", "chunk_id": "it#0"},
            {"statement": "Form AR-1 requests an account.", "text": CONTEXTS[2]},
        ],
        response="Form AR-1 requests an account [2].",  # the marker is ignored, not the text
    )
    assert (recall.value, precision.value) == (1.0, 0.5)
    # an empty list: the answer cites nothing (its markers are not read either)
    recall, precision, record = _recorded([], response="Form AR-1 requests an account [1].")
    assert recall.value == 0.0
    assert math.isnan(precision.value) and precision.reason == "no_citations"


def test_citation_matching_order_and_threshold():
    ctx = ["alpha beta gamma delta", "alpha beta gamma epsilon zeta"]
    ids = ["a#0", "b#0"]
    # chunk id first, even when the text names the other context
    assert match_source(Citation("s", chunk_id="b#0", text=ctx[0]), ctx, ids, None) == 1
    # an unknown chunk id falls through to the doc id, then to the text
    assert match_source(Citation("s", chunk_id="z", doc_id="a"), ctx, ids, None) == 0
    assert match_source(Citation("s", chunk_id="z", text="gamma  epsilon"), ctx, ids, None) == 1
    # overlap 3/4 = 0.75 with both contexts: the higher rank wins; below the threshold: None
    quote = Citation("s", text="alpha beta gamma omega")
    assert match_source(quote, ctx, None, None) == 0
    assert match_source(quote, ctx, None, None, min_overlap=0.8) is None
    with pytest.raises(ConfigError, match="text_min_overlap"):
        CitationAccuracy(text_min_overlap=0.0)
