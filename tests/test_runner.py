"""The runner end to end with deterministic fakes: one bad question never kills a run,
everything is logged, and a run above max_failure_rate fails after logging."""

from __future__ import annotations

import math

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from rag_experiments.analysis.runs import run_values
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import RunFailedError
from rag_experiments.job import run_job
from rag_experiments.metrics.keyword_coverage import KeywordCoverage
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import Document, RagResponse, Sample
from rag_experiments.runner import run_experiment, summarise
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.store import RunStore


class ScriptedTarget:
    """Answers from a script; question ids in ``fail`` get a timeout, ``crash`` raises."""

    max_concurrency = 1

    def __init__(self, fail=(), crash=()):
        self.fail, self.crash = set(fail), set(crash)

    def prepare(self, dataset):
        self.prepared = dataset.name

    def answer(self, sample):
        if sample.id in self.crash:
            raise RuntimeError("boom")
        if sample.id in self.fail:
            return RagResponse(error="timeout", error_message="no answer in 1 s")
        return RagResponse(
            response="ok",
            retrieved_contexts=["alpha beta"],
            retrieved_doc_ids=["d1", "d2"],
            latency_ms=10.0,
        )

    def describe(self):
        return {"target": "scripted"}


def _dataset(n=5):
    samples = [
        Sample(
            id=f"q{i}",
            user_input=f"question {i}?",
            reference_doc_ids=["d1"],
            keywords=["alpha", "gamma"],
            question_type="procedural" if i % 2 else "compliance",
        )
        for i in range(n)
    ]
    return EvalDataset("toy", samples, [Document("d1", "alpha"), Document("d2", "beta")], "mem")


def _run(tmp_path, target, max_failure_rate=0.5):
    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path}/m.db", experiment="t", run_name="r")
    return run_experiment(
        _dataset(),
        target,
        [RetrievalMetrics(cutoffs=[1, 3]), KeywordCoverage()],
        tracker,
        params={"a": {"b": 1}},
        config_yaml="a:\n  b: 1\n",
        max_failure_rate=max_failure_rate,
        progress=False,
    )


def test_latency_leaves_out_answers_served_from_the_response_cache():
    samples = _dataset(5).samples
    responses = [
        RagResponse(response="a", latency_ms=10_000.0),
        RagResponse(response="b", latency_ms=12_000.0),
        RagResponse(response="c", latency_ms=14_000.0),
        RagResponse(response="d", latency_ms=11.0, metadata={"cached": True}),
        RagResponse(response="e", latency_ms=9.0, metadata={"cached": True}),
    ]
    _, counts = summarise(samples, responses, [{} for _ in samples], [])
    assert counts["n_cached_answers"] == 2
    assert counts["latency_ms_p50"] == 12_000.0  # median of the three generated answers
    assert counts["latency_ms_p95"] == pytest.approx(10_000 + 0.95 * 2 * 2_000)  # numpy, linear
    every = [RagResponse(latency_ms=5.0, metadata={"cached": True}) for _ in samples]
    _, counts = summarise(samples, every, [{} for _ in samples], [])
    assert math.isnan(counts["latency_ms_p50"]) and counts["n_cached_answers"] == 5


@pytest.mark.slow
def test_bad_questions_do_not_kill_the_run(tmp_path):
    run_id, result = _run(tmp_path, ScriptedTarget(fail=["q1"], crash=["q2"]))
    rows = {r["id"]: r for r in result.rows()}
    assert rows["q1"]["error"] == "timeout" and rows["q1"]["Hit@1.reason"] == "target_error"
    assert rows["q2"]["error"] == "target_exception" and "boom" in rows["q2"]["error_message"]
    assert rows["q0"]["Hit@1"] == 1.0 and rows["q0"]["keyword_coverage"] == 0.5
    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    run = client.get_run(run_id)
    m = run.data.metrics
    assert m["n_samples"] == 5 and m["n_failed"] == 2
    assert "Hit_at_1" not in m  # not a key metric: in average_results.csv (tracking.metrics)
    store = RunStore(client.tracking_uri)
    every = run_values(store, store.get_run(run.info.run_id))
    assert every["Hit_at_1"] == 1.0 and every["Hit_at_1_n_valid"] == 3
    assert m["latency_ms_p50"] == 10.0
    assert run.data.params["a.b"] == "1"
    assert run.info.status == "FINISHED"
    arts = {a.path for a in client.list_artifacts(run_id)}
    assert {"per_query_results.csv", "average_results.csv", "config.yaml"} <= arts


def test_too_many_failures_fail_the_run_after_logging(tmp_path):
    with pytest.raises(RunFailedError, match="3 of 5 questions failed"):
        _run(tmp_path, ScriptedTarget(fail=["q0", "q1", "q2"]), max_failure_rate=0.2)
    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    exp = client.get_experiment_by_name("t")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.metrics["n_failed"] == 3  # logged before failing
    assert "per_query_results.csv" in {a.path for a in client.list_artifacts(run.info.run_id)}


@pytest.mark.slow
def test_main_job_with_fakes_through_hydra(compose_cfg, tmp_path):
    """The whole job on the bundled sample: hash embedder + fake generator (fast)."""
    cfg = compose_cfg(
        "embedder=hash", "llm=fake", "judge=fake", "metrics=custom", "run_name=fake-e2e"
    )
    run_job(cfg)
    client = MlflowClient(cfg.tracking.uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (run,) = client.search_runs([exp.experiment_id])
    m = run.data.metrics
    assert m["n_samples"] >= 45 and m["n_failed"] == 0
    assert m["n_unanswerable"] >= 5
    assert m["nDCG_at_10_n_valid"] == m["n_samples"] - m["n_unanswerable"]
    assert 0.0 <= m["nDCG_at_10"] <= 1.0
    assert run.data.tags["dataset.name"] == "sample"
    path = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id,
        artifact_path="per_query_results.csv",
        tracking_uri=cfg.tracking.uri,
        dst_path=str(tmp_path),
    )
    import pandas as pd

    table = pd.read_csv(path)
    assert len(table) == m["n_samples"]
    # every metric cell has a value or a reason
    for col in ("nDCG@10", "keyword_coverage"):
        bad = table[table[col].isna() & table[f"{col}.reason"].isna()]
        assert bad.empty, bad[["id", col]]
    assert (table["response"].fillna("") != "").all()
    assert not any(math.isnan(v) for v in m.values())


@pytest.mark.slow
def test_default_run_logs_the_headline_metrics_and_prints_one_table(compose_cfg, capsys):
    """`make run` with fake models: about 100 MLflow metrics or fewer (about 1,400 before the
    headline selection), every other value in average_results.csv, one compact table."""
    fakes = ("embedder=hash", "llm=fake", "judge=fake", "metrics=custom", "max_samples=8")
    run_job(compose_cfg(*fakes, "run_name=headline"))
    printed = capsys.readouterr().out
    run_job(compose_cfg(*fakes, "run_name=everything", "tracking.metrics=all"))
    client = MlflowClient(compose_cfg().tracking.uri)
    exp = client.get_experiment_by_name("rag-experiments")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    headline, everything = runs["headline"], runs["everything"]
    logged = headline.data.metrics
    assert len(logged) <= 100 < 500 <= len(everything.data.metrics)
    for key in ("nDCG_at_10", "nDCG_at_10_ci_low", "nDCG_at_10_ci_high", "nDCG_at_10_n_valid"):
        assert key in logged
    assert {"n_samples", "n_cached_answers", "latency_ms_p50"} <= set(logged)
    assert not any(k.startswith(("Hit_at_1", "P_at_", "MAP_at_", "chunk.Hit")) for k in logged)
    by_type = [k.split("/")[2] for k in logged if k.startswith("by_type/")]
    assert all(name in {"nDCG_at_10", "MRR_at_10", "Hit_at_5", "R_at_10", "chunk.nDCG_at_10",
                        "keyword_coverage", "faithfulness", "answer_relevancy",
                        "context_precision", "context_recall", "answer_judge.accuracy",
                        "keyword_faithfulness"} for name in by_type)  # fmt: skip
    # nothing is lost: every value the other run logged is readable for this one, and the
    # aggregates (the same questions, deterministic fakes) are equal
    store = RunStore(client.tracking_uri)
    every = run_values(store, store.get_run(headline.info.run_id))
    assert set(everything.data.metrics) <= set(every)
    aggregates = {
        k: v
        for k, v in everything.data.metrics.items()
        if k.startswith("by_type/") or k.endswith(("_n_valid", "_ci_low", "_ci_high"))
    }
    assert {k: every[k] for k in aggregates} == pytest.approx(aggregates)
    table = printed[printed.index("  retrieval") :]
    assert "  answer\n" in table and "[95% CI] = bootstrap interval of the mean" in table
    assert table.count("\n") < 35  # one row per key/answer metric, not ~55 lines
    rows = [line for line in table.splitlines() if line.startswith("    ") and "@" in line]
    assert {len(r.rstrip()) for r in rows} == {len(rows[0].rstrip())}  # aligned columns
