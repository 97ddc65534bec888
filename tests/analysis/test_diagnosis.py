"""The diagnosis of a comparison: claim metrics grouped retriever / generator / overall, and
the one line naming the largest significant change."""

from __future__ import annotations

from rag_experiments.analysis.diagnosis import diagnosis_json, diagnosis_lines, headline
from rag_experiments.analysis.paired import PairedStat


def _stat(metric, diff, lo, hi, p=0.001, higher=True):
    return PairedStat(metric, "all", 30, 0.5, 0.5 + diff, diff, lo, hi, p, p, higher)


STATS = [
    _stat("claim_precision", -0.30, -0.38, -0.22),
    _stat("context_claim_precision", -0.10, -0.10, -0.10),
    _stat("noise_sensitivity_irrelevant", 0.12, 0.05, 0.19, higher=False),
    _stat("hallucination", 0.02, -0.01, 0.05, p=0.3, higher=False),
    _stat("nDCG@10", -0.5, -0.6, -0.4),
]


def test_the_largest_significant_drop_of_a_part_is_named_before_an_overall_one():
    assert headline(STATS) == (
        "the drop is in the generator's noise sensitivity (irrelevant chunks): "
        "+0.120 [+0.050, +0.190]"
    )


def test_groups_list_their_metrics_with_verdicts():
    lines = diagnosis_lines(STATS)
    assert lines[1] == "  retriever: context_claim_precision -0.100 [-0.100, -0.100] worse"
    assert lines[2].startswith("  generator: noise_sensitivity_irrelevant ↓ +0.120")
    assert lines[2].endswith("hallucination ↓ +0.020 [-0.010, +0.050]")
    assert lines[3].startswith("  overall: claim_precision -0.300")
    assert diagnosis_json(STATS)["groups"]["retriever"] == ["context_claim_precision"]


def test_a_gain_is_named_when_nothing_dropped_and_overall_only_when_no_part_changed():
    gain = [_stat("context_claim_recall", 0.2, 0.1, 0.3), _stat("claim_recall", 0.5, 0.4, 0.6)]
    assert headline(gain).startswith("the gain is in the retriever's claim recall")
    overall = [_stat("claim_f1", -0.2, -0.3, -0.1), _stat("hallucination", 0, 0, 0, p=1.0)]
    assert headline(overall).startswith("the drop is in claim F1: -0.200")


def test_no_claim_metrics_no_diagnosis_and_no_change_says_so():
    assert diagnosis_lines([_stat("nDCG@10", -0.5, -0.6, -0.4)]) == []
    assert headline([_stat("claim_f1", 0.01, -0.02, 0.04, p=0.5)]) == (
        "no significant change in the claim diagnostics"
    )


def _child(label, values):
    from rag_experiments.analysis.report import Child

    return Child(
        label,
        "FINISHED",
        {"retriever.top_k": label},
        {m: v for m, (v, _, _) in values.items()},
        {m: lo for m, (_, lo, _) in values.items()},
        {m: hi for m, (_, _, hi) in values.items()},
        {},
    )


def test_sweep_diagnosis_names_the_metric_children_differ_most_in_beyond_their_cis():
    from rag_experiments.analysis.diagnosis import sweep_lines

    children = [
        _child("4", {"noise_sensitivity_irrelevant": (0.0, 0.0, 0.0),
                     "context_claim_precision": (0.5, 0.4, 0.6), "claim_f1": (1.0, 1.0, 1.0)}),
        _child("5", {"noise_sensitivity_irrelevant": (0.3, 0.2, 0.4),
                     "context_claim_precision": (0.4, 0.3, 0.5), "claim_f1": (0.2, 0.1, 0.3)}),
    ]  # fmt: skip
    lines = sweep_lines(children)
    assert lines[0] == (
        "diagnosis: the children differ most in the generator's noise sensitivity (irrelevant "
        "chunks): 0.000 (retriever.top_k=4) to 0.300 (retriever.top_k=5), 95% CIs apart"
    )  # claim_f1 differs more but is overall; context precision's CIs overlap
    assert lines[1] == "  retriever: context_claim_precision 0.400–0.500"
    assert sweep_lines(children[:1]) == []
