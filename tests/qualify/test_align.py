"""Few-shot alignment (rag_experiments/qualify/align.py, metrics/fewshot.py): example sets in a
judged metric's prompt, the choice of examples by hand, the paired gain by hand, and the
cross-validated before/after on a judge that reads examples (a gain with a CI above 0) and on
the constant fake judge (no evidence of improvement).

The rows: 24 answers of two families, 12 about badges ("visitors collect badges at reception
desk …") that people grade faithful (1.0) and 12 about invoices ("invoices above limits need
finance approval …") that people grade unfaithful (0.0). The constant fake judge scores every
answer 0.5 (one claim supported, one not), so at threshold 0.5 it says faithful to all:
kappa 0, balanced accuracy 0.5. The example-copying fake (fakes/example_judge.py) answers like
the most similar example: an invoice answer is most like an invoice example, so with examples
of both families it grades every held-out row as people did: kappa 1, balanced accuracy 1.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.fakes.example_judge import ExampleCopyingChat, copied_value, jaccard
from rag_experiments.llm.fake import FakeChat
from rag_experiments.metrics.definitions import three_way
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.fewshot import BLOCK_TITLE, Example, ExampleSet, load_examples
from rag_experiments.qualify.align import LabeledRow, align, choose, verdict_label
from rag_experiments.qualify.stats import paired_gain
from rag_experiments.records import RagResponse, Sample

SCRIPT = {
    "FaithfulnessOutput": {
        "claims": [{"claim": "a fact of passage 1", "context": 1}, {"claim": "x", "context": 0}]
    }
}


def _rows() -> list[LabeledRow]:
    rows = []
    for i in range(24):
        badge = i % 2 == 0
        text = (
            f"Visitors collect badges at reception desk number {i} before entering."
            if badge
            else f"Invoices above limits need finance approval within {i} days of receipt."
        )
        rows.append(
            LabeledRow(
                Sample(id=f"q{i:02d}", user_input=f"Question {i}?"),
                RagResponse(response=text, retrieved_contexts=[text]),
                human=1.0 if badge else 0.0,
                judged=0.5,
            )
        )
    return rows


def _factory(judge):
    def make(examples):
        metric = Faithfulness(judge=judge)
        metric.examples = examples
        return metric

    return make


def test_an_example_set_goes_into_the_prompt_before_the_task_and_versions_its_id(
    tmp_path: Path,
) -> None:
    examples = ExampleSet(
        (Example("Who signs?", "The lead signs.", "faithful", 1.0, ("The lead signs.",)),),
        "faithfulness",
    )
    path = examples.write(tmp_path / "ex.yaml")
    loaded = load_examples(str(path))
    assert loaded is not None and loaded.version == examples.version
    seen: list[str] = []

    class Recording(FakeChat):
        def complete(self, messages, schema=None, **options):
            seen.append(messages[-1]["content"])
            return super().complete(messages, schema, **options)

    metric = Faithfulness(judge=Recording(responses=SCRIPT), examples=str(path))
    metric.evaluate(
        [Sample(id="a", user_input="Q?")], [RagResponse(response="A.", retrieved_contexts=["C."])]
    )
    (prompt,) = seen
    head, _, tail = prompt.partition(BLOCK_TITLE)
    assert head.startswith("Context passages:\n\n[1] C.\n\nQuestion: Q?\nAnswer: A.\n\n")
    assert "Example 1:\nContext passages:\n[1] The lead signs.\nQuestion: Who signs?\n" in tail
    assert "Answer: The lead signs.\nHuman grade: faithful (1.00 on a 0-1 scale)\n\nTask:" in tail
    (audit,) = metric.audit()
    assert audit["judgement"]["prompt"] == f"faithfulness-v1+{examples.version}"


def test_a_misspelled_example_key_or_a_missing_file_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"'verdcit' is not a key of an example: did you mean 'verdict'"
    ):
        load_examples([{"question": "q", "answer": "a", "verdcit": "x"}])
    with pytest.raises(ConfigError, match=r"no such file"):
        Faithfulness(examples="/nonexistent/examples.yaml")


def test_the_choice_takes_the_judges_errors_first_and_alternates_verdicts() -> None:
    rows = _rows()
    picked = choose(rows, 4, 0.5, seed=0)
    # the judge (0.5 → faithful) is wrong on every invoice row: they come first, alternating
    assert [r.human for r in picked] == [0.0, 1.0, 0.0, 1.0]
    assert choose(rows, 4, 0.5, seed=0) == picked  # seeded
    assert len(choose(rows[:3], 10, 0.5, seed=0)) == 3
    labels = three_way("unfaithful", "partial", "faithful")
    assert [verdict_label(v, labels, 0.5) for v in (0.0, 0.5, 1.0)] == [
        "unfaithful",
        "partial",
        "faithful",
    ]


def test_the_paired_gain_by_hand() -> None:
    labels = [True, True, False, False]
    gain = paired_gain(labels, [True] * 4, labels, n_resamples=200)
    # before: one verdict for all → kappa 0, balanced accuracy 0.5; after: all right → 1, 1
    assert (gain["kappa"].before, gain["kappa"].after, gain["kappa"].gain) == (0.0, 1.0, 1.0)
    assert gain["balanced_accuracy"].gain == 0.5
    same = paired_gain(labels, [True] * 4, [True] * 4, n_resamples=200)
    assert same["kappa"].ci == (0.0, 0.0) and not same["kappa"].improved


def test_the_example_copying_fake_copies_the_most_similar_examples_value() -> None:
    assert jaccard("Visitors collect badges", "badges visitors") == pytest.approx(2 / 3)
    block = ExampleSet(
        (
            Example("q", "Invoices need finance approval.", "unfaithful", 0.0),
            Example("q", "Visitors collect badges at reception.", "faithful", 1.0),
        )
    ).block()
    prompt = f"Question: q\nAnswer: Visitors collect badges today.\n\n{block}\n\nTask: grade."
    assert copied_value(prompt) == 1.0
    assert copied_value("Answer: no examples here\n\nTask: grade.") is None


def test_align_shows_a_gain_on_a_judge_that_reads_examples() -> None:
    judge = ExampleCopyingChat(responses=SCRIPT, model="fake-judge")
    result = align(_factory(judge), "faithfulness", _rows(), k=4, folds=4, seed=0)
    assert (result.before.kappa, result.before.balanced_accuracy) == (0.0, 0.5)
    assert (result.after.kappa, result.after.balanced_accuracy) == (1.0, 1.0)
    assert result.gains["kappa"].gain == 1.0 and result.gains["kappa"].ci[0] > 0
    assert result.gains["balanced_accuracy"].ci[0] > 0
    assert result.verdict == "improvement" and result.n_compared == 24
    assert len(result.examples.examples) == 4
    assert "improvement: the 95% CI of the kappa gain lies above 0" in result.format()


def test_align_reports_no_evidence_of_improvement_on_the_constant_fake_judge() -> None:
    judge = FakeChat(responses=SCRIPT, model="fake-judge")
    result = align(_factory(judge), "faithfulness", _rows(), k=4, folds=4, seed=0)
    assert result.gains["kappa"].gain == 0.0 and result.gains["kappa"].ci == (0.0, 0.0)
    assert result.verdict == "no evidence of improvement"
    assert "no evidence of improvement: the 95% CI of the kappa gain includes 0" in (
        result.format()
    )
    assert result.to_dict()["verdict"] == "no evidence of improvement"


def test_align_refuses_too_few_rows_or_bad_folds() -> None:
    make = _factory(FakeChat(responses=SCRIPT))
    with pytest.raises(ConfigError, match=r"3 labeled rows; label at least 4"):
        align(make, "faithfulness", _rows()[:3])
    with pytest.raises(ConfigError, match=r"--folds must be in 2\.\.24"):
        align(make, "faithfulness", _rows(), folds=30)
    assert math.isnan(LabeledRow(Sample(id="x", user_input="q"), RagResponse(), 1.0).judged)
