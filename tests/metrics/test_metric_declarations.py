"""The lists once kept by hand, now derived from the metric classes' declarations
(rag_experiments.metrics.definitions): the same content and order as the former hand lists."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rag_experiments.config.keys import constructor_parameters
from rag_experiments.errors import ConfigError
from rag_experiments.metrics.deepeval_backend import DeepEvalContextRelevancy, DeepEvalFaithfulness
from rag_experiments.metrics.definitions import DEFINITIONS, declared_metrics, spec
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.keys import KEY_METRICS, key_metrics_among
from rag_experiments.metrics.keyword_coverage import KeywordCoverage
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.mlflow_scorers import scorer_metrics
from rag_experiments.qualify.agreement import LABEL_SETS
from rag_experiments.qualify.check import PROBES, PROMPT_IDS


def test_key_metrics_keep_the_former_hand_order() -> None:
    assert tuple(KEY_METRICS) == (
        "nDCG@10", "MRR@10", "Hit@5", "R@10", "chunk.nDCG@10", "keyword_coverage",
        "faithfulness", "answer_relevancy", "context_precision", "context_recall",
        "answer_judge.accuracy", "keyword_faithfulness",
        "correct_refusal_rate", "false_refusal_rate",
    )  # fmt: skip
    assert key_metrics_among(["faithfulness", "P@3", "nDCG@10"]) == ["nDCG@10", "faithfulness"]


def test_definitions_are_the_answer_level_outputs_and_deepeval_reports_them_prefixed() -> None:
    assert sorted(DEFINITIONS) == sorted(
        [
            "faithfulness", "answer_relevancy", "context_precision", "context_utilization",
            "context_recall", "context_relevancy", "keyword_faithfulness", "refusal",
            "correct_refusal_rate", "false_refusal_rate",
            "claim_precision", "claim_recall", "claim_f1", "context_claim_recall",
            "context_claim_precision", "context_claim_utilization", "noise_sensitivity_relevant",
            "noise_sensitivity_irrelevant", "hallucination", "self_knowledge", "claim_faithfulness",
            "citation_recall", "citation_precision", "faithfulness_prob",
            *(f"answer_judge.{c}{s}" for c in ("accuracy", "completeness", "relevance")
              for s in ("", "_raw")),
        ]
    )  # fmt: skip
    assert "nDCG@10" not in DEFINITIONS and "keyword_coverage" not in DEFINITIONS
    assert spec("answer_judge.accuracy_raw").high == 5.0
    assert not spec("false_refusal_rate").higher_is_better
    assert [s.name for s in DeepEvalFaithfulness(judge=None).specs()] == ["deepeval.faithfulness"]
    assert DeepEvalFaithfulness(judge=None).specs()[0].description == (
        Faithfulness().specs()[0].description
    )
    assert DeepEvalContextRelevancy(judge=None).specs()[0].name == "deepeval.context_relevancy"
    with pytest.raises(ConfigError, match="unknown metric 'faithfulnes'"):
        spec("faithfulnes")


def test_label_sets_scorers_and_probes_come_from_the_declarations() -> None:
    assert {m: (ls.labels, ls.source) for m, ls in LABEL_SETS.items()} == {
        "faithfulness": (("unfaithful", "partial", "faithful"), "faithfulness"),
        "context_recall": (("missing", "partial", "complete"), "context_recall"),
        **{
            f"answer_judge.{c}": (("1", "2", "3", "4", "5"), f"answer_judge.{c}_raw")
            for c in ("accuracy", "completeness", "relevance")
        },
    }
    three = LABEL_SETS["faithfulness"].to_label
    assert [three(s) for s in (0.39, 0.4, 0.79, 0.8)] == [
        "unfaithful", "partial", "partial", "faithful",
    ]  # fmt: skip
    assert LABEL_SETS["answer_judge.accuracy"].to_label(3.6) == "4"
    assert [c.name for c in scorer_metrics()] == [
        "faithfulness", "answer_relevancy", "context_precision", "context_recall",
    ]  # fmt: skip
    assert tuple(PROBES) == (
        "faithfulness",
        "verifier_faithfulness",
        "answer_relevancy",
        "context_relevance",
        "position_bias",
    )
    assert PROMPT_IDS["faithfulness"] == PROMPT_IDS["position_bias"] == "faithfulness-v1"


def test_how_a_metric_is_scored_is_declared() -> None:
    assert Faithfulness.per_row and DeepEvalFaithfulness.per_row
    assert not KeywordCoverage.per_row and not RetrievalMetrics.per_row
    assert Faithfulness.requires == frozenset({"judge"})
    assert all(c.declaration.outputs for c in declared_metrics())


def test_constructor_parameters_follow_kwargs_to_the_base() -> None:
    assert constructor_parameters(Faithfulness) == [
        "judge", "max_retries", "max_tokens", "refusal_patterns", "prefix", "claim_layer",
        "examples",
    ]  # fmt: skip
    params = constructor_parameters(DeepEvalFaithfulness)
    assert params[:3] == ["judge", "truths_extraction_limit", "penalize_ambiguous_claims"]
    assert "timeout_s" in params and "max_chars" in params


def test_a_judged_metric_without_a_declaration_is_refused_when_built() -> None:
    from rag_experiments.metrics.judge import JudgedMetric

    class Undeclared(JudgedMetric):  # the likely slip: outputs never declared
        name = "undeclared"

    with pytest.raises(ConfigError, match=r"Undeclared declares no outputs: set declaration ="):
        Undeclared()


def test_the_registry_loads_whole_when_threads_ask_at_once() -> None:
    # A fresh interpreter: the first use loads every built-in metric module; 4 threads asking
    # at once must each see all 14 key metrics (not a half-loaded registry).
    code = (
        "import threading\n"
        "from rag_experiments.metrics.keys import KEY_METRICS\n"
        "seen = []\n"
        "ts = [threading.Thread(target=lambda: seen.append(len(list(KEY_METRICS))))"
        " for _ in range(4)]\n"
        "[t.start() for t in ts]\n"
        "[t.join() for t in ts]\n"
        "print(sorted(seen))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str([len(KEY_METRICS)] * 4)
