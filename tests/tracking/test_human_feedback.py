"""People's labels as ``HUMAN`` feedback on a run's traces
(:mod:`rag_experiments.tracking.human_feedback`): written once per (trace, metric, grader),
updated in place, read back with ``mlflow.search_traces``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from rag_experiments.errors import TrackingError
from rag_experiments.tracking.human_feedback import human_feedback, log_human_label

pytestmark = pytest.mark.slow  # a run on an MLflow sqlite store

RUN = ("llm=fake", "judge=fake", "embedder=hash", "metrics=custom", "target=recorded")


def test_log_keep_update_and_read_back(tmp_path: Path, compose_cfg: Any) -> None:
    from rag_experiments.job import run_job

    data = tmp_path / "eval.jsonl"
    rows = [
        {"id": f"q{i}", "user_input": f"question {i}?", "reference": "A fact.",
         "recorded": {"response": "A fact.", "retrieved_contexts": ["A fact."]}}
        for i in range(2)
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run_job(compose_cfg(*RUN, "dataset=jsonl", f"dataset.path={data}"))
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rag-experiments").experiment_id])
    run_id = run.info.run_id

    assert log_human_label(uri, run_id, "q0", "faithfulness", 1.0, "ana") == "logged"
    assert log_human_label(uri, run_id, "q0", "faithfulness", 1.0, "ana") == "kept"
    assert log_human_label(uri, run_id, "q0", "faithfulness", 0.0, "ana") == "updated"
    assert log_human_label(uri, run_id, "q0", "faithfulness", 1.0, "bob") == "logged"
    human = human_feedback(uri, run_id, ["q0", "q1"])
    got = sorted((h.sample_id, h.metric, h.value, h.grader) for h in human)
    assert got == [("q0", "faithfulness", 0.0, "ana"), ("q0", "faithfulness", 1.0, "bob")]
    # the judge's own feedback of the same name is still there, with its own source
    trace = client.get_trace(human[0].trace_id)
    sources = {a.source.source_type for a in trace.info.assessments if a.name == "faithfulness"}
    assert sources == {"HUMAN", "LLM_JUDGE"}
    with pytest.raises(TrackingError, match="the run must have logged its traces"):
        log_human_label(uri, run_id, "absent", "faithfulness", 1.0, "ana")
