"""Prediction-powered inference (``calibration.labels``): the estimator against a hand
computation, its coverage and width on simulated judges, the label files, and a run that logs
``<metric>.ppi`` with the values the function gives."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.answer_judge import AnswerJudge
from rag_experiments.metrics.calibration import (
    MIN_LABELS,
    CalibrationLabels,
    calibrated_estimates,
    classical_mean_ci,
    hoeffding_mean_ci,
    hoeffding_ppi_ci,
    load_labels,
    power_tuned_lambda,
    ppi_mean_ci,
    summary_lines,
)
from rag_experiments.records import MetricSpec, MetricValue
from rag_experiments.tracking.store import read_table

Z95 = 1.959963984540054  # standard normal quantile at 0.975


# --- the estimator ------------------------------------------------------------------------------
def test_ppi_equals_a_hand_computation_on_six_rows() -> None:
    # 3 labeled rows (human Y, judge f) and 3 unlabeled rows (judge only)
    y, f_lab, f_unl = [1.0, 0.0, 1.0], [0.8, 0.4, 0.6], [0.5, 0.9, 0.7]
    # mean_N f = 0.7; f - Y = (-1/5, 2/5, -2/5), mean -1/15  =>  theta = 0.7 + 1/15 = 23/30
    # var_f (ddof 1) = (0.04 + 0.04 + 0) / 2 = 0.04  -> / N = 3/225
    # var_delta = ((2/15)^2 + (7/15)^2 + (5/15)^2) / 2 = 39/225 -> / n = 13/225
    # se = sqrt(16/225) = 4/15
    est, low, high = ppi_mean_ci(y, f_lab, f_unl)
    assert est == pytest.approx(23 / 30, abs=1e-12)
    assert low == pytest.approx(23 / 30 - Z95 * 4 / 15, abs=1e-12)
    assert high == pytest.approx(23 / 30 + Z95 * 4 / 15, abs=1e-12)
    # labels only: mean 2/3, var (ddof 1) = 1/3, se = sqrt(1/9) = 1/3
    mean, low, high = classical_mean_ci(y)
    assert (mean, low, high) == pytest.approx((2 / 3, 2 / 3 - Z95 / 3, 2 / 3 + Z95 / 3))


def test_lambda_zero_is_the_labels_only_estimate_and_power_tuning_matches_its_formula() -> None:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 30).astype(float)
    f_lab, f_unl = rng.random(30), rng.random(200)
    assert ppi_mean_ci(y, f_lab, f_unl, lam=0.0) == pytest.approx(classical_mean_ci(y))
    # PPI++ (arXiv:2311.01453): Cov_n(Y, f) / ((1 + n/N) Var_{n+N}(f)), clipped to [0, 1]
    f_lab = 0.3 + 0.5 * y + 0.1 * rng.standard_normal(30)
    expected = np.cov(y, f_lab)[0, 1] / ((1 + 30 / 200) * np.var(np.r_[f_lab, f_unl], ddof=1))
    assert power_tuned_lambda(y, f_lab, f_unl) == pytest.approx(float(np.clip(expected, 0, 1)))
    assert power_tuned_lambda(y, -f_lab, f_unl) == 0.0  # anti-correlated judge: clipped at 0


def test_too_few_rows_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least 2 labeled and 2 unlabeled"):
        ppi_mean_ci([1.0], [0.5], [0.1, 0.2])
    with pytest.raises(ConfigError, match="at least 2 labels"):
        classical_mean_ci([1.0])


def _simulate(
    rng: np.random.Generator, draws: int, n: int, big_n: int, informative: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``draws`` data sets of binary truths (mean 0.7) and a judge biased by +0.05 whose value
    follows the truth (``informative``) or ignores it; returns (Y, f(X), f(X~), true mean)."""
    p = 0.7
    truth = rng.random((draws, n + big_n)) < p
    if informative:
        judge = 0.4 + 0.5 * truth + 0.1 * rng.standard_normal(truth.shape)  # mean 0.75
    else:
        judge = 0.75 + 0.1 * rng.standard_normal(truth.shape)
    return truth[:, :n].astype(float), judge[:, :n], judge[:, n:], p


@pytest.mark.parametrize("power_tuning", [False, True])
def test_ppi_covers_the_truth_and_is_narrower_than_labels_only_with_an_informative_judge(
    power_tuning: bool,
) -> None:
    rng = np.random.default_rng(20231110)
    y, f_lab, f_unl, truth = _simulate(rng, 1000, 100, 1000, informative=True)
    lam = power_tuned_lambda(y, f_lab, f_unl) if power_tuning else 1.0
    est, low, high = ppi_mean_ci(y, f_lab, f_unl, lam=lam)
    coverage = np.mean((low <= truth) & (truth <= high))
    _, c_low, c_high = classical_mean_ci(y)
    assert coverage >= 0.93
    assert np.mean(high - low) < 0.7 * np.mean(c_high - c_low)  # ~0.57 by the variances
    # the judge alone is biased by +0.05: its own mean ± its CI almost never covers 0.7
    judge_mean = np.concatenate([f_lab, f_unl], axis=1)
    j_mean, j_low, j_high = classical_mean_ci(judge_mean)
    assert np.mean((j_low <= truth) & (truth <= j_high)) < 0.05
    assert abs(np.mean(est) - truth) < 0.005  # unbiased


def test_with_an_uninformative_judge_power_tuning_stays_close_to_labels_only() -> None:
    rng = np.random.default_rng(7)
    y, f_lab, f_unl, truth = _simulate(rng, 1000, 100, 1000, informative=False)
    _, c_low, c_high = classical_mean_ci(y)
    _, low1, high1 = ppi_mean_ci(y, f_lab, f_unl)  # lambda = 1 pays for the judge's noise
    lam = power_tuned_lambda(y, f_lab, f_unl)
    _, low, high = ppi_mean_ci(y, f_lab, f_unl, lam=lam)
    assert np.mean(high1 - low1) > np.mean(c_high - c_low)
    assert np.mean(high - low) < 1.03 * np.mean(c_high - c_low)
    assert np.mean((low <= truth) & (truth <= high)) >= 0.93


# --- a run's values ----------------------------------------------------------------------------
def test_calibrated_estimates_leave_nan_rows_out_and_equal_the_function() -> None:
    ids = [f"q{i}" for i in range(8)]
    judge = [0.8, 0.4, 0.6, math.nan, 0.5, 0.9, 0.7, math.nan]
    rows = [
        {"faithfulness": MetricValue(v) if not math.isnan(v) else MetricValue.nan("no_claims")}
        for v in judge
    ]
    # q3 is labeled but has no judge value: left out with q7; 3 labels < MIN_LABELS: Hoeffding
    labels = CalibrationLabels({"faithfulness": {"q0": 1.0, "q1": 0.0, "q2": 1.0, "q3": 1.0}}, "x")
    out = calibrated_estimates(labels, ids, rows)
    est, low, high = hoeffding_ppi_ci([1.0, 0.0, 1.0], [0.8, 0.4, 0.6], [0.5, 0.9, 0.7])
    mean, c_low, c_high = hoeffding_mean_ci([1.0, 0.0, 1.0])
    assert out == pytest.approx({
        "faithfulness.ppi": est, "faithfulness.ppi_ci_low": low, "faithfulness.ppi_ci_high": high,
        "faithfulness.ppi_lambda": 1.0, "faithfulness.labels_mean": mean,
        "faithfulness.labels_ci_low": c_low, "faithfulness.labels_ci_high": c_high,
        "faithfulness.ppi_n_labels": 3.0, "faithfulness.ppi_n_unlabeled": 3.0,
        "faithfulness.ppi_n_excluded": 2.0,
    })  # fmt: skip
    lines = summary_lines(out)
    assert "faithfulness  PPI 0.767 [0.000, 1.000]  labels-only 0.667 [0.000, 1.000]" in lines[1]
    assert "n=3 labeled, N=3 unlabeled, 2 excluded; fewer than 30 labels" in lines[1]


def test_enough_labels_give_the_normal_intervals() -> None:
    rng = np.random.default_rng(5)
    n, big_n = MIN_LABELS, 50
    ids = [f"q{i}" for i in range(n + big_n)]
    judge = rng.uniform(0.2, 0.9, n + big_n)
    human = {ids[i]: float(rng.integers(0, 2)) for i in range(n)}
    rows = [{"faithfulness": MetricValue(float(v))} for v in judge]
    out = calibrated_estimates(CalibrationLabels({"faithfulness": human}, "x"), ids, rows)
    y = list(human.values())
    est, low, high = ppi_mean_ci(y, judge[:n], judge[n:])
    mean, c_low, c_high = classical_mean_ci(y)
    assert (out["faithfulness.ppi_ci_low"], out["faithfulness.labels_ci_high"]) == pytest.approx(
        (low, c_high)
    )
    assert "fewer than" not in summary_lines(out)[1]


@pytest.mark.parametrize("n", [1, 2, 5])
def test_few_labels_get_an_interval_valid_at_that_n_and_a_line_saying_so(n: int) -> None:
    """Two labels of 1.0 on rows the judge also scored 1.0 gave "1.000 [1.000, 1.000]":
    σ̂ = 0, a zero-width normal interval. Below MIN_LABELS: Hoeffding's, by hand."""
    big_n = 20
    ids = [f"q{i}" for i in range(n + big_n)]
    judge = [1.0] * n + [0.5] * big_n  # the judge's mean over the unlabeled rows: 0.5
    rows = [{"faithfulness": MetricValue(v)} for v in judge]
    human = {ids[i]: 1.0 for i in range(n)}
    out = calibrated_estimates(CalibrationLabels({"faithfulness": human}, "x"), ids, rows)
    # θ̂ = 0.5 − (1 − 1) = 0.5; half = sqrt(ln(4/0.05)/(2·20)) + 2·sqrt(ln(4/0.05)/(2n))
    half = math.sqrt(math.log(80) / 40) + 2 * math.sqrt(math.log(80) / (2 * n))
    assert half > 0.5  # at n <= 5 the bound spans all of [0, 1]
    assert out["faithfulness.ppi"] == pytest.approx(0.5)
    assert (out["faithfulness.ppi_ci_low"], out["faithfulness.ppi_ci_high"]) == (0.0, 1.0)
    labels_half = math.sqrt(math.log(40) / (2 * n))  # labels-only: mean 1.0 − sqrt(ln(2/α)/2n)
    assert out["faithfulness.labels_ci_low"] == pytest.approx(max(0.0, 1.0 - labels_half))
    assert out["faithfulness.labels_ci_high"] == 1.0
    (line,) = summary_lines(out)[1:]
    assert "PPI 0.500 [0.000, 1.000]" in line and f"(n={n} labeled, N=20 unlabeled" in line
    assert "fewer than 30 labels: the normal-approximation interval is not valid" in line


def test_summary_says_why_an_estimate_is_missing() -> None:
    ids = ["q0", "q1", "q2"]
    rows = [{"faithfulness": MetricValue(v)} for v in (0.8, 0.4, 0.6)]
    none = calibrated_estimates(CalibrationLabels({"faithfulness": {"zz": 1.0}}, "x"), ids, rows)
    (line,) = summary_lines(none)[1:]
    assert "PPI n/a  labels-only n/a" in line
    assert "n=0 labeled, N=3 unlabeled, 0 excluded; a CI needs at least 1 labeled row" in line
    every = {"q0": 1.0, "q1": 0.0, "q2": 1.0}
    out = calibrated_estimates(CalibrationLabels({"faithfulness": every}, "x"), ids, rows)
    (line,) = summary_lines(out)[1:]
    mean, low, high = hoeffding_mean_ci([1.0, 0.0, 1.0])
    assert f"PPI n/a  labels-only {mean:.3f} [{low:.3f}, {high:.3f}]" in line
    assert "PPI needs at least 1 unlabeled row" in line


# --- label files ---------------------------------------------------------------------------------
def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_labels_and_their_errors(tmp_path: Path) -> None:
    good = _jsonl(
        tmp_path / "l.jsonl",
        [
            {"id": "s1", "metric": "faithfulness", "value": 1},
            {"id": "s2", "metric": "faithfulness", "value": 0.5},
            {"id": "s1", "metric": "context_recall", "value": 0.0},
        ],
    )
    labels = load_labels(good)
    assert labels.by_metric == {
        "faithfulness": {"s1": 1.0, "s2": 0.5},
        "context_recall": {"s1": 0.0},
    }
    cases = {
        r"value 1.5 is not a number in \[0, 1\]": [{"id": "a", "metric": "m", "value": 1.5}],
        "value True is not": [{"id": "a", "metric": "m", "value": True}],
        'expected an object with "id"': [{"id": "a", "value": 1}],
        "labeled again \\(first on line 1\\)": [{"id": "a", "metric": "m", "value": 1}] * 2,
        "holds no label": [],
    }
    for message, rows in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_labels(_jsonl(tmp_path / "bad.jsonl", rows))
    (tmp_path / "nojson.jsonl").write_text("{oops\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"nojson.jsonl:1: not JSON"):
        load_labels(tmp_path / "nojson.jsonl")
    with pytest.raises(ConfigError, match="no such file"):
        load_labels(tmp_path / "absent.jsonl")


def test_graders_lines_revise_and_average_and_a_run_id_is_resolved(tmp_path: Path) -> None:
    # the labels file of `rag-exp review --run`: ana revises q1 (1 -> 0), bob says 1: mean 0.5
    rows = [
        {"id": "q1", "metric": "faithfulness", "value": 1.0, "grader": "ana"},
        {"id": "q1", "metric": "faithfulness", "value": 0.0, "grader": "ana"},
        {"id": "q1", "metric": "faithfulness", "value": 1.0, "grader": "bob"},
        {"id": "q2", "metric": "faithfulness", "value": 1.0, "grader": "ana"},
    ]
    graded = _jsonl(tmp_path / "labels.jsonl", rows)
    assert load_labels(graded).by_metric == {"faithfulness": {"q1": 0.5, "q2": 1.0}}
    run_id = "0123456789abcdef0123456789abcdef"
    asked = []
    labels = load_labels(run_id, run_labels=lambda r: asked.append(r) or graded)
    assert asked == [run_id] and labels.by_metric == {"faithfulness": {"q1": 0.5, "q2": 1.0}}
    with pytest.raises(ConfigError, match="no such file"):  # no resolver: a file name only
        load_labels(run_id)
    mixed = _jsonl(tmp_path / "mixed.jsonl", [rows[0], {"id": "q1", "metric": "faithfulness",
                                                        "value": 1}])  # fmt: skip
    with pytest.raises(ConfigError, match='has lines with and without "grader"'):
        load_labels(mixed)


def test_a_filled_grade_sheet_gives_values_on_the_metric_scale(tmp_path: Path) -> None:
    key = {
        "sheet_id": "abc-s0-n3",
        "labels": {
            "faithfulness": ["unfaithful", "partial", "faithful"],
            "answer_judge.accuracy": ["1", "2", "3", "4", "5"],
        },
        "items": [
            {"item": 1, "sample_id": "s7", "judge": {}},
            {"item": 2, "sample_id": "s2", "judge": {}},
            {"item": 3, "sample_id": "s5", "judge": {}},
        ],
    }
    (tmp_path / "grade_sheet_abc-s0-n3.key.json").write_text(json.dumps(key), encoding="utf-8")
    sheet = tmp_path / "filled.csv"
    sheet.write_text(
        "item,sheet_id,question,faithfulness,answer_judge.accuracy,notes\n"
        "1,abc-s0-n3,q,Faithful,4,\n2,abc-s0-n3,q,partial,,\n3,abc-s0-n3,q,,1,\n",
        encoding="utf-8",
    )
    assert load_labels(sheet).by_metric == {
        "faithfulness": {"s7": 1.0, "s2": 0.5},
        "answer_judge.accuracy": {"s7": 0.75, "s5": 0.0},
    }
    sheet.write_text("item,sheet_id,faithfulness\n1,abc-s0-n3,mostly\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="'mostly' is not one of unfaithful, partial"):
        load_labels(sheet)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not a filled grade sheet"):
        load_labels(tmp_path / "other.csv")


def test_check_refuses_labels_of_a_column_not_on_0_1() -> None:
    # the answer judge's raw grade is declared on [1, 5]: [0, 1] labels cannot calibrate it
    specs = {d.name: d.spec() for d in AnswerJudge.declaration.outputs}
    raw = specs["answer_judge.accuracy_raw"]
    assert (raw.low, raw.high) == (1.0, 5.0)
    labels = CalibrationLabels({"answer_judge.accuracy_raw": {"s1": 1.0}}, "l.jsonl")
    with pytest.raises(
        ConfigError, match=r"metric answer_judge.accuracy_raw is declared on \[1, 5\]"
    ):
        labels.check_metrics(list(specs.values()))
    ok = CalibrationLabels({"answer_judge.accuracy": {"s1": 1.0}}, "l.jsonl")
    ok.check_metrics(list(specs.values()))  # the normalised [0, 1] column is accepted


def test_check_refuses_unknown_metrics_and_ids() -> None:
    labels = CalibrationLabels({"faithfulness": {"s1": 1.0, "zz": 0.0}}, "l.jsonl")
    with pytest.raises(ConfigError, match="metric faithfulness is not computed by this run"):
        labels.check_metrics([MetricSpec("nDCG@10")])
    labels.check_metrics([MetricSpec("nDCG@10"), MetricSpec("faithfulness")])
    with pytest.raises(ConfigError, match=r"1 labeled id\(s\) are not in the dataset \(zz\)"):
        labels.check_ids(["s1", "s2"], ["s1", "s2"])
    # an unknown id is refused even when the run evaluates a part (max_samples, a shard) ...
    with pytest.raises(ConfigError, match=r"not in the dataset \(zz\)"):
        labels.check_ids(["s1", "s2"], ["s1"])
    # ... while an id of the dataset outside the evaluated part is ignored
    labels.check_ids(["s1", "s2", "zz"], ["s1", "s2"])
    with pytest.raises(ConfigError, match="none of its 2 labeled ids is among the evaluated"):
        labels.check_ids(["s1", "s2", "zz"], ["s2"])


# --- a run -----------------------------------------------------------------------------------
RUN = ("llm=fake", "judge=fake", "embedder=hash", "metrics=custom", "target=recorded")
"""A run of answers recorded in the dataset (no index, no generator): the fake judge scores
them."""


def _recorded_dataset(tmp_path: Path, n: int = 20) -> Path:
    """``n`` questions with recorded answers and contexts (our JSONL, no corpus)."""
    rows = []
    for i in range(n):
        fact = f"Form AR-{i} is approved within {i % 4 + 1} business days by the service desk."
        rows.append({
            "id": f"q{i:02d}", "user_input": f"How long does approving form AR-{i} take?",
            "reference": fact, "question_type": "factual",
            "recorded": {
                "response": fact if i % 3 else f"Form AR-{i} needs a manager's signature.",
                "retrieved_contexts": [fact, "Unrelated: the canteen opens at 8."],
            },
        })  # fmt: skip
    return _jsonl(tmp_path / "eval.jsonl", rows)


def _compose(compose_cfg, tmp_path: Path, labels: Path, *overrides: str):
    data = _recorded_dataset(tmp_path)
    return compose_cfg(
        *RUN, "dataset=jsonl", f"dataset.path={data}", f"calibration.labels={labels}", *overrides
    )


def test_a_bad_labels_file_fails_before_the_run_opens(tmp_path: Path, compose_cfg) -> None:
    from rag_experiments.job import run_job

    bad_metric = _jsonl(tmp_path / "m.jsonl", [{"id": "q01", "metric": "faithfulnes", "value": 1}])
    bad_id = _jsonl(tmp_path / "i.jsonl", [{"id": "s001", "metric": "faithfulness", "value": 1}])
    cfg = _compose(compose_cfg, tmp_path, bad_metric)
    for labels, message in (
        (bad_metric, "metric faithfulnes is not computed by this run"),
        (bad_id, r"1 labeled id\(s\) are not in the dataset \(s001\)"),
        (tmp_path / "absent.jsonl", "no such file"),
        (tmp_path, r"labels=.*: is a directory; give a JSONL file"),
    ):
        cfg.calibration.labels = str(labels)
        with pytest.raises(ConfigError, match=message):
            run_job(cfg)
    # under max_samples an id that is not in the dataset at all is refused too (checked
    # against the whole dataset), with or without good labels beside it
    cfg.max_samples = 5
    good = [{"id": f"q{i:02d}", "metric": "faithfulness", "value": 1} for i in range(20)]
    mixed = _jsonl(
        tmp_path / "x.jsonl", [*good, {"id": "zzz9", "metric": "faithfulness", "value": 1}]
    )
    for labels in (bad_id, mixed):
        cfg.calibration.labels = str(labels)
        with pytest.raises(ConfigError, match=r"are not in the dataset \((s001|zzz9)\)"):
            run_job(cfg)
    assert not (tmp_path / "mlruns.db").exists()  # refused before the tracker opened a run


@pytest.mark.slow  # opens an MLflow sqlite store (its schema migrations alone take seconds)
def test_a_run_logs_ppi_values_equal_to_the_function(
    tmp_path: Path, compose_cfg, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag_experiments.job import run_job

    rows = []
    for i in range(0, 20, 3):  # 7 of 20 rows labeled
        rows.append({"id": f"q{i:02d}", "metric": "faithfulness", "value": float(i % 2)})
        rows.append({"id": f"q{i:02d}", "metric": "answer_relevancy", "value": (i % 5) / 4})
    labels_file = _jsonl(tmp_path / "labels.jsonl", rows)
    run_job(_compose(compose_cfg, tmp_path, labels_file, "calibration.power_tuning=true"))
    out = capsys.readouterr().out
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([exp])
    logged = run.data.metrics
    table = read_table(client, run.info.run_id)
    labels = load_labels(labels_file, power_tuning=True)
    values = [
        {m: MetricValue(float(row[m])) for m in ("faithfulness", "answer_relevancy")}
        for _, row in table.iterrows()
    ]
    expected = calibrated_estimates(labels, list(table["id"]), values)
    assert {"faithfulness.ppi", "answer_relevancy.ppi", "answer_relevancy.labels_ci_low"} <= set(
        expected
    )
    assert {k: logged[k] for k in expected} == pytest.approx(expected, rel=1e-9)
    assert logged["answer_relevancy.ppi_n_labels"] == 7
    assert logged["answer_relevancy.ppi_n_unlabeled"] == 13
    assert "calibrated by human labels" in out and "answer_relevancy  PPI" in out
