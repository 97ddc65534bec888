"""Bootstrap confidence intervals, the judge ≠ generator check, and the judged metrics wired
through build.build and the runner into MLflow (judge audit, judge usage)."""

from __future__ import annotations

import json
import logging
import math

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from rag_experiments.analysis.runs import run_values
from rag_experiments.build import build
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.roles import check_judge_distinct, judge_model_node
from rag_experiments.metrics.aggregate import aggregate, bootstrap_ci, to_metrics
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.refusal import Refusal
from rag_experiments.records import Document, MetricValue, RagResponse, Sample
from rag_experiments.runner import run_experiment
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.store import RunStore

# --- bootstrap confidence intervals ----------------------------------------------------------


def test_constant_values_have_a_degenerate_interval():
    assert bootstrap_ci([0.5] * 7, seed=3) == (0.5, 0.5)
    assert bootstrap_ci([0.25], seed=0) == (0.25, 0.25)
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def test_interval_equals_a_direct_numpy_bootstrap_with_the_same_seed():
    x = np.array([0.0, 1.0, 1.0, 0.5, 0.25, 0.75, 1.0, 0.0])
    rng = np.random.default_rng(42)
    means = x[rng.integers(0, len(x), size=(1000, len(x)))].mean(axis=1)
    expected = (np.percentile(means, 2.5), np.percentile(means, 97.5))
    assert bootstrap_ci(list(x), seed=42) == pytest.approx(expected)
    low, high = bootstrap_ci(list(x), seed=42)
    assert low < x.mean() < high
    assert bootstrap_ci(list(x), seed=42) == bootstrap_ci(list(x), seed=42)
    assert bootstrap_ci(list(x), seed=43) != bootstrap_ci(list(x), seed=42)


def test_aggregate_logs_ci_overall_and_per_type_over_valid_values():
    values = [{"m": MetricValue(v)} for v in (1.0, 0.0, 1.0, 1.0)] + [{"m": MetricValue.nan("x")}]
    groups = ["a", "a", "b", "b", "b"]
    flat = to_metrics(aggregate(["m"], values, groups, seed=7))
    assert (flat["m_ci_low"], flat["m_ci_high"]) == pytest.approx(
        bootstrap_ci([1, 0, 1, 1], seed=7)
    )
    assert flat["by_type/b/m_ci_low"] == flat["by_type/b/m_ci_high"] == 1.0
    assert (flat["by_type/a/m_ci_low"], flat["by_type/a/m_ci_high"]) == pytest.approx(
        bootstrap_ci([1.0, 0.0], seed=7)
    )
    assert "x_ci_low" not in to_metrics(aggregate(["x"], [{"x": MetricValue.nan("t")}], [None]))


def test_aggregate_intervals_equal_a_direct_numpy_bootstrap_per_cell():
    # aggregate() computes its cells' intervals together (shared resamples, one percentile
    # call); each must be exactly the 1-d numpy bootstrap of that cell alone. Columns: 0/1,
    # continuous, coarse, a duplicate column, NaNs at random, groups of several sizes.
    rng = np.random.default_rng(11)
    names = ["bin", "cont", "coarse", "dup", "sparse"]
    values, groups = [], []
    for _ in range(120):
        row = {
            "bin": MetricValue(float(rng.random() < 0.6)),
            "cont": MetricValue(float(rng.random())),
            "coarse": MetricValue(round(float(rng.random()), 1)),
            "sparse": MetricValue(float(rng.random()) if rng.random() < 0.1 else math.nan, "x"),
        }
        row["dup"] = row["cont"]
        if rng.random() < 0.15:
            row["cont"] = MetricValue.nan("x")
        values.append(row)
        groups.append(["a", "b", "c", None][int(rng.integers(0, 4))])
    aggs = aggregate(names, values, groups, seed=9)
    assert len(aggs) == 5 * 4
    for a in aggs:
        rows = [v for v, g in zip(values, groups, strict=True) if a.group in ("all", g)]
        x = np.array([r[a.metric].value for r in rows if r[a.metric].is_valid])
        if x.size == 0:
            assert math.isnan(a.ci_low) and math.isnan(a.ci_high)
            continue
        idx = np.random.default_rng(9).integers(0, x.size, size=(1000, x.size))
        means = x[idx].mean(axis=1)
        tail = (1.0 - 0.95) / 2.0 * 100.0  # 2.5000000000000022, as aggregate computes it
        assert (a.ci_low, a.ci_high) == (
            np.percentile(means, tail),
            np.percentile(means, 100 - tail),
        )
        assert a.mean == float(np.mean(x)) and a.n_valid == x.size


# --- judge ≠ generator ----------------------------------------------------------------------


def test_same_judge_and_generator_warns_and_require_distinct_refuses(compose_cfg, caplog):
    cfg = compose_cfg()  # embedded llm + embedded judge: the same bundled model
    with caplog.at_level(logging.WARNING):
        assert check_judge_distinct(cfg.llm, cfg.judge) is True
    assert "grades its own answers" in caplog.text
    strict = compose_cfg("judge.require_distinct=true")
    with pytest.raises(ConfigError, match="require_distinct"):
        check_judge_distinct(strict.llm, strict.judge)
    with pytest.raises(ConfigError, match="require_distinct"):
        build(strict)  # refused before the dataset is loaded or the judge is built
    other = compose_cfg("judge.model_path=/models/other.gguf", "judge.require_distinct=true")
    assert check_judge_distinct(other.llm, other.judge) is False
    assert check_judge_distinct(cfg.llm, compose_cfg("judge=fake").judge) is False


def test_judge_node_drops_role_keys():
    node = judge_model_node({"_target_": "x.Y", "model": "m", "require_distinct": True})
    assert node == {"_target_": "x.Y", "model": "m", "_convert_": "all"}


def test_build_injects_one_judge_and_the_baseline_embedder(compose_cfg):
    cfg = compose_cfg("embedder=hash", "llm=fake", "judge=fake")
    exp = build(cfg)
    judged = [m for m in exp.metrics if hasattr(m, "judge")]
    assert {type(m).__name__ for m in judged} == {
        "Faithfulness",
        "AnswerRelevancy",
        "ContextPrecision",
        "ContextRecall",
        "AnswerJudge",
    }
    assert len({id(m.judge) for m in judged}) == 1
    (relevancy,) = [m for m in judged if isinstance(m, AnswerRelevancy)]
    assert relevancy.embedder is exp.target.embedder
    assert relevancy.judge.describe()["provider"] == "fake"


# --- through the runner into MLflow ---------------------------------------------------------


class _Target:
    max_concurrency = 1

    def prepare(self, dataset):
        pass

    def answer(self, sample):
        if sample.id == "bad":
            return RagResponse(error="timeout")
        text = "I don't know." if not sample.answerable else "Form AR-1 is used."
        return RagResponse(
            response=text,
            retrieved_contexts=["Form AR-1 is used.", "Other."],
            retrieved_doc_ids=["d1"],
        )

    def describe(self):
        return {"target": "scripted"}


@pytest.mark.slow
def test_audit_artifact_and_judge_usage_are_logged(tmp_path):
    samples = [
        Sample(id=f"q{i}", user_input=f"q{i}?", reference="Form AR-1.", question_type="t")
        for i in range(3)
    ]
    samples += [
        Sample(id="u", user_input="u?", answerable=False),
        Sample(id="bad", user_input="b?"),
    ]
    judge = FakeChat(
        {
            "FaithfulnessOutput": {"claims": [{"claim": "AR-1", "context": 1}]},
            "ContextVerdicts": {"verdicts": ["yes", "no"]},
        }
    )
    metrics = [Faithfulness(judge=judge), ContextPrecision(judge=judge), Refusal()]
    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path}/m.db", experiment="t", run_name="r")
    run_id, result = run_experiment(
        EvalDataset("toy", samples, [Document("d1", "Form AR-1 is used.")], "mem"),
        _Target(),
        metrics,
        tracker,
        params={},
        config_yaml="",
        progress=False,
        seed=1,
    )
    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    store = RunStore(client.tracking_uri)
    m = run_values(store, store.get_run(run_id))  # logged metrics + average_results.csv
    assert judge.calls == 3 + 3  # faithfulness: 3 answers (the refusal is skipped); precision: 3
    assert m["judge_calls"] == 6 and m["judge_calls_per_question"] == pytest.approx(6 / 5)
    assert m["judge_calls_per_question_max"] == 2
    assert m["faithfulness"] == 1.0 and m["faithfulness_ci_low"] == m["faithfulness_ci_high"] == 1.0
    assert m["context_precision"] == 1.0 and m["by_type/t/context_precision_n_valid"] == 3
    assert m["correct_refusal_rate"] == 1.0 and m["false_refusal_rate"] == 0.0
    path = mlflow.artifacts.download_artifacts(
        run_id=run_id,
        artifact_path="judge_audit.jsonl",
        tracking_uri=f"sqlite:///{tmp_path}/m.db",
        dst_path=str(tmp_path),
    )
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["id"] for r in rows] == [s.id for s in samples]
    assert rows[0]["faithfulness"]["claims"] == [
        {"claim": "AR-1", "context": 1, "supported": True, "repeats": 1}
    ]
    assert rows[0]["faithfulness"]["judgement"]["raw"]
    assert rows[3]["faithfulness"] == {
        "skipped": "refusal",
        "rationale": [],  # no verdict: nothing for the trace's rationale
        "judge_calls": 0,
        "judge_prompt_tokens": 0,
        "judge_completion_tokens": 0,
    }
    assert rows[4]["judge_calls"] == 0
    for row in result.rows():  # every cell: a value or a reason
        assert all(not math.isnan(row[s.name]) or row[f"{s.name}.reason"] for s in result.specs)


def test_runner_marks_a_judged_metric_without_judge_as_metric_error():
    from rag_experiments.metrics.context_recall import ContextRecall
    from rag_experiments.runner import evaluate

    ds = EvalDataset(
        "toy", [Sample(id="a", user_input="a?", reference="r")], [Document("d1", "x")], "mem"
    )
    judge = FakeChat({"FaithfulnessOutput": {"claims": [{"claim": "AR-1", "context": 1}]}})
    result = evaluate(ds, _Target(), [ContextRecall(), Faithfulness(judge=judge)], progress=False)
    (row,) = result.rows()
    assert row["context_recall.reason"] == "metric_error" and row["faithfulness"] == 1.0
    assert "context_recall" not in result.audit[0] and "faithfulness" in result.audit[0]
    assert result.run_values["judge_calls"] == 1


@pytest.mark.llm
@pytest.mark.slow
def test_embedded_judge_gives_every_row_a_value_or_a_reason(compose_cfg, tmp_path):
    """The default judge (bundled SmolLM2) through `rag-exp run` on 2 sample questions (one
    unanswerable); the fake generator keeps it to the judge's calls."""
    import pandas as pd

    from rag_experiments.job import run_job
    from rag_experiments.locations import PROJECT_ROOT

    lines = (PROJECT_ROOT / "datasets/sample/eval.jsonl").read_text(encoding="utf-8").splitlines()
    subset = [lines[0], next(line for line in lines if '"answerable": false' in line)]
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(subset) + "\n", encoding="utf-8")
    cfg = compose_cfg(
        "embedder=hash",
        "llm=fake",
        "dataset=jsonl",
        f"dataset.path={path}",
        f"dataset.corpus={PROJECT_ROOT / 'datasets/sample/docs'}",
        "run_name=judge",
    )
    run_job(cfg)
    client = MlflowClient(cfg.tracking.uri)
    (run,) = client.search_runs(
        [client.get_experiment_by_name(cfg.tracking.experiment).experiment_id]
    )
    m = run.data.metrics
    # 5 judged metrics, each 1 call + at most 1 retry
    assert m["n_samples"] == 2 and 1 <= m["judge_calls_per_question_max"] <= 10
    assert "judge_audit.jsonl" in {a.path for a in client.list_artifacts(run.info.run_id)}
    table = pd.read_csv(
        mlflow.artifacts.download_artifacts(
            run_id=run.info.run_id,
            artifact_path="per_query_results.csv",
            tracking_uri=cfg.tracking.uri,
            dst_path=str(tmp_path),
        )
    )
    metric_cols = [c for c in table.columns if f"{c}.reason" in table.columns]
    assert {"faithfulness", "context_precision", "answer_judge.accuracy"} <= set(metric_cols)
    for col in metric_cols:
        bad = table[table[col].isna() & table[f"{col}.reason"].isna()]
        assert bad.empty, (col, bad["id"].tolist())
