"""``tracking.metrics``: which summary values become MLflow metrics (picked by hand from a
small summary), and the console table of a run."""

from __future__ import annotations

import math

import pytest

from rag_experiments.console import summary_table
from rag_experiments.errors import ConfigError
from rag_experiments.metrics.aggregate import Aggregate, to_metrics
from rag_experiments.records import ColumnSource, MetricSpec, MetricValue
from rag_experiments.tracking.selection import select_metrics

AGGS = [
    Aggregate("nDCG@10", "all", 0.5, 4, 0, 0.25, 0.75),
    Aggregate("Hit@1", "all", 0.25, 4, 0, 0.0, 0.5),
    Aggregate("faithfulness", "all", math.nan, 0, 4),
    Aggregate("nDCG@10", "procedural", 0.75, 2, 0, 0.5, 1.0),
    Aggregate("nDCG@10", "compliance", 0.25, 1, 0, 0.25, 0.25),
    Aggregate("Hit@1", "procedural", 0.5, 2, 0, 0.0, 1.0),
]
NAMES = ["nDCG@10", "Hit@1", "faithfulness"]
SPECS = [MetricSpec("nDCG@10", key=0), MetricSpec("Hit@1"), MetricSpec("faithfulness", key=6)]
"""The key metrics carry a priority (as :func:`~rag_experiments.metrics.keys.declared_specs`
gives them: nDCG@10 and faithfulness are key metrics, Hit@1 is not)."""
RUN_VALUES = {"n_samples": 4.0, "latency_ms_p50": 12.5, "judge.errors.timeout": 1.0}


def test_headline_keeps_key_metrics_types_with_two_values_and_run_values() -> None:
    values = {**to_metrics(AGGS), **RUN_VALUES}
    assert select_metrics(values, SPECS) == {
        "nDCG@10": 0.5,
        "nDCG@10_ci_low": 0.25,
        "nDCG@10_ci_high": 0.75,
        "nDCG@10_n_valid": 4.0,
        "faithfulness_n_valid": 0.0,  # a key metric without a value: n_valid 0 says so
        "by_type/procedural/nDCG@10": 0.75,  # compliance has one value: not a type's mean
        **RUN_VALUES,
    }
    assert select_metrics(values, SPECS, "all") == values
    with pytest.raises(ConfigError, match="headline"):
        select_metrics(values, SPECS, "some")


def test_console_table_has_a_retrieval_block_an_answer_block_and_a_legend() -> None:
    specs = [MetricSpec(n) for n in NAMES]
    lines = summary_table(specs, AGGS)
    assert lines[1:] == [
        "  retrieval",
        "    nDCG@10               0.5000  [0.250, 0.750]      4",
        "    (+ 1 more retrieval metrics, every cutoff and level: average_results.csv)",
        "  answer",
        "    faithfulness               —                      0",
        "  mean over the n questions with a value; [95% CI] = bootstrap interval of the mean; "
        "n = questions with a value (why the others are NaN: per_query_results.csv)",
    ]
    assert lines[0].index("mean") + 4 == lines[2].index("0.5000") + 6  # right-aligned


def test_console_table_says_why_a_metric_has_no_value_and_shows_a_range_other_than_0_1() -> None:
    specs = [MetricSpec("faithfulness"), MetricSpec("answer_judge.accuracy_raw", True, 1.0, 5.0)]
    aggs = [
        Aggregate("faithfulness", "all", math.nan, 0, 3),
        Aggregate("answer_judge.accuracy_raw", "all", 1.0, 3, 0, 1.0, 1.0),
    ]
    rows = [
        {"faithfulness": MetricValue.nan("has_reference")},
        {"faithfulness": MetricValue.nan("parse_error")},
        {"faithfulness": MetricValue.nan("has_reference")},
    ]
    lines = summary_table(specs, aggs, values=rows)
    assert lines[1] == "  answer"
    assert lines[3].startswith("  answer grades on their own scale")
    faith, raw = lines[2], lines[4]
    assert faith.split() == [
        "faithfulness",
        "—",
        "0",
        "no",
        "value:",
        "has_reference",
        "(2",
        "of",
        "3)",
    ]
    # the worst grade reads as such: 1.00 of 5, not 1.0000
    assert raw.split() == ["answer_judge.accuracy_raw", "(1–5)", "1.00/5", "[1.00,", "1.00]", "3"]
    assert faith.index("—") + 1 == raw.index("1.00/5") + 6  # the mean column stays aligned


def test_a_column_that_applies_to_no_question_is_named_not_shown() -> None:
    # context_utilization scores questions without a reference; every question here has one
    specs = [MetricSpec("context_precision"), MetricSpec("context_utilization")]
    aggs = [
        Aggregate("context_precision", "all", 0.5, 2, 0, 0.4, 0.6),
        Aggregate("context_utilization", "all", math.nan, 0, 2),
    ]
    rows = [
        {"context_precision": MetricValue(0.4), "context_utilization": NOT_APPLICABLE_NAN},
        {"context_precision": MetricValue(0.6), "context_utilization": NOT_APPLICABLE_NAN},
    ]
    lines = summary_table(specs, aggs, values=rows)
    assert [line.split()[0] for line in lines[1:3]] == ["answer", "context_precision"]
    assert lines[3] == (
        "    (context_utilization not shown: scored only for questions without a reference, "
        "and every question has one)"
    )
    # one question without a reference: the column applies, its row is shown
    rows[1] = {"context_precision": MetricValue.nan("no_reference")}
    assert any(
        line.split()[0] == "context_utilization"
        for line in summary_table(specs, aggs, values=rows)[1:]
    )


NOT_APPLICABLE_NAN = MetricValue.nan("has_reference")


def test_console_table_ends_a_repeated_metric_row_with_its_judge_noise() -> None:
    specs = [MetricSpec("faithfulness"), MetricSpec("context_recall")]
    aggs = [
        Aggregate("faithfulness", "all", 0.4444, 12, 0, 0.403, 0.486),
        Aggregate("context_recall", "all", 0.5, 10, 2, 0.4, 0.6),
    ]
    run = {"faithfulness.judge_sd": 1 / 6, "faithfulness.flip_rate": 1 / 3}
    lines = summary_table(specs, aggs, run_metrics=run)
    assert lines[2].endswith("  12  judge sd 0.167, flips 33%")
    assert lines[3].endswith("  10")  # judged once: no noise to show


def test_specs_carry_their_key_priority_and_judge_as_plain_data() -> None:
    """What the tracker reads of a metric travels on its specs (issue 37): the key priority
    declared for the column (nDCG@10: 10, faithfulness: 70 in the built-in declarations), and
    for a judged metric the judge's model with the audit record that explains the value."""
    from rag_experiments.llm.fake import FakeChat
    from rag_experiments.metrics.faithfulness import Faithfulness
    from rag_experiments.metrics.keys import declared_specs, keyed
    from rag_experiments.metrics.retrieval import RetrievalMetrics

    retrieval = {
        s.name: s for s in declared_specs(RetrievalMetrics(cutoffs=(10,), measures=("nDCG", "MAP")))
    }
    assert retrieval["nDCG@10"].key == 10 and retrieval["MAP@10"].key is None
    assert all(s.source is None for s in retrieval.values())  # computed by code
    (faith,) = declared_specs(Faithfulness(judge=FakeChat(model="judge-m")))
    assert faith.key == 70
    assert faith.source == ColumnSource("judge-m", "faithfulness", "rationale")
    (unjudged,) = declared_specs(Faithfulness(judge=None))
    assert unjudged.source == ColumnSource("judge", "faithfulness", "rationale")
    # specs read back from a run's metric_specs.json carry no key: keyed() adds it
    read_back = [MetricSpec("nDCG@10"), MetricSpec("MAP@10"), MetricSpec("nDCG@10", key=1)]
    assert [s.key for s in keyed(read_back)] == [10, None, 1]
    assert MetricSpec("nDCG@10", key=10) == MetricSpec("nDCG@10")  # not part of equality
