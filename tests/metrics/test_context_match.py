"""The text-matching rule of chunk-level metrics, on cases worked out by hand."""

from __future__ import annotations

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.context_match import context_matches, has_words, match_contexts

# 12 distinct tokens: the line manager requests account service desk creates it within two days
SPLIT_REF = "The line manager requests the account. The Service Desk creates it within two days."


def test_context_holding_the_whole_reference_matches_even_at_full_overlap():
    ref = "Passwords expire every 90 days."
    ctx = "Section 4. Passwords expire every 90 days. Reuse of the last 5 passwords is blocked."
    assert context_matches(ref, ctx, min_overlap=1.0)


@pytest.mark.parametrize(
    ("context", "min_overlap", "expected"),
    [
        ("alpha beta zeta", 0.5, True),  # 2 of 4 reference tokens: 2/4 = 0.5 ≥ 0.5
        ("alpha beta zeta", 0.6, False),  # 0.5 < 0.6, and no containment either way
        ("alpha zeta", 0.5, False),  # 1/4
        ("alpha alpha alpha zeta", 0.5, False),  # distinct tokens: still 1/4
        ("beta gamma", 0.9, True),  # 2/4, but a whole-word slice of the reference
        ("gamma beta", 0.9, False),  # same words, not a slice (order differs)
        ("alph bet", 0.1, False),  # word pieces are not words
    ],
)
def test_token_overlap_threshold_and_containment(context, min_overlap, expected):
    assert context_matches("alpha beta gamma delta", context, min_overlap) is expected


def test_punctuation_case_and_unicode_forms_do_not_matter():
    ref = "Access Request Form AR-1, within 2 business days; ask the ﬁnance team (Straße 5)."
    ctx = "ACCESS request form ar 1 WITHIN ２ business-days ask the finance TEAM strasse 5"
    # NFKC: "ﬁ" → "fi", full-width "２" → "2"; casefold: "Straße" → "strasse".
    assert context_matches(ref, ctx, min_overlap=1.0)


def test_reference_split_across_two_chunks():
    first = "Section 3. The line manager requests the account."  # 5 of 12 tokens, not a slice
    second = "The Service Desk creates it within two days. Passwords expire yearly."  # 8 of 12
    assert not context_matches(SPLIT_REF, first, 0.5)  # 5/12 < 0.5
    assert context_matches(SPLIT_REF, second, 0.5)  # 8/12 ≥ 0.5
    assert context_matches(SPLIT_REF, first, 5 / 12)
    # A chunk that is exactly one piece of the reference covers it whatever its share (5/12).
    assert context_matches(SPLIT_REF, "the line manager requests the account", 0.9)
    # Rank order decides which chunk finds the reference; the other finds nothing.
    assert match_contexts([SPLIT_REF], [first, second], 0.5) == [None, 0]
    assert match_contexts([SPLIT_REF], [first, second], 0.4) == [0, None]


def test_a_context_covering_several_references_takes_the_first_not_found():
    refs = ["Invoices are approved by the finance manager.", "Payments are released on Fridays."]
    both = "Invoices are approved by the finance manager. Payments are released on Fridays."
    only_second = "Payments are released on Fridays after approval."
    assert match_contexts(refs, [both, only_second, both]) == [0, 1, None]
    assert match_contexts(refs, [only_second, both]) == [1, 0]
    assert match_contexts(refs, []) == []
    assert match_contexts([], [both]) == [None]


def test_texts_without_words_match_nothing():
    assert not context_matches("", "anything at all")
    assert not context_matches("— … —", "anything at all")
    assert not context_matches("real words here", "")
    assert not context_matches("real words here", " ,;. ")
    assert match_contexts(["", "real words"], ["x", "real words"]) == [None, 1]
    assert has_words("ok.") and not has_words(" -- ")


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5])
def test_bad_min_overlap_is_refused(bad):
    with pytest.raises(ConfigError, match="min_overlap"):
        context_matches("a", "a", bad)
    with pytest.raises(ConfigError, match="min_overlap"):
        match_contexts(["a"], ["a"], bad)
