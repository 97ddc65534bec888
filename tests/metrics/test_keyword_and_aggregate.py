"""Keyword coverage and aggregation, checked by hand."""

from __future__ import annotations

import math

import pytest

from rag_experiments.metrics.aggregate import aggregate, percentile, to_metrics
from rag_experiments.metrics.keyword_coverage import KeywordCoverage
from rag_experiments.records import MetricValue, RagResponse, Sample


def test_keyword_coverage_counts_case_insensitive_matches():
    s = Sample(id="a", user_input="q?", keywords=["MFA", "help desk", "90 days", "badge"])
    r = RagResponse(
        retrieved_contexts=["Enable mfa for all.", "Call the Help\n desk within 90 days."]
    )
    out = KeywordCoverage().evaluate([s], [r])[0]["keyword_coverage"]
    assert out.value == pytest.approx(3 / 4)


@pytest.mark.parametrize(
    ("sample", "resp", "reason"),
    [
        (Sample(id="a", user_input="q?", keywords=[]), RagResponse(), "no_keywords"),
        (
            Sample(id="a", user_input="q?", keywords=["x"], answerable=False),
            RagResponse(),
            "unanswerable",
        ),
        (
            Sample(id="a", user_input="q?", keywords=["x"]),
            RagResponse(error="timeout"),
            "target_error",
        ),
    ],
)
def test_keyword_coverage_nan_reasons(sample, resp, reason):
    out = KeywordCoverage().evaluate([sample], [resp])[0]["keyword_coverage"]
    assert math.isnan(out.value) and out.reason == reason


def test_aggregate_mean_n_valid_and_groups():
    values = [
        {"m": MetricValue(1.0)},
        {"m": MetricValue(0.5)},
        {"m": MetricValue.nan("no_claims")},
        {"m": MetricValue(0.0)},
    ]
    aggs = aggregate(["m"], values, ["a", "a", "b", None])
    flat = to_metrics(aggs)
    assert flat["m"] == pytest.approx(0.5)
    assert flat["m_n_valid"] == 3
    assert flat["by_type/a/m"] == pytest.approx(0.75)
    assert flat["by_type/a/m_n_valid"] == 2
    assert "by_type/b/m" not in flat  # all-NaN: no mean logged
    assert flat["by_type/b/m_n_valid"] == 0


def test_all_nan_metric_has_no_mean_and_zero_n_valid():
    flat = to_metrics(aggregate(["x"], [{"x": MetricValue.nan("timeout")}] * 3, [None] * 3))
    assert flat == {"x_n_valid": 0.0}


def test_percentile_ignores_nan():
    assert percentile([1.0, 2.0, math.nan, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert math.isnan(percentile([], 95))


# Characters that could break "normalise each context, then join" vs "join, then normalise":
# every kind of whitespace, combining marks (alone, at a context's start), compatibility forms
# that NFKC turns into spaces or into several letters, case foldings that change length,
# Hangul jamo that compose, punctuation and digits; and any code point now and then.
_TRICKY = (
    list("aAbZ19_-.,'")
    + [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2003"]
    + ["\u2028", "\u3000", "\u0301", "\u0308", "\u0344", "\u00b4", "\u00a8", "\ufb01", "\u2460"]
    + ["\u00df", "\u03a3", "\u03c2", "\u0130", "\u1e9e", "\u1100", "\u1161", "\u11a8", "\uac00"]
    + ["\uff21", "\u2126", "\u212b", "e\u0301", "\u0041\u030a", "the", "and", "2"]
)


def _random_contexts(rng) -> list[str]:
    return [
        "".join(
            rng.choice(_TRICKY) if rng.random() < 0.8 else chr(rng.randrange(0x30000))
            for _ in range(rng.randint(0, 12))
        )
        for _ in range(rng.randint(0, 5))
    ]


def test_keyword_haystack_equals_norm_of_the_joined_contexts():
    import random
    import re

    from rag_experiments.metrics.keyword_coverage import _norm, haystack

    # re's \s and str.strip()/isspace() agree on every code point
    every = "".join(map(chr, range(0x110000)))
    assert {c for c in every if c.isspace()} == set(re.findall(r"\s", every))
    rng = random.Random(5)
    for _ in range(3000):
        contexts = _random_contexts(rng)
        assert haystack(contexts) == _norm(" ".join(contexts)), contexts


def test_context_words_equal_the_words_of_the_joined_contexts():
    import random

    from rag_experiments.metrics.keyword_faithfulness import content_words, contexts_words
    from rag_experiments.text.stop_words import ENGLISH_STOP_WORDS

    rng = random.Random(6)
    for _ in range(3000):
        contexts = _random_contexts(rng)
        joined = content_words(" ".join(contexts), ENGLISH_STOP_WORDS)
        assert contexts_words(contexts, ENGLISH_STOP_WORDS) == joined, contexts
