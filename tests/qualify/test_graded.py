"""The grading sample, the labels file and agreement of ``rag-exp review --run``
(:mod:`rag_experiments.qualify.graded`), on rows whose counts and kappas are worked by hand."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from rag_experiments.qualify.graded import (
    Label,
    LabelsFile,
    agreement_report,
    grading_sample,
    verdict,
)
from rag_experiments.tracking.record import PerQueryRow


def _row(i: str, qtype: str, value: float) -> PerQueryRow:
    return PerQueryRow(id=i, question_type=qtype, values={"faithfulness": value})


def test_verdict_threshold_and_nan() -> None:
    assert [verdict(v) for v in (0.0, 0.49, 0.5, 1.0)] == [0, 0, 1, 1]
    assert verdict(math.nan) is None


def test_sample_takes_one_row_per_stratum_in_turn() -> None:
    # strata (type, judge verdict): (a, 0) 1 row, (a, 1) 3 rows, (b, 1) 2 rows; one NaN row
    rows = [_row("a0", "a", 0.0), _row("a1", "a", 1.0), _row("a2", "a", 0.8)]
    rows += [_row("a3", "a", 0.5), _row("b1", "b", 1.0), _row("b2", "b", 0.9)]
    rows += [_row("nan", "b", math.nan)]
    sample = grading_sample(rows, ["faithfulness"], n=4, seed=3)
    # round 1 takes one of each of the 3 strata, round 2 one more of (a, 1) (the first left)
    strata = Counter((r.question_type, verdict(r.values["faithfulness"])) for r in sample)
    assert strata == {("a", 0): 1, ("a", 1): 2, ("b", 1): 1}
    assert "nan" not in {r.id for r in sample}
    assert [r.id for r in grading_sample(rows, ["faithfulness"], n=4, seed=3)] == [
        r.id for r in sample
    ]  # seeded
    assert len(grading_sample(rows, ["faithfulness"], n=50)) == 6  # every eligible row


def test_labels_file_keeps_every_line_and_the_latest_per_grader(tmp_path: Path) -> None:
    labels = LabelsFile(tmp_path / "run" / "labels.jsonl", "r1")
    labels.add(Label("q1", "faithfulness", 1.0, "ana"))
    labels.add(Label("q1", "faithfulness", 0.0, "ana"))  # ana revises
    labels.add(Label("q1", "faithfulness", 1.0, "bob"))
    assert len(labels.lines()) == 3
    current = labels.current()
    assert {k: v.value for k, v in current.items()} == {
        ("q1", "faithfulness", "ana"): 0.0,
        ("q1", "faithfulness", "bob"): 1.0,
    }
    assert all(v.time for v in current.values())
    # a torn last line (a kill mid-write) is skipped, the next label repairs the file
    with labels.path.open("ab") as f:
        f.write(b'{"id": "q2", "metr')
    assert len(labels.lines()) == 3
    labels.add(Label("q2", "faithfulness", 1.0, "ana"))
    assert len(labels.lines()) == 4


def test_agreement_with_the_judge_and_between_graders_by_hand() -> None:
    # judge verdicts 1 1 0 0; ana 1 0 0 0; bob 1 1 0 1
    rows = [_row(f"q{i}", "a", v) for i, v in enumerate((0.9, 0.6, 0.1, 0.0))]
    given = {}
    for grader, values in (("ana", (1, 0, 0, 0)), ("bob", (1, 1, 0, 1))):
        for i, v in enumerate(values):
            given[(f"q{i}", "faithfulness", grader)] = Label(f"q{i}", "faithfulness", v, grader)
    report = {(a.a, a.b): a.result for a in agreement_report(given, rows)}
    # ana-judge: p_o = 3/4, p_e = 0.25*0.5 + 0.75*0.5 = 0.5, kappa = 0.25/0.5
    assert report[("ana", "judge")].raw == pytest.approx(0.75)
    assert report[("ana", "judge")].kappa == pytest.approx(0.5)
    # bob-judge: p_o = 3/4, p_e = 0.75*0.5 + 0.25*0.5 = 0.5 -> 0.5
    assert report[("bob", "judge")].kappa == pytest.approx(0.5)
    # ana-bob: p_o = 2/4, p_e = 0.25*0.75 + 0.75*0.25 = 0.375 -> 0.125/0.625
    assert report[("ana", "bob")].raw == pytest.approx(0.5)
    assert report[("ana", "bob")].kappa == pytest.approx(0.2)
    assert report[("ana", "bob")].n == 4


class _GradedStore:
    """What :func:`graded_pairs` reads of a run: its rows and its logged labels file."""

    def __init__(self, labels: Path) -> None:
        self.labels = labels

    def list_artifacts(self, run_id: str, path: str | None = None) -> list[str]:
        return ["grading/labels.jsonl"]

    def download(self, run_id: str, path: str) -> Path:
        return self.labels

    def read_rows(self, run_id: str) -> list[PerQueryRow]:
        return [
            PerQueryRow(id=f"q{i}", user_input=f"question {i}", response=f"answer {i}",
                        retrieved_contexts=[f"context {i}"], values={"faithfulness": 0.5})
            for i in range(4)
        ]  # fmt: skip


def test_a_graded_run_gives_judge_check_pairs_by_majority(tmp_path: Path) -> None:
    from rag_experiments.qualify.graded import graded_pairs

    labels = LabelsFile(tmp_path / "labels.jsonl", "r1")
    for sid, grader, value in (
        ("q0", "ana", 1), ("q0", "bob", 1), ("q0", "cy", 0),  # majority 1
        ("q1", "ana", 0),                                      # 0
        ("q2", "ana", 1), ("q2", "bob", 0),                    # a tie: left out
    ):  # fmt: skip
        labels.add(Label(sid, "faithfulness", float(value), grader))
    pairs = graded_pairs(_GradedStore(labels.path), "r1")  # type: ignore[arg-type]
    assert [(p.id, p.faithful) for p in pairs] == [("q0", True), ("q1", False)]
    assert pairs[0].question == "question 0" and pairs[0].contexts == ("context 0",)
    assert pairs[0].answer == "answer 0"
