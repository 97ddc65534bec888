"""One MLflow trace per evaluated question (rag_experiments.tracking.traces): the issue's
must-show run, the batch writer against MLflow's own API, rationales and tracking.traces=false."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient
from mlflow.entities import AssessmentSourceType
from omegaconf import DictConfig

from rag_experiments.app import run_job
from rag_experiments.errors import TrackingError
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.tracking import traces as traces_mod
from rag_experiments.tracking.mlflow_tracker import ensure_experiment, open_client, read_table
from rag_experiments.tracking.traces import ColumnSource, log_traces, rationale

FAKE = ("llm=fake", "judge=fake", "embedder=hash", "metrics=custom")


def _search(uri: str, experiment_id: str) -> list:
    mlflow.set_tracking_uri(uri)
    return mlflow.search_traces(locations=[experiment_id], return_type="list")


@pytest.mark.slow
def test_run_logs_a_trace_per_question_with_retriever_span_and_judged_assessments(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_job(compose_cfg(*FAKE, "max_samples=6", "run_name=tr"))
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    (run,) = client.search_runs([exp.experiment_id])
    table = read_table(client, run.info.run_id).set_index("id")
    traces = _search(uri, exp.experiment_id)
    assert len(traces) >= 6
    assert len(traces) == len(table) == 6
    assert {t.info.trace_metadata["mlflow.sourceRun"] for t in traces} == {run.info.run_id}
    for trace in traces:
        row = table.loc[trace.info.client_request_id]
        (retriever,) = [s for s in trace.data.spans if s.span_type == "RETRIEVER"]
        docs = retriever.outputs
        assert [d["page_content"] for d in docs] == json.loads(row["retrieved_contexts"])
        assert [d["metadata"]["chunk_id"] for d in docs] == json.loads(row["retrieved_ids"])
        assert [d["metadata"]["rank"] for d in docs] == list(range(1, len(docs) + 1))
        assert all(d["metadata"]["doc_id"] == d["metadata"]["chunk_id"].split("#")[0] for d in docs)
        root = next(s for s in trace.data.spans if s.parent_id is None)
        assert root.inputs == {"question": row["user_input"]}
        assert root.outputs == row["response"]
        (llm,) = [s for s in trace.data.spans if s.span_type == "LLM"]
        assert llm.attributes["mlflow.llm.model"] == "fake-chat"
        feedback = {a.name: a for a in trace.info.assessments if a.feedback is not None}
        for name in ("faithfulness", "context_recall", "answer_relevancy", "context_precision"):
            assert feedback[name].source.source_type == AssessmentSourceType.LLM_JUDGE
            assert feedback[name].source.source_id == "fake-judge"
            assert feedback[name].rationale  # the judge's verdicts, or the NaN reason
        # one feedback per metric column, equal to the per-query table's cell
        metric_columns = [c for c in table.columns if f"{c}.reason" in table.columns]
        assert set(feedback) == set(metric_columns)
        for name in metric_columns:
            if isinstance(row[name], float) and math.isnan(row[name]):
                assert feedback[name].value is None
                assert feedback[name].error.error_code == row[f"{name}.reason"]
            else:
                assert feedback[name].value == pytest.approx(float(row[name]))
        assert feedback["nDCG@10"].source.source_type == AssessmentSourceType.CODE
        # the fake judge scripts claims 1 (context 1) and 2 (no context): hand-written lines
        if feedback["faithfulness"].value is not None:
            assert feedback["faithfulness"].rationale == (
                "✓ The answer states a fact from the first passage. (context 1)\n"
                "✗ The answer states a fact found in no passage. (no context)"
            )
        expectations = [a for a in trace.info.assessments if a.expectation is not None]
        if row["reference"] and isinstance(row["reference"], str):
            assert [(e.name, e.value) for e in expectations] == [
                ("expected_response", row["reference"])
            ]


@pytest.mark.slow
def test_traces_false_logs_no_trace(compose_cfg: Callable[..., DictConfig], tmp_path: Path) -> None:
    run_job(compose_cfg(*FAKE, "max_samples=2", "tracking.traces=false"))
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    exp = MlflowClient(uri).get_experiment_by_name("rag-experiments")
    assert _search(uri, exp.experiment_id) == []


def _rows() -> tuple[list[Sample], list[RagResponse], list[dict], list[MetricSpec]]:
    samples = [
        Sample(id="a", user_input="Who approves?", reference="The lead."),
        Sample(id="b", user_input="When?", question_type="timeline_sla"),
    ]
    responses = [
        RagResponse(
            response="The lead approves.",
            retrieved_contexts=["The lead approves it.", "Other text."],
            retrieved_ids=["policy#1", "guide#4"],
            latency_ms=12.5,
            metadata={"prompt_tokens": 30, "completion_tokens": 4, "generation_ms": 10.0},
        ),
        RagResponse(error="timeout", error_message="no answer in 30 s", latency_ms=30000.0),
    ]
    specs = [MetricSpec("faithfulness"), MetricSpec("nDCG@10")]
    values = [
        {"faithfulness": MetricValue(0.5), "nDCG@10": MetricValue(1.0)},
        {"faithfulness": MetricValue.nan("target_error"), "nDCG@10": MetricValue(0.0)},
    ]
    return samples, responses, values, specs


def _store(tmp_path: Path, name: str) -> tuple[str, str, str]:
    uri = f"sqlite:///{tmp_path}/{name}.db"
    client = open_client(uri)
    experiment_id = ensure_experiment(client, name, uri)
    return uri, experiment_id, client.create_run(experiment_id).info.run_id


def _summary(trace) -> dict:
    spans = sorted(
        (s.name, s.span_type, json.dumps(s.inputs), json.dumps(s.outputs), s.status.status_code)
        for s in trace.data.spans
    )
    assessments = sorted(
        (
            a.name,
            json.dumps(a.value),
            a.rationale if a.feedback is not None else None,
            a.source.source_type,
            a.source.source_id,
            a.error.error_code if a.error else None,
        )
        for a in trace.info.assessments
    )
    info = trace.info
    return {
        "spans": spans,
        "assessments": assessments,
        "state": info.state,
        "duration": info.execution_duration,
        "client_request_id": info.client_request_id,
        "previews": (info.request_preview, info.response_preview),
        "tags": {k: v for k, v in info.tags.items() if not k.startswith("mlflow.")},
        "name": info.tags.get("mlflow.traceName"),
    }


@pytest.mark.slow
def test_batch_writer_stores_what_mlflow_start_trace_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples, responses, values, specs = _rows()
    sources = {
        "faithfulness": ColumnSource(AssessmentSourceType.LLM_JUDGE, "judge-x", "faithfulness"),
        "nDCG@10": ColumnSource(AssessmentSourceType.CODE, "rag-experiments"),
    }
    audit = [
        {"id": "a", "faithfulness": {"claims": [{"claim": "c", "context": 1, "supported": True}]}}
    ]
    summaries = []
    for name, batch in (("bulk", True), ("api", False)):
        if not batch:  # MLflow's own start_trace, one trace per call
            monkeypatch.setattr(traces_mod, "_insert_sql", lambda *a: False)
        uri, experiment_id, run_id = _store(tmp_path, name)
        stats = log_traces(
            uri, experiment_id, run_id, samples, responses, values, specs,
            sources=sources, audit=audit, model="m-1",
        )  # fmt: skip
        assert (stats.traces, stats.spans, stats.assessments) == (2, 5, 5)
        found = sorted(_search(uri, experiment_id), key=lambda t: t.info.client_request_id)
        assert [t.info.trace_metadata["mlflow.sourceRun"] for t in found] == [run_id, run_id]
        summaries.append([_summary(t) for t in found])
    bulk, api = summaries
    assert bulk == api
    a, b = bulk
    assert a["duration"] == 12 and b["duration"] == 30000  # the answers' latencies, ms
    assert ("faithfulness", "0.5", "✓ c (context 1)", "LLM_JUDGE", "judge-x", None) in a[
        "assessments"
    ]
    assert ("expected_response", '"The lead."', None, "HUMAN", "dataset", None) in a["assessments"]
    assert (
        "faithfulness",
        "null",
        "NaN: target_error",
        "LLM_JUDGE",
        "judge-x",
        "target_error",
    ) in (b["assessments"])
    assert [s[1] for s in b["spans"]] == ["CHAIN", "RETRIEVER"]  # no generation on a timeout
    assert b["spans"][0][4] == "ERROR" and b["tags"]["error"].startswith("timeout")


def test_retriever_documents_and_llm_span_timing(tmp_path: Path) -> None:
    samples, responses, values, specs = _rows()
    info, spans = traces_mod.question_trace(
        samples[0], responses[0], values[0], specs, sources={}, audit=None,
        experiment_id="1", run_id="r", model="m-1", start_ns=1_000_000_000,
    )  # fmt: skip
    root, retrieve, generate = spans
    assert retrieve.outputs == [
        {"page_content": "The lead approves it.", "metadata": {"rank": 1, "chunk_id": "policy#1",
         "doc_id": "policy"}, "id": None},
        {"page_content": "Other text.", "metadata": {"rank": 2, "chunk_id": "guide#4",
         "doc_id": "guide"}, "id": None},
    ]  # fmt: skip
    # 12.5 ms in all, the last 10 ms generating: retrieval 0-2.5 ms, generation 2.5-12.5 ms
    assert (root.start_time_ns, root.end_time_ns) == (1_000_000_000, 1_012_500_000)
    assert (retrieve.start_time_ns, retrieve.end_time_ns) == (1_000_000_000, 1_002_500_000)
    assert (generate.start_time_ns, generate.end_time_ns) == (1_002_500_000, 1_012_500_000)
    assert generate.attributes["mlflow.chat.tokenUsage"] == {
        "input_tokens": 30,
        "output_tokens": 4,
        "total_tokens": 34,
    }
    assert info.execution_duration == 12


def test_rationale_lists_verdicts_and_nan_reasons() -> None:
    record = {
        "verdicts": [{"rank": 1, "relevant": True}, {"rank": 2, "relevant": False}],
        "judgement": {"error_message": None},
    }
    assert rationale(MetricValue(1.0), record) == "context 1: relevant\ncontext 2: not relevant"
    failed = {"judgement": {"error_message": "bad JSON at line 1"}, "verdicts": []}
    assert rationale(MetricValue.nan("parse_error"), failed) == (
        "NaN: parse_error\nbad JSON at line 1"
    )
    assert rationale(MetricValue(0.0, "empty_context"), None) == "flag: empty_context"
    assert rationale(MetricValue(0.3), None) is None


def test_a_folder_store_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    samples, responses, values, specs = _rows()
    with pytest.raises(TrackingError, match="keeps no trace spans"):
        log_traces(
            str(tmp_path / "mlruns"), "0", "r", samples, responses, values, specs, sources={}
        )
    assert not (tmp_path / "mlruns").exists() or not list((tmp_path / "mlruns").rglob("traces"))
