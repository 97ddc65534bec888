"""Our judged metrics as MLflow GenAI scorers (rag_experiments.mlflow_scorers), and traces an
app logged read back as recorded answers (dataset=mlflow_traces)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.entities import Document, SpanType
from omegaconf import DictConfig

from rag_experiments.errors import DatasetError
from rag_experiments.job import run_job
from rag_experiments.llm.fake import FakeChat
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.mlflow_scorers import faithfulness_scorer, row_of
from rag_experiments.tracking.store import read_table
from rag_experiments.tracking.trace_dataset import MlflowTracesDataset

CLAIMS = {
    "claims": [
        {"claim": "a", "context": 1},
        {"claim": "b", "context": 0},
        {"claim": "c", "context": 0},
    ]
}
"""Three claims: one in context 1, two in none."""


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Experiments these tests make with ``mlflow.set_experiment`` get MLflow's default
    artifact root, ``./mlruns``: keep it in the test's folder, not the project's (MLflow's
    process-wide active experiment is reset after each test by conftest)."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.slow
def test_faithfulness_scorer_in_mlflow_evaluate_equals_our_metric(tmp_path: Path) -> None:
    judge = FakeChat({"FaithfulnessOutput": CLAIMS}, model="fake-judge")
    data = [
        {  # 1 of 3 claims supported -> 1/3
            "inputs": {"question": "Who approves the agreement?"},
            "outputs": {"response": "The lead approves it.", "retrieved_contexts": ["x", "y"]},
        },
        {  # no context at all -> 0.0, flagged empty_context, no judge call
            "inputs": {"question": "When is it due?"},
            "outputs": {"response": "Within 10 days.", "retrieved_contexts": []},
        },
        {  # a refusal makes no claim -> NaN refusal
            "inputs": "Where is the form?",
            "outputs": "I don't know.",
        },
    ]
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/m.db")
    mlflow.set_experiment("scorers")
    result = mlflow.genai.evaluate(data=data, scorers=[faithfulness_scorer(judge)])
    ours = Faithfulness(judge)
    rows = [row_of(d["inputs"], d["outputs"], None, None) for d in data]
    expected = [
        v["faithfulness"] for v in ours.evaluate([r[0] for r in rows], [r[1] for r in rows])
    ]
    assert [e.value for e in expected[:2]] == [pytest.approx(1 / 3), 0.0]
    assert math.isnan(expected[2].value) and expected[2].reason == "refusal"
    by_question = {}
    for trace_id in result.result_df["trace_id"]:
        trace = mlflow.get_trace(trace_id)
        (fb,) = [a for a in trace.info.assessments if a.name == "faithfulness"]
        by_question[repr(trace.data.spans[0].inputs)] = fb
    got = [by_question[repr(d["inputs"])] for d in data]
    assert got[0].value == pytest.approx(expected[0].value)
    assert got[1].value == expected[1].value == 0.0
    assert got[2].value is None and got[2].error.error_code == "refusal"
    assert got[0].rationale == "✓ a (context 1)\n✗ b (no context)\n✗ c (no context)"
    assert got[0].source.source_id == "fake-judge"
    assert result.metrics["faithfulness/mean"] == pytest.approx((1 / 3 + 0.0) / 2)


def _log_app_traces(uri: str, experiment: str) -> list[dict]:
    """Three questions traced the way a user's RAG app would (root span + RETRIEVER span)."""
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
    rows = [
        {
            "q": "Who approves a vendor's data processing agreement?",
            "a": "The Data Protection Lead approves it.",
            "docs": [("vendor-management", "Any vendor ... approved by the Data Protection Lead.")],
        },
        {
            "q": "How long are CCTV recordings kept?",
            "a": "For the period in the Data Retention Policy.",
            "docs": [
                ("physical-security", "Recordings are kept for the period set in DATA-02."),
                ("remote-work", "Staff working remotely use a VPN."),
            ],
        },
        {"q": "Who resets a compromised password?", "a": None, "docs": []},
    ]
    for row in rows:
        with mlflow.start_span(name="rag_app", span_type=SpanType.CHAIN) as root:
            root.set_inputs({"question": row["q"]})
            with mlflow.start_span(name="search", span_type=SpanType.RETRIEVER) as span:
                span.set_inputs({"query": row["q"]})
                span.set_outputs(
                    [
                        Document(page_content=text, metadata={"doc_uri": doc}, id=f"{doc}-{i}")
                        for i, (doc, text) in enumerate(row["docs"])
                    ]
                )
            if row["a"] is not None:
                root.set_outputs({"answer": row["a"]})
    mlflow.flush_trace_async_logging()
    return rows


@pytest.mark.slow
def test_mlflow_traces_dataset_reads_an_apps_traces_and_evaluates_them(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    logged = _log_app_traces(uri, "my-app")
    dataset = MlflowTracesDataset(experiment="my-app", tracking_uri=uri).load()
    by_q = {s.user_input: s.recorded for s in dataset.samples}  # same-ms traces: any order
    assert sorted(by_q) == sorted(r["q"] for r in logged)
    for row in logged:
        recorded = by_q[row["q"]]
        assert recorded.response == row["a"]
        assert recorded.retrieved_contexts == [text for _, text in row["docs"]]
        assert recorded.retrieved_doc_ids == ([doc for doc, _ in row["docs"]] or None)
        assert recorded.retrieved_ids == (
            [f"{d}-{i}" for i, (d, _) in enumerate(row["docs"])] or None
        )

    run_job(
        compose_cfg(
            "dataset=mlflow_traces",
            "dataset.experiment=my-app",
            "target=recorded",
            "judge=fake",
            "llm=fake",
            "embedder=hash",
            "metrics=custom",
            "max_failure_rate=1.0",
            "run_name=from-traces",
        )
    )
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    (run,) = client.search_runs([exp.experiment_id])
    table = read_table(client, run.info.run_id)
    table = table.set_index("user_input")
    assert sorted(table.index) == sorted(r["q"] for r in logged)
    # the fake judge: claims in contexts 1 and 0 -> faithfulness 1/2 for both answers,
    # NaN no_response for the trace without an answer
    answered = [r["q"] for r in logged if r["a"] is not None]
    assert list(table.loc[answered, "faithfulness"]) == [0.5, 0.5]
    assert math.isnan(table.loc[logged[2]["q"], "faithfulness"])
    assert table.loc[logged[2]["q"], "faithfulness.reason"] == "no_response"
    assert run.data.tags["dataset.name"] == "traces-my-app"


def test_mlflow_traces_dataset_names_a_missing_experiment(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no MLflow experiment named or numbered 'nope'"):
        MlflowTracesDataset(experiment="nope", tracking_uri=f"sqlite:///{tmp_path}/x.db").load()


@pytest.mark.slow
def test_the_four_scorers_on_a_runs_traces_give_the_runs_values(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    from rag_experiments.mlflow_scorers import rag_scorers

    run_job(
        compose_cfg("llm=fake", "judge=fake", "embedder=hash", "metrics=custom", "max_samples=4")
    )
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    (run,) = client.search_runs([exp.experiment_id])
    table = read_table(client, run.info.run_id).set_index("id")
    mlflow.set_tracking_uri(uri)
    traces = mlflow.search_traces(locations=[exp.experiment_id], return_type="list")
    mlflow.set_experiment("rescored")
    result = mlflow.genai.evaluate(data=traces, scorers=rag_scorers(judge="fake", embedder="hash"))
    columns = ("faithfulness", "answer_relevancy", "context_precision", "context_recall")
    checked = 0
    for trace_id in result.result_df["trace_id"]:
        trace = mlflow.get_trace(trace_id)  # a copy in "rescored": tags kept, not request ids
        row = table.loc[trace.info.tags["question_id"]]
        found = [a for a in trace.info.assessments if a.name in columns]
        rescored = {a.name: a for a in found}
        assert len(found) == len(rescored) == len(columns)  # the scorers' feedback, once each
        for name in columns:
            if math.isnan(row[name]):
                assert rescored[name].value is None
                assert rescored[name].error.error_code == row[f"{name}.reason"]
            else:
                assert rescored[name].value == pytest.approx(row[name], abs=1e-9)
            checked += 1
    assert checked == 4 * len(columns)
