"""Issue 41 (3) and issue 42 (3): a run's MLflow metrics put the headline first, and a DeepEval
backend's values are MLflow metrics by the same key-metric rule as ours."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import DictConfig

from rag_experiments.job import run_job
from rag_experiments.metrics.aggregate import Aggregate, to_metrics
from rag_experiments.records import MetricSpec
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.selection import select_metrics

SPECS = [
    MetricSpec("Hit@1"),
    MetricSpec("faithfulness", key=70),
    MetricSpec("nDCG@10", key=10),
]
AGGS = [
    Aggregate("Hit@1", "all", 0.25, 4, 0, 0.0, 0.5),
    Aggregate("faithfulness", "all", 0.5, 4, 0, 0.25, 0.75),
    Aggregate("nDCG@10", "all", 0.5, 4, 0, 0.25, 0.75),
    Aggregate("nDCG@10", "procedural", 0.75, 2, 0, 0.5, 1.0),
]


def test_selected_metrics_put_key_means_first_then_their_cis_then_run_values() -> None:
    values = {"n_samples": 4.0, **to_metrics(AGGS), "duration_s": 1.5}
    assert list(select_metrics(values, SPECS)) == [
        "nDCG@10",  # key 10 before key 70, whatever the spec or value order
        "faithfulness",
        "nDCG@10_ci_low",
        "nDCG@10_ci_high",
        "nDCG@10_n_valid",
        "faithfulness_ci_low",
        "faithfulness_ci_high",
        "faithfulness_n_valid",
        "n_samples",
        "duration_s",
        "by_type/procedural/nDCG@10",
    ]


@pytest.mark.slow
def test_the_store_lists_metrics_in_the_order_first_logged(tmp_path: Path) -> None:
    """What MLflow's run page shows first (it lists the run's ``latest_metrics`` as the store
    returns them): the key metrics, though other values were logged before the summary."""
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    tracker = MlflowTracker(uri, traces=False)
    with tracker.start_run(params={}, config_yaml="", tags={}) as run_id:
        tracker.log_summary({"n_samples": 4.0, **to_metrics(AGGS)}, SPECS)
        tracker.log_metrics({"n_dropped": 0.0})
    listed = list(MlflowClient(uri).get_run(run_id).data.metrics)
    assert listed[:3] == ["nDCG_at_10", "faithfulness", "nDCG_at_10_ci_low"]
    assert listed[-1] == "n_dropped"
    with sqlite3.connect(tmp_path / "mlruns.db") as db:
        rows = [
            k for (k,) in db.execute("SELECT key FROM latest_metrics WHERE run_uuid = ?", (run_id,))
        ]
    assert rows == listed


V5 = ",".join(["{verdict:yes,reason:r}"] * 3 + ["{verdict:no,reason:r}"] * 2)
DEEPEVAL_FAKE = (
    "judge=fake",
    "llm=fake",
    "embedder=hash",
    "max_samples=3",
    "tracking.traces=false",
    "+judge.responses.Truths={truths:[t]}",
    "+judge.responses.Claims={claims:[a,b,c,d,e]}",
    "+judge.responses.Statements={statements:[a,b,c,d,e]}",
    f"+judge.responses.Verdicts={{verdicts:[{V5}]}}",
    "+judge.responses.ContextualRelevancyVerdicts={verdicts:[{statement:s,verdict:yes}]}",
)


@pytest.mark.slow
@pytest.mark.parametrize("suite", ["deepeval", "both"])
def test_deepeval_values_are_read_back_from_the_store_as_metrics(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, suite: str
) -> None:
    """Issue 42 (3): the run's MLflow metrics held no DeepEval value. Its key columns
    (faithfulness 70, answer relevancy 80, context precision 90, context recall 100 in the
    declarations) are logged with CI and n_valid as ours are; its extra column
    ``deepeval.context_relevancy`` (no key) stays in the tables."""
    run_job(compose_cfg(f"metrics={suite}", *DEEPEVAL_FAKE))
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    (run,) = client.search_runs([exp.experiment_id])
    metrics = run.data.metrics
    # 3 of 5 verdicts not "no" on every row (as in test_deepeval_backend): mean 0.6 over 3
    assert metrics["deepeval.faithfulness"] == pytest.approx(0.6)
    assert metrics["deepeval.faithfulness_n_valid"] == 3.0
    for name in ("answer_relevancy", "context_precision", "context_recall"):
        assert f"deepeval.{name}_n_valid" in metrics
    assert "deepeval.context_relevancy" not in metrics
    listed = list(metrics)
    first = listed.index("deepeval.faithfulness")
    assert first < listed.index("deepeval.faithfulness_ci_low")
    assert first < listed.index("n_samples")
    if suite == "both":
        assert "faithfulness" in metrics
        assert listed.index("faithfulness") < first  # same priority: spec order, ours first


def test_a_sweep_parent_is_named_for_the_sweep_as_typed() -> None:
    from rag_experiments.tracking.sweep import sweep_run_name

    cli = ["chunker=semantic,fixed", "chunker.size=256,512", "metrics=retrieval"]
    assert sweep_run_name(cli, {}) == "sweep chunker=semantic,fixed × chunker.size=256,512"
    assert sweep_run_name(["max_samples=8"], {"retriever": {"top_k": "range(1,4)"}}) == (
        "sweep retriever.top_k=range(1,4)"
    )
    assert sweep_run_name(["max_samples=8"], {}) is None
    long = sweep_run_name([f"x{i}.key=1,2" for i in range(40)], {})
    assert long is not None and len(long) == 250 and "sha256" in long
