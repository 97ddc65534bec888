"""The MLflow server teams run: PostgreSQL backend, artifacts proxied by the server.

* the same run (fake models, ``metrics=custom``) logged to a sqlite file, to a server over
  sqlite and to a server over PostgreSQL stores identical params, metrics, per-query table,
  artifacts (downloaded through the server's proxy) and traces, spans and assessments;
* ``rerun``, ``merge``, ``compare``, ``report``, ``export`` and ``dataset=mlflow_traces`` work
  against the PostgreSQL server;
* outages, with the real server killed: before the run (the preflight refuses in seconds,
  nothing answered), during the end-of-run logging and restarted 5 s later (the run
  finishes, nothing missing or doubled), and left down (one line with the resume command;
  the resume after the restart logs the rest with no model call).

All slow: each needs a server (and PostgreSQL; skipped without it, failed in CI).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.errors import TrackingError
from rag_experiments.locations import CONF_DIR
from rag_experiments.tracking import trace_batch as traces
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.store import read_table
from tests.mlflow_server import (  # noqa: F401  (fixtures)
    APP_NAME,
    MlflowServer,
    mlflow_pg_app_server,
    mlflow_pg_server,
    mlflow_server,
    postgres,
)

pytestmark = pytest.mark.slow

N_QUESTIONS = 6
FAKE = [
    "llm=fake",
    "judge=fake",
    "embedder=hash",
    "metrics=custom",
    f"max_samples={N_QUESTIONS}",
    "progress=false",
]
"""The run every test makes: fake generator and judge, hashed embeddings, our metrics."""

VOLATILE_METRICS = ("duration_s", "latency", "_ms", "_per_s", "seconds")
"""Metric keys holding wall times (they differ between any two runs)."""
VOLATILE_COLUMNS = ("latency_ms", "generation_ms", "duration")
VOLATILE_PARAMS = ("tracking.uri", "paths.", "run_name")


def _env() -> dict[str, str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def _compose(tmp_path: Path, uri: str, experiment: str, *extra: str) -> Any:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            config_name="config",
            overrides=[
                *FAKE,
                f"paths.cache_dir={tmp_path}/cache",
                f"tracking.uri={uri}",
                f"tracking.experiment={experiment}",
                *extra,
            ],
        )


def _run_in_process(tmp_path: Path, uri: str, experiment: str, *extra: str) -> str:
    """``run_job`` in this process; the id of the run it made."""
    from rag_experiments.job import run_job

    cfg = _compose(tmp_path, uri, experiment, *extra)
    try:
        run_job(cfg)
    finally:
        GlobalHydra.instance().clear()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([exp.experiment_id])
    return run.info.run_id


def _rag_exp(cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rag_experiments", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if ok:
        assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


# --- what a run stored, without what differs by design ---------------------------------------


def _artifact_paths(client: MlflowClient, run_id: str, path: str | None = None) -> list[str]:
    out = []
    for info in client.list_artifacts(run_id, path):
        out += _artifact_paths(client, run_id, info.path) if info.is_dir else [info.path]
    return sorted(out)


def _text(client: MlflowClient, run_id: str, path: str, dst: Path) -> str:
    local = client.download_artifacts(run_id, path, str(dst))
    return Path(local).read_text(encoding="utf-8")


def _stable_table(frame: pd.DataFrame) -> pd.DataFrame:
    drop = [c for c in frame.columns if any(v in c for v in VOLATILE_COLUMNS)]
    return frame.drop(columns=drop).sort_values("id").reset_index(drop=True)


def _trace_view(client: MlflowClient, run_id: str) -> dict[str, Any]:
    """Per question id: the trace's tags and state, its spans (name, type, inputs, outputs,
    parent name) and its assessments (name, value, rationale, source, error)."""
    run = client.get_run(run_id)
    traces = client.search_traces(
        locations=[run.info.experiment_id],
        filter_string=f"metadata.`mlflow.sourceRun` = '{run_id}'",
        max_results=500,
    )
    out: dict[str, Any] = {}
    for trace in traces:
        info = trace.info
        qid = info.tags["question_id"]
        assert qid not in out, f"question {qid} has two traces"
        names = {s.span_id: s.name for s in trace.data.spans}
        spans = sorted(
            (s.name, s.span_type, json.dumps(s.inputs, sort_keys=True, default=str),
             json.dumps(s.outputs, sort_keys=True, default=str), names.get(s.parent_id))
            for s in trace.data.spans
        )  # fmt: skip
        assessments = sorted(
            (a.name, json.dumps(getattr(a, "value", None), default=str), a.rationale,
             a.source.source_type, a.source.source_id,
             a.error.error_code if getattr(a, "error", None) else None)
            for a in info.assessments
        )  # fmt: skip
        tags = {k: v for k, v in info.tags.items() if not k.startswith("mlflow.")}
        out[qid] = {
            "state": str(info.state),
            "tags": tags,
            "request": info.request_preview,
            "response": info.response_preview,
            "spans": spans,
            "assessments": assessments,
        }
    return out


def _stored(client: MlflowClient, run_id: str, dst: Path) -> dict[str, Any]:
    run = client.get_run(run_id)
    params = {k: v for k, v in run.data.params.items() if not k.startswith(VOLATILE_PARAMS)}
    metrics = {
        k: v for k, v in run.data.metrics.items() if not any(s in k for s in VOLATILE_METRICS)
    }
    paths = _artifact_paths(client, run_id)
    texts = {}
    for path in paths:
        if path in ("config.yaml",) or path.startswith("per_query"):
            continue  # config.yaml names the store; the tables hold latencies (compared below)
        texts[path] = _text(client, run_id, path, dst)
    table = _stable_table(read_table(client, run_id))
    split = json.loads(_text(client, run_id, "per_query.json", dst))
    return {
        "status": run.info.status,
        "params": params,
        "metrics": metrics,
        "artifacts": paths,
        "texts": texts,
        "table": table,
        "table_json": (split["columns"], len(split["data"])),
        "traces": _trace_view(client, run_id),
    }


def test_the_same_run_is_stored_identically_on_sqlite_a_server_and_a_postgres_server(
    tmp_path: Path,
    mlflow_server: str,  # noqa: F811
    mlflow_pg_server: str,  # noqa: F811
    mlflow_pg_app_server: str,  # noqa: F811
) -> None:
    stores = {
        "sqlite": f"sqlite:///{tmp_path}/mlruns.db",
        "server-sqlite": mlflow_server,
        "server-postgres": mlflow_pg_server,
        "server+plugin-postgres": mlflow_pg_app_server,
    }
    seen: dict[str, dict[str, Any]] = {}
    for name, uri in stores.items():
        run_id = _run_in_process(tmp_path / name, uri, "equal")
        (tmp_path / name / "dl").mkdir(parents=True, exist_ok=True)
        seen[name] = _stored(MlflowClient(uri), run_id, tmp_path / name / "dl")
    # the app's server took the batch endpoint, MLflow's own servers the per-trace API
    probed = {u: traces._PLUGIN_PROBED.get(u) for u in stores.values() if u.startswith("http")}
    assert probed == {mlflow_server: False, mlflow_pg_server: False, mlflow_pg_app_server: True}
    ref = seen["sqlite"]
    assert ref["status"] == "FINISHED"
    assert len(ref["table"]) == N_QUESTIONS and len(ref["traces"]) == N_QUESTIONS
    assert ref["metrics"]["n_samples"] == N_QUESTIONS
    assert ref["table_json"][1] == N_QUESTIONS
    n_assessments = sum(len(t["assessments"]) for t in ref["traces"].values())
    assert n_assessments >= N_QUESTIONS * 5  # a feedback per metric column, and expectations
    problems = []
    for name in ("server-sqlite", "server-postgres", "server+plugin-postgres"):
        got = seen[name]
        for part in ("status", "params", "artifacts", "texts", "table_json", "traces"):
            if got[part] != ref[part]:
                problems.append(f"{name} {part}: {_diff(got[part], ref[part])}")
        if got["metrics"].keys() != ref["metrics"].keys():
            problems.append(f"{name} metric keys: {got['metrics'].keys() ^ ref['metrics'].keys()}")
        for key, value in ref["metrics"].items():
            other = got["metrics"].get(key)
            if other != value and not (
                math.isnan(value) and other is not None and math.isnan(other)
            ):
                problems.append(f"{name} metric {key}: {other} != {value}")
        if not got["table"].equals(ref["table"]):
            problems.append(f"{name} per-query table: {_diff(got['table'], ref['table'])}")
    assert not problems, "\n".join(problems)


def _diff(got: Any, ref: Any) -> str:
    """A short account of how two stored parts differ."""
    if isinstance(got, dict) and isinstance(ref, dict):
        keys = sorted(set(got) | set(ref), key=str)
        return "; ".join(
            f"{k}: {str(got.get(k))[:300]} != {str(ref.get(k))[:300]}"
            for k in keys
            if got.get(k) != ref.get(k)
        )[:3000]
    if isinstance(got, pd.DataFrame):
        if list(got.columns) != list(ref.columns):
            return f"columns {list(got.columns)} != {list(ref.columns)}"
        cols = [c for c in got.columns if not got[c].equals(ref[c])]
        first = f"{got[cols].head(2).to_dict()} vs {ref[cols].head(2).to_dict()}"
        return f"columns differ: {cols}: {first}"[:3000]
    return f"{str(got)[:1000]} != {str(ref)[:1000]}"


def test_store_commands_against_the_postgres_server(
    tmp_path: Path,
    mlflow_pg_server: str,  # noqa: F811
) -> None:
    uri = mlflow_pg_server
    experiment = "commands"
    base = [*FAKE, "max_samples=20", f"tracking.uri={uri}", f"tracking.experiment={experiment}",
            f"paths.cache_dir={tmp_path}/cache"]  # fmt: skip
    client = MlflowClient(uri)

    _rag_exp(tmp_path, "run", *base, "run_name=a", f"hydra.run.dir={tmp_path}/a")
    run_a = json.loads((tmp_path / "a" / "checkpoint.json").read_text())["run_id"]
    # rerun: a new run tagged rerun_of, equal metrics (cached fake models)
    done = _rag_exp(tmp_path, "rerun", run_a, "--tracking-uri", uri)
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    (rerun,) = client.search_runs([exp_id], f"tags.rerun_of = '{run_a}'")
    assert rerun.info.status == "FINISHED", done.stdout
    # a sweep over two shards, merged into one run
    _rag_exp(tmp_path, "run", "-m", *base, "shard.count=2", "shard.index=0,1",
             f"hydra.sweep.dir={tmp_path}/sweep")  # fmt: skip
    shards = client.search_runs([exp_id], "params.`shard.count` = '2'")
    parent = {
        r.data.tags[MLFLOW_PARENT_RUN_ID] for r in shards if MLFLOW_PARENT_RUN_ID in r.data.tags
    }
    (parent_id,) = parent
    done = _rag_exp(tmp_path, "merge", parent_id, "--tracking-uri", uri)
    merged = client.get_run(done.stdout.split("into run ")[1].split()[0])
    assert merged.data.metrics["n_samples"] == 20
    # compare a with its rerun: identical per question
    done = _rag_exp(tmp_path, "compare", run_a, rerun.info.run_id, "--tracking-uri", uri, "--json")
    stdout = done.stdout[done.stdout.index("{") :]  # the JSON object, after any log line
    compared, _ = json.JSONDecoder().raw_decode(stdout)
    assert compared, done.stdout
    # report on the sweep's parent
    _rag_exp(tmp_path, "report", parent_id, "--tracking-uri", uri, "--out", str(tmp_path / "rep"))
    assert any((tmp_path / "rep").iterdir())
    # export a's answers, then score the exported file and a's traces as recorded answers
    out = tmp_path / "a.jsonl"
    _rag_exp(
        tmp_path, "export", run_a, "--tracking-uri", uri, "--format", "jsonl", "--out", str(out)
    )
    assert len(out.read_text().splitlines()) == 20
    _rag_exp(
        tmp_path, "run", *base, "dataset=mlflow_traces", f"dataset.experiment={experiment}",
        f"dataset.filter_string=\"metadata.`mlflow.sourceRun` = '{run_a}'\"",
        "target=recorded", "run_name=from-traces",
        f"hydra.run.dir={tmp_path}/t",
    )  # fmt: skip
    (scored,) = client.search_runs([exp_id], "tags.`mlflow.runName` = 'from-traces'")
    assert scored.info.status == "FINISHED"
    assert scored.data.metrics["n_samples"] == 20


# --- outages -----------------------------------------------------------------------------------


@pytest.fixture
def own_pg_server(
    postgres: Callable[[str], str],  # noqa: F811
    tmp_path: Path,
) -> Iterator[MlflowServer]:
    """A server over a fresh PostgreSQL database that the test may kill and restart."""
    name = f"fault_{os.getpid()}_{time.monotonic_ns()}"
    workdir = tmp_path / "server"
    workdir.mkdir()
    server = MlflowServer(workdir, postgres(name))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_server_down_before_the_run_fails_the_preflight_in_seconds(
    tmp_path: Path, own_pg_server: MlflowServer
) -> None:
    own_pg_server.kill()
    started = time.monotonic()
    with pytest.raises(TrackingError, match="preflight: the MLflow tracking server .* cannot"):
        _run_in_process(tmp_path, own_pg_server.url, "down", "llm.delay_s=5")
    assert time.monotonic() - started <= 10
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.jsonl"))


def _kill_at_end_of_run_logging(
    monkeypatch: pytest.MonkeyPatch, server: MlflowServer, restart_after_s: float | None
) -> list[float]:
    """Kill the server when the run starts logging its per-query table (the first upload of
    the end-of-run logging); restart it ``restart_after_s`` later (never when None)."""
    original = MlflowTracker.log_table
    when: list[float] = []

    def log_table(self: MlflowTracker, rows: Any, name: str = "per_query") -> None:
        if not when:
            when.append(time.monotonic())
            server.kill()
            if restart_after_s is not None:
                threading.Timer(restart_after_s, server.start).start()
        original(self, rows, name)

    monkeypatch.setattr(MlflowTracker, "log_table", log_table)
    return when


def _histories(client: MlflowClient, run_id: str) -> dict[str, int]:
    run = client.get_run(run_id)
    return {k: len(client.get_metric_history(run_id, k)) for k in run.data.metrics}


def test_a_server_restarted_during_end_of_run_logging_loses_and_doubles_nothing(
    tmp_path: Path, own_pg_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = own_pg_server.url
    reference = _run_in_process(tmp_path / "ref", uri, "reference")
    killed = _kill_at_end_of_run_logging(monkeypatch, own_pg_server, restart_after_s=5.0)
    run_id = _run_in_process(tmp_path / "faulty", uri, "restarted")
    assert killed, "the hook did not run"
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    ref = client.get_run(reference)
    assert run.data.metrics.keys() == ref.data.metrics.keys()  # nothing missing
    assert set(_histories(client, run_id).values()) == {1}  # nothing logged twice
    assert _artifact_paths(client, run_id) == _artifact_paths(client, reference)
    table = read_table(client, run_id)
    assert sorted(table["id"]) == sorted(read_table(client, reference)["id"])
    split = json.loads(_text(client, run_id, "per_query.json", tmp_path))
    assert len(split["data"]) == N_QUESTIONS  # the UI table was not appended twice
    assert len(_trace_view(client, run_id)) == N_QUESTIONS


@pytest.fixture
def own_pg_app_server(
    postgres: Callable[[str], str],  # noqa: F811
    tmp_path: Path,
) -> Iterator[MlflowServer]:
    """``mlflow server --app-name rag-experiments`` over a fresh PostgreSQL database that the
    test may kill and restart."""
    name = f"fault_app_{os.getpid()}_{time.monotonic_ns()}"
    workdir = tmp_path / "server"
    workdir.mkdir()
    server = MlflowServer(workdir, postgres(name), app_name=APP_NAME)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_app_server_restarted_during_a_trace_batch_loses_and_doubles_nothing(
    tmp_path: Path, own_pg_app_server: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = own_pg_app_server.url
    reference = _run_in_process(tmp_path / "ref", uri, "reference")
    original = traces.PluginTraceWriter._post
    posts: list[float] = []

    def post(self: Any, data: bytes) -> Any:  # a requests.Response
        posts.append(time.monotonic())
        if len(posts) == 1:  # the first batch request finds the server gone; back 5 s later
            own_pg_app_server.kill()
            threading.Timer(5.0, own_pg_app_server.start).start()
        return original(self, data)

    monkeypatch.setattr(traces.PluginTraceWriter, "_post", post)
    run_id = _run_in_process(tmp_path / "faulty", uri, "restarted")
    assert len(posts) >= 2, "the batch request was not retried"
    assert posts[-1] - posts[0] >= 4.0  # the retry that succeeded came after the restart
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert "traces.error" not in run.data.tags
    got, ref = _trace_view(client, run_id), _trace_view(client, reference)
    assert len(got) == len(ref) == N_QUESTIONS  # nothing missing, nothing doubled
    assert sorted(len(t["assessments"]) for t in got.values()) == sorted(
        len(t["assessments"]) for t in ref.values()
    )
    assert set(_histories(client, run_id).values()) == {1}


def test_a_server_left_down_leaves_the_run_resumable_and_resume_asks_no_model(
    tmp_path: Path, own_pg_server: MlflowServer
) -> None:
    uri = own_pg_server.url
    job = tmp_path / "job"
    args = [
        "run", *FAKE, "llm.delay_s=0.3", f"tracking.uri={uri}", "tracking.experiment=left-down",
        "tracking.retry_s=5", f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={job}",
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_experiments", *args],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    responses = job / "responses.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if responses.exists() and len(responses.read_text().splitlines()) >= N_QUESTIONS - 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    own_pg_server.kill()  # during the last answer: the end-of-run logging finds no server
    killed_at = time.monotonic()
    stdout, stderr = proc.communicate(timeout=120)
    waited = time.monotonic() - killed_at
    assert proc.returncode == 1, stderr[-3000:]
    assert waited < 5 + 30, waited  # retry_s plus a request timeout, not urllib3's minutes
    assert "Traceback" not in stderr
    (line,) = [x for x in stderr.splitlines() if "rag-exp run: error:" in x]
    assert "stayed unreachable for 5 s" in line and "left RUNNING" in line
    command = line.split("with: ", 1)[1]
    run_id = json.loads((job / "checkpoint.json").read_text())["run_id"]
    assert command.endswith(f"resume={run_id}")
    assert len(responses.read_text().splitlines()) == N_QUESTIONS  # everything computed kept

    own_pg_server.start()
    client = MlflowClient(uri)
    assert client.get_run(run_id).info.status == "RUNNING"
    argv = shlex.split(command)
    assert argv[:2] == ["rag-exp", "run"]
    resumed = _rag_exp(tmp_path, *argv[1:])
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["n_samples"] == N_QUESTIONS
    # every answer from the checkpoint: the generator was not asked again, and the run's usage
    # is the first attempt's (saved in the checkpoint's usage.json)
    every = f"Resuming: {N_QUESTIONS} of {N_QUESTIONS} questions already answered"
    assert every in resumed.stdout + resumed.stderr
    assert run.data.metrics["generator.llm_calls"] == N_QUESTIONS
    # the fake judge is free and never cached (FakeChat.cacheable = False): it is asked once
    # per judged cell again, exactly one pass; a real judge's calls come from the LLM cache
    metrics = run.data.metrics
    assert metrics["judge.llm_calls"] == metrics["judge_calls_per_question"] * N_QUESTIONS
    assert set(_histories(client, run_id).values()) == {1}
    assert len(read_table(client, run_id)) == N_QUESTIONS
    assert len(_trace_view(client, run_id)) == N_QUESTIONS
    (exp,) = [client.get_experiment_by_name("left-down")]
    assert len(client.search_runs([exp.experiment_id])) == 1  # resumed, not a new run
