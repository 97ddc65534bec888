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
