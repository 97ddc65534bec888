"""Field hardening (issue 16): a dead model stops the job before any question (preflight), an
Optuna sweep survives NaN objectives, our own errors print without a traceback, and rows a
loader leaves out are counted and named. Every input is built here: a dead port, scripted
model servers, a BEIR folder with a grade-0-only query, an invalid JMESPath, a judge that
answers garbage."""

from __future__ import annotations

import json
import math
import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlflow
import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from omegaconf import DictConfig
from pytest_httpserver import HTTPServer

from rag_experiments.data.beir import BeirDataset
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.embedding.ollama import OllamaEmbedder
from rag_experiments.embedding.openai_compat import OpenAICompatEmbedder
from rag_experiments.errors import ConfigError, PreflightError, TargetError
from rag_experiments.job import preflight, run_job
from rag_experiments.lifecycle.objective import NaNObjective, nan_reason, objective_value
from rag_experiments.llm.errors import LLMHTTPError, LLMUnreachableError, ModelNotFoundError
from rag_experiments.llm.factory import ModelSession
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.ollama import OllamaChat
from rag_experiments.llm.openai_compat import OpenAICompatChat
from rag_experiments.records import MetricValue
from rag_experiments.targets.baseline import BaselineTarget
from rag_experiments.targets.http import TARGET_RETRY, HttpTarget
from rag_experiments.targets.response_mapping import ResponseMapping, quoted_form

RUN_TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rag_exp(cwd: Path, *args: str, verbose: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m rag_experiments [--verbose] run <args>`` with MLflow and caches in ``cwd``."""
    cmd = [
        sys.executable,
        "-m",
        "rag_experiments",
        *(["--verbose"] if verbose else []),
        "run",
        *args,
        f"tracking.uri=sqlite:///{cwd}/mlruns.db",
        f"paths.cache_dir={cwd}/cache",
        "progress=false",
    ]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )


def _explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nSTDOUT:\n{done.stdout[-3000:]}\nSTDERR:\n{done.stderr[-3000:]}"


def _runs(cwd: Path) -> list[mlflow.entities.Run]:
    client = mlflow.MlflowClient(f"sqlite:///{cwd}/mlruns.db")
    exp = client.get_experiment_by_name("rag-experiments")
    return list(client.search_runs([exp.experiment_id])) if exp else []


# --- 1. preflight ----------------------------------------------------------------------------


def test_a_refused_judge_port_fails_the_preflight_at_once() -> None:
    port = _free_port()
    session = ModelSession()
    judge = session.build_chat(OpenAICompatChat(base_url=f"http://127.0.0.1:{port}/v1"), "judge")
    generator = session.build_chat(FakeChat(), "generator")
    started = time.perf_counter()
    with pytest.raises(PreflightError) as info:
        preflight({"generator": generator, "embedder": HashEmbedder(), "judge": judge})
    elapsed = time.perf_counter() - started
    assert info.value.role == "judge" and info.value.reason == "unreachable"
    assert f"cannot reach http://127.0.0.1:{port}/v1/models" in str(info.value)
    assert "judge.base_url" in str(info.value)  # the fix
    assert elapsed < 3.0  # a refused connection is not retried (CHECK: no backoff)


def test_ollama_and_openai_checks(httpserver: HTTPServer, caplog: pytest.LogCaptureFixture) -> None:
    base = httpserver.url_for("").rstrip("/")
    httpserver.expect_request("/api/tags").respond_with_json(
        {
            "models": [
                {"name": "llama3.1:8b", "model": "llama3.1:8b", "digest": "abc"},
                {"name": "bge-m3:latest", "model": "bge-m3:latest", "digest": "def"},
            ]
        }
    )
    OllamaChat(model="llama3.1:8b", base_url=base).check()
    OllamaEmbedder(model="bge-m3", base_url=base).check()  # implicit :latest
    with pytest.raises(
        ModelNotFoundError,
        match=r"has: bge-m3:latest, llama3.1:8b\); run "
        r"`ollama pull mistral`",
    ):
        OllamaChat(model="mistral", base_url=base).check()

    httpserver.expect_request("/v1/models").respond_with_json(
        {"data": [{"id": "served", "max_model_len": 8192}]}
    )
    with caplog.at_level("INFO"):
        OpenAICompatChat(model="served", base_url=base + "/v1").check()
    assert "context window of 8192 tokens" in caplog.text
    # not listed: one 1-token call decides; vLLM answers 404 "model ... does not exist"
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        {"error": {"message": "The model `other` does not exist."}}, status=404
    )
    with pytest.raises(ModelNotFoundError):
        OpenAICompatChat(model="other", base_url=base + "/v1").check()
    sent = json.loads(httpserver.log[-1][0].get_data())
    assert sent["max_tokens"] == 1 and sent["model"] == "other"
    OpenAICompatEmbedder(model="served", base_url=base + "/v1").check()


def test_a_refused_key_is_said_with_its_fix(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/models").respond_with_json({"error": "no key"}, status=401)
    with pytest.raises(LLMHTTPError, match="refused the request: set llm.api_key_env"):
        OpenAICompatChat(model="m", base_url=httpserver.url_for("/v1")).check()


def test_the_target_checks_delegate_and_health_is_asked_once(httpserver: HTTPServer) -> None:
    from rag_experiments.data.base import EvalDataset

    dead = f"http://127.0.0.1:{_free_port()}"
    unused: Any = None  # check() uses only the embedder and the generator
    baseline = BaselineTarget(unused, OllamaEmbedder(base_url=dead), unused, unused, FakeChat())
    with pytest.raises(LLMUnreachableError, match=f"cannot reach {dead}/api/tags"):
        baseline.check()
    BaselineTarget(unused, HashEmbedder(), unused, unused, FakeChat()).check()

    with pytest.raises(TargetError, match="health check GET .* failed"):
        HttpTarget(
            f"{dead}/ask", health_url=f"{dead}/health", retry=replace(TARGET_RETRY, max_retries=0)
        ).check()
    httpserver.expect_request("/health").respond_with_json({"status": "ok"})
    target = HttpTarget(httpserver.url_for("/ask"), health_url=httpserver.url_for("/health"))
    target.check()
    target.prepare(EvalDataset("t", [], []))
    assert [r.path for r, _ in httpserver.log] == ["/health"]  # checked once


@pytest.mark.slow
def test_dead_judge_run_stops_before_answering_without_traceback(tmp_path: Path) -> None:
    port = _free_port()
    done = _rag_exp(
        tmp_path,
        "llm=fake",
        "embedder=hash",
        "judge=openai",
        f"judge.base_url=http://127.0.0.1:{port}/v1",
        "metrics=custom",
    )
    assert done.returncode == 1, _explain(done)
    assert "Traceback" not in done.stderr
    assert (
        f"rag-exp run: error: preflight: the judge cannot be used, so nothing was run: "
        f"cannot reach http://127.0.0.1:{port}/v1/models"
    ) in done.stderr
    (run,) = _runs(tmp_path)
    assert run.info.status == "FAILED" and "preflight" in run.data.tags["error"]
    assert "n_samples" not in run.data.metrics  # no question was answered


# --- 2. NaN objectives in an Optuna sweep ------------------------------------------------------


def test_nan_objective_says_which_metric_why_and_n_valid() -> None:
    rows = [
        {"faithfulness": MetricValue.nan("parse_error"), "nDCG@10": MetricValue(0.5)},
        {"faithfulness": MetricValue.nan("parse_error"), "nDCG@10": MetricValue(1.0)},
        {"faithfulness": MetricValue.nan("timeout"), "nDCG@10": MetricValue(0.0)},
    ]
    summary = {"nDCG@10": 0.5, "faithfulness_n_valid": 0.0}
    assert math.isnan(objective_value("0.5*nDCG@10+0.5*faithfulness", summary))
    assert objective_value("nDCG@10", summary) == 0.5
    reason = nan_reason("0.5*nDCG@10+0.5*faithfulness", rows)
    assert reason == (
        "objective 0.5*nDCG@10+0.5*faithfulness: faithfulness is NaN: 0 of 3 rows "
        "valid (parse_error: 2, timeout: 1)"
    )
    value = pickle.loads(pickle.dumps(NaNObjective(reason)))  # crosses launcher processes
    assert math.isnan(value) and value.reason == reason


@pytest.mark.slow
def test_optuna_study_with_only_nan_trials_ends_in_one_line(tmp_path: Path) -> None:
    done = _rag_exp(
        tmp_path,
        "-m",
        "experiment=optuna_search",
        "hydra.sweeper.n_trials=2",
        "objective=faithfulness",
        "metrics=custom",
        "llm=fake",
        "judge=fake",
        "judge.responses.FaithfulnessOutput=garbage",
        "embedder=hash",
        "max_samples=4",
        f"hydra.sweep.dir={tmp_path}/sweep",
    )
    assert done.returncode == 1, _explain(done)
    assert "Traceback" not in done.stderr
    line = (
        "no trial of the Optuna study completed, so there is no best value: objective "
        "faithfulness: faithfulness is NaN: 0 of 4 rows valid (parse_error: 4) (x2)"
    )
    assert f"rag-exp run: error: {line}" in done.stderr
    assert done.stdout.count("Failed experiment: objective faithfulness: faithfulness is NaN") == 2
    runs = _runs(tmp_path)
    (parent,) = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    children = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    assert parent.info.status == "FAILED" and line in parent.data.tags["error"]
    assert line in parent.data.tags["mlflow.note.content"]
    assert len(children) == 2 and all(c.info.status == "FINISHED" for c in children)
    assert all("0 of 4 rows valid" in c.data.tags["objective.error"] for c in children)


@pytest.mark.slow
def test_optuna_study_goes_on_after_a_nan_trial(tmp_path: Path) -> None:
    # The fake judge, its lengths not fitted, scripts 5 context verdicts: top_k=5 scores
    # context_precision, top_k=3 makes every row a parse_error (NaN objective). The seeded
    # sampler tries both. (Not the grid sampler: when its last point fails, the plugin itself
    # raises in Study.stop.)
    done = _rag_exp(
        tmp_path,
        "-m",
        "hydra/sweeper=rag_optuna",
        "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler.seed=0",
        "hydra.sweeper.n_jobs=1",
        "retriever.top_k=choice(3,5)",
        "objective=context_precision",
        "metrics=custom",
        "llm=fake",
        "judge=fake",
        "judge.fit_lengths=false",
        "embedder=hash",
        "max_samples=4",
        f"hydra.sweep.dir={tmp_path}/sweep",
    )
    assert done.returncode == 0, _explain(done)
    assert "Failed experiment: objective context_precision: context_precision is NaN" in done.stdout
    children = [r for r in _runs(tmp_path) if MLFLOW_PARENT_RUN_ID in r.data.tags]
    assert len(children) == 3 and all(c.info.status == "FINISHED" for c in children)
    by_k = {c.data.params["retriever.top_k"]: c for c in children}
    assert set(by_k) == {"3", "5"} and "objective.error" in by_k["3"].data.tags
    assert "objective.error" not in by_k["5"].data.tags
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert best["best_params"] == {"retriever.top_k": 5}
    assert best["best_value"] == pytest.approx(by_k["5"].data.metrics["context_precision"])


# --- 3. our own errors without a traceback -----------------------------------------------------


def test_jmespath_key_with_a_dash_gets_its_quoted_form() -> None:
    assert quoted_form("source-documents") == '"source-documents"'
    assert quoted_form("source-documents[*].page-content") == '"source-documents"[*]."page-content"'
    assert quoted_form("a[") is None and quoted_form('"ok-key"') is None
    with pytest.raises(ConfigError) as info:
        ResponseMapping(contexts="source-documents[*].page-content")
    message = str(info.value)
    assert '"source-documents"[*]."page-content"' in message
    # the override the message suggests, as the shell passes it, parses to the quoted form
    shell = message.split("shell double quotes: ")[1].split(" ; ")[0]
    assert shell.startswith('"') and shell.endswith('"')
    argument = shell[1:-1].replace('\\"', '"')  # what bash hands to the program
    override = OverridesParser.create().parse_override(argument)
    assert override.value() == '"source-documents"[*]."page-content"'
    ResponseMapping(contexts=override.value())  # valid


@pytest.mark.slow
def test_a_refused_config_is_one_line_and_verbose_shows_the_stack(tmp_path: Path) -> None:
    args = (
        "target=http",
        f"target.url=http://127.0.0.1:{_free_port()}/ask",
        "target.response.contexts=source-documents",
    )
    done = _rag_exp(tmp_path, *args)
    assert done.returncode == 1, _explain(done)
    assert "Traceback" not in done.stderr
    assert (
        "rag-exp run: error: target.response.contexts: 'source-documents' is not a valid "
        "JMESPath expression" in done.stderr
    )
    assert '"target.response.contexts=\'\\"source-documents\\"\'"' in done.stderr
    verbose = _rag_exp(tmp_path, *args, verbose=True)
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr, _explain(verbose)


@pytest.mark.slow
def test_a_failed_sweep_job_is_a_failed_child_and_one_line(tmp_path: Path) -> None:
    done = _rag_exp(
        tmp_path,
        "-m",
        "retriever.top_k=0,3",
        "embedder=hash",
        "llm=fake",
        "metrics=retrieval",
        f"hydra.sweep.dir={tmp_path}/sweep",
    )
    assert done.returncode == 1, _explain(done)
    assert "Traceback" not in done.stderr
    assert "rag-exp run: error: retriever.top_k must be >= 1, got 0" in done.stderr
    children = [r for r in _runs(tmp_path) if MLFLOW_PARENT_RUN_ID in r.data.tags]
    status = {c.data.params["retriever.top_k"]: c.info.status for c in children}
    assert status == {"0": "FAILED", "3": "FINISHED"}  # the basic sweeper runs its batch


# --- 4. nothing dropped silently ---------------------------------------------------------------


def _beir_folder(root: Path) -> Path:
    """4 queries: q1 and q3 have a relevant doc, q2 only a grade-0 row, q4 no row."""
    (root / "qrels").mkdir(parents=True)
    docs = [
        {"_id": f"d{i}", "title": f"Doc {i}", "text": f"Document {i} is about topic {i}."}
        for i in range(1, 4)
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    queries = [{"_id": f"q{i}", "text": f"What about topic {i}?"} for i in range(1, 5)]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0\nq3\td3\t2\nq2\td1\t0\n"
    )
    return root


def test_beir_queries_left_out_are_listed_with_their_reason(tmp_path: Path) -> None:
    data = BeirDataset(str(_beir_folder(tmp_path / "beir"))).load()
    assert [s.id for s in data.samples] == ["q1", "q3"]
    assert [(d.id, d.reason) for d in data.dropped] == [
        ("q2", "no_relevant_doc"),
        ("q4", "no_qrels"),
    ]
    assert data.dropped[0].detail == "its 2 row(s) in qrels/test.tsv all have score 0"
    assert data.dropped_summary() == (
        "2 rows of beir left out: no_relevant_doc 1 (q2); no_qrels 1 (q4)"
    )
    assert data.subset(1).dropped == data.dropped


def test_a_run_logs_and_prints_the_dropped_queries(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _beir_folder(tmp_path / "beir")
    cfg = compose_cfg(
        "dataset=beir",
        f"dataset.path={folder}",
        "chunker=none",
        "embedder=hash",
        "metrics=retrieval",
        "llm=fake",
        "judge=fake",
    )
    run_job(cfg)
    out = capsys.readouterr().out
    assert "dropped 2 rows of beir left out: no_relevant_doc 1 (q2); no_qrels 1 (q4)" in out
    (run,) = _runs(tmp_path)
    assert run.data.metrics["n_dropped"] == 2.0
    assert run.data.metrics["n_dropped.no_relevant_doc"] == 1.0
    assert run.data.metrics["n_dropped.no_qrels"] == 1.0
    assert run.data.tags["dataset.dropped"].startswith("2 rows of beir left out")
    assert run.data.metrics["n_samples"] == 2.0
    path = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db").download_artifacts(
        run.info.run_id, "dropped_rows.json", str(tmp_path / "dl")
    )
    rows = json.loads(Path(path).read_text())
    assert [(r["id"], r["reason"]) for r in rows] == [("q2", "no_relevant_doc"), ("q4", "no_qrels")]
