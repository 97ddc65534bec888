"""MlflowTracker and the sweep callback against real MLflow stores: a sqlite file in
``tmp_path`` and a real ``mlflow server`` subprocess on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient
from mlflow.artifacts import download_artifacts
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
from omegaconf import OmegaConf

from rag_experiments.common import interrupt
from rag_experiments.common.redact import REDACTED
from rag_experiments.errors import TrackingError
from rag_experiments.lifecycle.sweep_callback import MlflowSweepCallback, announce_sweep_end
from rag_experiments.tracking import client as client_mod
from rag_experiments.tracking.mlflow_tracker import (
    MlflowTracker,
    mlflow_command,
    resolve_tracking_uri,
)
from rag_experiments.tracking.store import all_tags
from rag_experiments.tracking.sweep import (
    PARENT_RUN_ID_FILE,
    close_sweep,
    open_sweep,
    parent_swept_keys,
    read_parent_run_id,
)
from tests.mlflow_server import mlflow_server  # noqa: F401  (module-scoped fixture)

CONFIG_YAML = "retriever:\n  top_k: 5\nllm:\n  api_key: sk-secret\n"


@pytest.fixture(autouse=True)
def _no_leftover_run() -> Iterator[None]:
    """Every test must leave no active run; restore the global tracking URI afterwards."""
    before = mlflow.get_tracking_uri()
    yield
    leftover = mlflow.active_run()
    while mlflow.active_run() is not None:
        mlflow.end_run()
    mlflow.set_tracking_uri(before)
    assert leftover is None, "a test left an active MLflow run behind"


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/mlruns.db"


def _text(uri: str, run_id: str, path: str) -> str:
    local = download_artifacts(run_id=run_id, artifact_path=path, tracking_uri=uri)
    return Path(local).read_text(encoding="utf-8")


def _artifacts(uri: str, run_id: str) -> set[str]:
    return {f.path for f in MlflowClient(uri).list_artifacts(run_id)}


def _start(tracker: MlflowTracker, **kw: Any) -> AbstractContextManager[str]:
    """``tracker.start_run`` with empty params/tags and a small config unless given."""
    args: dict[str, Any] = {"params": {}, "config_yaml": CONFIG_YAML, "tags": {}}
    args.update(kw)
    return tracker.start_run(**args)


# --- URI ------------------------------------------------------------------------------------


def test_relative_sqlite_uri_resolves_against_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_tracking_uri("sqlite:///sub/m.db") == f"sqlite:///{tmp_path}/sub/m.db"
    assert (tmp_path / "sub").is_dir()
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_in_memory_sqlite_is_refused() -> None:
    with pytest.raises(TrackingError, match="in-memory"):
        MlflowTracker("sqlite://")


# --- run identity ---------------------------------------------------------------------------


def test_params_tags_and_config_are_logged_redacted(uri: str, tmp_path: Path) -> None:
    params = {
        "retriever": {"top_k": 5},
        "llm": {"api_key": "sk-secret", "prompt": "p" * 7000},
        "many": {f"p{i}": i for i in range(250)},  # > 100 params: several log_batch calls
    }
    tracker = MlflowTracker(uri, "exp", run_name="my-run")
    with _start(
        tracker, params=params, tags={"dataset.name": "demo", "auth_token": "t", "nDCG@10": "x"}
    ) as run_id:
        assert mlflow.active_run().info.run_id == run_id
    assert mlflow.active_run() is None

    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "my-run"
    p = run.data.params
    assert len(p) == 2 + 1 + 250
    assert p["retriever.top_k"] == "5"
    assert p["many.p249"] == "249"
    assert p["llm.api_key"] == REDACTED
    assert len(p["llm.prompt"]) == MAX_PARAM_VAL_LENGTH
    digest = hashlib.sha256(("p" * 7000).encode()).hexdigest()[:12]
    assert p["llm.prompt"].endswith(f"…[sha256:{digest}]")
    t = run.data.tags
    assert t["dataset.name"] == "demo"
    assert "auth_token" not in t  # not a visible tag: in tags.json, redacted there too
    kept = json.loads(_text(uri, run_id, "tags.json"))
    assert kept == {"auth_token": REDACTED, "nDCG_at_10": "x"}
    assert not any(k.startswith(("version.", "git.")) for k in t)  # environment.json holds them
    env = json.loads(_text(uri, run_id, "environment.json"))
    assert env["version.mlflow"] == mlflow.__version__
    assert env["version.python"] == ".".join(map(str, sys.version_info[:3]))
    assert "error" not in t
    config = _text(uri, run_id, "config.yaml")
    assert "sk-secret" not in config and REDACTED in config and "top_k: 5" in config
    # artifacts live beside the sqlite file, not in the working directory
    assert (tmp_path / "mlartifacts" / "exp").is_dir()


def test_two_long_values_differing_only_at_the_end_are_stored_differently(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    params = {"a": "z" * 6999 + "1", "b": "z" * 6999 + "2"}
    with _start(tracker, params=params) as run_id:
        pass
    p = MlflowClient(uri).get_run(run_id).data.params
    assert len(p["a"]) == len(p["b"]) == MAX_PARAM_VAL_LENGTH
    assert p["a"] != p["b"]


def test_resume_run_keeps_id_and_parent_tag(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker, params={"x": 1}) as first:
        pass
    with _start(tracker, params={"x": 1}, run_id=first) as second:
        tracker.log_metrics({"m": 1.0})
    assert second == first
    run = MlflowClient(uri).get_run(first)
    assert run.info.status == "FINISHED"
    assert run.data.metrics == {"m": 1.0}


def test_resume_with_different_params_is_refused(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker, params={"x": 1}) as run_id:
        pass
    with pytest.raises(TrackingError, match="refused the params"):
        with _start(tracker, params={"x": 2}, run_id=run_id):
            pass
    assert MlflowClient(uri).get_run(run_id).info.status == "FAILED"


def test_start_while_a_run_is_active_raises(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker):
        with pytest.raises(TrackingError, match="still active"):
            with _start(MlflowTracker(uri, "exp")):
                pass


# --- failures -------------------------------------------------------------------------------


def test_failed_body_sets_status_error_tag_and_traceback(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with pytest.raises(ValueError, match="boom"):
        with _start(tracker) as run_id:
            tracker.log_metrics({"P@5": 0.2})
            raise ValueError("boom: Bearer abc\nsecond line")
    assert mlflow.active_run() is None
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["error"] == f"ValueError: boom: {REDACTED}"
    assert run.data.metrics == {"P_at_5": 0.2}
    text = _text(uri, run_id, "error.txt")
    assert text.startswith("Traceback") and "ValueError: boom" in text and "abc" not in text
    assert json.loads(_text(uri, run_id, "metric_names.json")) == {"P@5": "P_at_5"}


def test_interrupted_run_ends_killed_and_its_message_names_the_run_to_resume(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with pytest.raises(interrupt.Interrupted) as info:
        with _start(tracker) as run_id:
            raise interrupt.Interrupted("SIGINT")
    assert info.value.run_id == run_id
    expected = (
        f"stopped by SIGINT; the answers so far are checkpointed in MLflow run {run_id}: "
        f"continue it with the same command plus resume={run_id}"
    )
    assert str(info.value) == expected
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "KILLED"
    assert run.data.tags["error"] == f"Interrupted: {expected}"


def test_interrupted_sweep_child_keeps_the_generic_resume_hint(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as parent:
        pass
    with pytest.raises(interrupt.Interrupted) as info:
        with _start(tracker, parent_run_id=parent):
            raise interrupt.Interrupted("SIGTERM")
    assert info.value.run_id is None
    assert str(info.value).endswith("plus resume=<its run id>")


def test_nested_run_left_open_by_the_body_is_ended(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        inner = mlflow.start_run(nested=True).info.run_id
    client = MlflowClient(uri)
    assert client.get_run(inner).info.status == "KILLED"
    assert client.get_run(run_id).info.status == "FINISHED"


# --- metrics --------------------------------------------------------------------------------


def test_nan_and_inf_metrics_are_not_logged(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        tracker.log_metrics({"nDCG@10": 0.5, "faithfulness": math.nan, "x": math.inf})
        tracker.log_metrics({"faithfulness_n_valid": 0})
    run = MlflowClient(uri).get_run(run_id)
    assert run.data.metrics == {"nDCG_at_10": 0.5, "faithfulness_n_valid": 0.0}
    assert MlflowClient(uri).get_metric_history(run_id, "faithfulness") == []
    assert json.loads(_text(uri, run_id, "metric_names.json")) == {
        "nDCG@10": "nDCG_at_10",
        "faithfulness": "faithfulness",
        "x": "x",
        "faithfulness_n_valid": "faithfulness_n_valid",
    }


def test_metric_collision_across_calls_raises(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with pytest.raises(TrackingError, match="'P@5' and 'P_at_5'"):
        with _start(tracker) as run_id:
            tracker.log_metrics({"P@5": 0.1})
            tracker.log_metrics({"P_at_5": 0.2})
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.metrics == {"P_at_5": 0.1}


def test_metric_step_is_kept(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        tracker.log_metrics({"loss": 1.0}, step=0)
        tracker.log_metrics({"loss": 0.5}, step=3)
    history = MlflowClient(uri).get_metric_history(run_id, "loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 1.0), (3, 0.5)]


def test_logging_outside_a_run_raises(uri: str) -> None:
    with pytest.raises(TrackingError, match="No MLflow run is open"):
        MlflowTracker(uri, "exp").log_metrics({"a": 1.0})


# --- tables and artifacts -------------------------------------------------------------------


def test_table_json_and_full_csv(uri: str) -> None:
    long_cell = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    rows = [
        {"id": "q1", "response": long_cell, "retrieved_doc_ids": ["d1", "d2"], "score": 0.5},
        {"id": "q2", "response": "short", "retrieved_doc_ids": [], "score": math.nan},
    ]
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        tracker.log_table(rows)
    assert {"per_query.json", "per_query_results.csv"} <= _artifacts(uri, run_id)
    csv = pd.read_csv(io.StringIO(_text(uri, run_id, "per_query_results.csv")))
    assert list(csv.columns) == ["id", "response", "retrieved_doc_ids", "score"]
    assert csv.loc[0, "response"] == long_cell
    assert json.loads(csv.loc[0, "retrieved_doc_ids"]) == ["d1", "d2"]
    experiment_id = MlflowClient(uri).get_run(run_id).info.experiment_id
    table = MlflowClient(uri).load_table(experiment_id, "per_query.json", run_ids=[run_id])
    assert table.loc[0, "response"] == long_cell
    assert table.loc[0, "retrieved_doc_ids"] == '["d1", "d2"]'


def test_table_json_can_be_switched_off(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp", log_table=False)
    with _start(tracker) as run_id:
        tracker.log_table([{"a": 1}], name="rows")
    assert {"rows_results.csv"} <= _artifacts(uri, run_id)
    assert "rows.json" not in _artifacts(uri, run_id)


def test_csv_text_dict_helpers_and_unsafe_names(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        tracker.log_csv([{"metric": "P@5", "mean": 0.25}], "average_results.csv")
        tracker.log_text("hello", "notes/readme.md")
        tracker.log_dict({"a": [1, 2]}, "specs.json")
        with pytest.raises(TrackingError, match="safe"):
            tracker.log_text("x", "../escape.txt")
    assert _text(uri, run_id, "average_results.csv") == "metric,mean\nP@5,0.25\n"
    assert _text(uri, run_id, "notes/readme.md") == "hello"
    assert json.loads(_text(uri, run_id, "specs.json")) == {"a": [1, 2]}


@pytest.mark.parametrize("source", ["beir:scifact", "datasets/sample/questions.jsonl"])
def test_log_dataset_records_our_digest(uri: str, source: str) -> None:
    digest = hashlib.sha256(b"dataset").hexdigest()
    rows = [{"id": "q1", "user_input": "Who?", "reference_doc_ids": ["d1"]}]
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        tracker.log_dataset("sample", digest, source, rows)
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.tags["dataset.digest"] == digest
    assert "dataset.source" not in run.data.tags  # kept in tags.json (issue 41)
    assert all_tags(client, run)["dataset.source"] == source
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.name == "sample"
    assert inp.dataset.digest == digest[:36]
    assert source in inp.dataset.source
    tags = {t.key: t.value for t in inp.tags}
    assert tags["mlflow.data.context"] == "evaluation"
    assert tags["dataset.digest"] == digest


def test_describe_location_names_uri_experiment_and_run(uri: str) -> None:
    tracker = MlflowTracker(uri, "exp")
    with _start(tracker) as run_id:
        pass
    text = tracker.describe_location()
    assert run_id in text and uri in text and "'exp'" in text
    assert f"view it with: {mlflow_command()} ui --backend-store-uri {uri}" in text
    assert tracker.run_url() is None


def test_mlflow_command_is_the_venv_s_absolute_script_or_python_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    monkeypatch.setattr(sys, "executable", str(python))
    assert mlflow_command() == f"{python} -m mlflow"  # no script beside the interpreter
    (tmp_path / "bin" / "mlflow").write_text("#!/bin/sh\n")
    assert mlflow_command() == str(tmp_path / "bin" / "mlflow")  # runs without the venv active


# --- sweeps ---------------------------------------------------------------------------------


def _child(uri: str, sweep_dir: Path, fail: bool) -> str:
    """One sweep job in this process: finds its parent through the file only."""
    tracker = MlflowTracker(uri, "sweep-exp")
    parent = read_parent_run_id(str(sweep_dir))
    assert parent is not None
    try:
        with _start(tracker, parent_run_id=parent) as run_id:
            tracker.log_metrics({"nDCG@10": 0.4})
            if fail:
                raise RuntimeError("job failed")
    except RuntimeError:
        pass
    return run_id


_CHILD_SCRIPT = textwrap.dedent(
    """
    import sys
    from rag_experiments.tracking import MlflowTracker, read_parent_run_id
    uri, sweep_dir, fail = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    tracker = MlflowTracker(uri, "sweep-exp")
    with tracker.start_run(params={"k": 1}, config_yaml="k: 1\\n", tags={},
                           parent_run_id=read_parent_run_id(sweep_dir)) as run_id:
        print("RUN_ID=" + run_id, flush=True)
        if fail:
            raise SystemExit("job failed")
    """
)


def _child_in_subprocess(uri: str, sweep_dir: Path, fail: bool) -> str:
    """One sweep job in another process, as with the joblib launcher."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD_SCRIPT, uri, str(sweep_dir), "1" if fail else "0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == (1 if fail else 0), done.stderr[-2000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RUN_ID=")]
    return line.removeprefix("RUN_ID=")


def _run_sweep(uri: str, sweep_dir: Path, child_other_process: bool) -> None:
    callback = MlflowSweepCallback(uri=uri, experiment="sweep-exp")
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    callback.on_multirun_start(config)
    parent_id = (sweep_dir / PARENT_RUN_ID_FILE).read_text().strip()
    assert read_parent_run_id(str(sweep_dir)) == parent_id

    ok = _child(uri, sweep_dir, fail=False)
    if child_other_process:
        bad = _child_in_subprocess(uri, sweep_dir, fail=True)
    else:
        bad = _child(uri, sweep_dir, fail=True)
    client = MlflowClient(uri)
    assert client.get_run(parent_id).info.status == "RUNNING"  # not active in this process
    callback.on_multirun_end(config)

    parent = client.get_run(parent_id)
    assert parent.info.status == "FAILED"
    assert parent.info.run_name == sweep_dir.name
    assert parent.data.tags["sweep.dir"] == str(sweep_dir)
    assert parent.data.metrics["sweep.children.total"] == 2.0
    assert parent.data.metrics["sweep.children.finished"] == 1.0
    assert parent.data.metrics["sweep.children.failed"] == 1.0
    assert parent.data.metrics["sweep.children.running"] == 0.0
    for run_id, status in ((ok, "FINISHED"), (bad, "FAILED")):
        child = client.get_run(run_id)
        assert child.info.status == status
        assert child.data.tags["mlflow.parentRunId"] == parent_id
    assert close_sweep(uri, str(sweep_dir)) is None  # already closed: left alone


SHARD_0 = {"shard.count": "2", "shard.index": "0"}
SHARD_1 = {"shard.count": "2", "shard.index": "1"}


@pytest.mark.parametrize(
    ("children", "merge_hint"),
    [
        ([SHARD_0, SHARD_1], True),  # only shard.index differs: one evaluation in shards
        ([SHARD_0, SHARD_0 | {"chunker.size": "512"}], False),
        ([SHARD_0 | {"chunker.size": "256"}, SHARD_1 | {"chunker.size": "512"}], False),
    ],
)
def test_sweep_end_names_merge_only_for_a_sweep_over_shard_index(
    uri: str, children: list[dict[str, str]], merge_hint: bool
) -> None:
    client = MlflowClient(uri)
    experiment = client.create_experiment("exp")
    parent = client.create_run(experiment).info.run_id
    for params in children:
        child = client.create_run(experiment, tags={MLFLOW_PARENT_RUN_ID: parent}).info.run_id
        for key, value in params.items():
            client.log_param(child, key, value)
        client.set_terminated(child, "FINISHED")
    lines = announce_sweep_end(uri, parent, "FINISHED", report=False).splitlines()
    assert lines[0].startswith(f"sweep parent run {parent} FINISHED (children: 2 finished)")
    hint = f"join them into one run with rag-exp merge {parent} --tracking-uri {uri}"
    assert (len(lines) == 3 and lines[2].endswith(hint)) is merge_hint
    assert len(lines) == (3 if merge_hint else 2)


@pytest.mark.slow
def test_sweep_parent_and_children_sqlite(uri: str, tmp_path: Path) -> None:
    _run_sweep(uri, tmp_path / "multirun" / "2024-01-01_sweep", child_other_process=False)


@pytest.mark.slow
def test_sweep_all_children_finished_gives_finished_parent(uri: str, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sw"
    callback = MlflowSweepCallback(uri=uri, experiment="sweep-exp")
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    callback.on_multirun_start(config)
    _child(uri, sweep_dir, fail=False)
    callback.on_multirun_end(config)
    parent = MlflowClient(uri).get_run(read_parent_run_id(str(sweep_dir)) or "")
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["sweep.children.total"] == 1.0


@pytest.mark.slow
def test_aborted_sweep_is_closed_failed(uri: str, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sw"
    callback = MlflowSweepCallback(uri=uri, experiment="sweep-exp")
    callback.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}}))
    _child(uri, sweep_dir, fail=False)
    callback._close_aborted()  # what the atexit hook does when Hydra skips on_multirun_end
    parent = MlflowClient(uri).get_run(read_parent_run_id(str(sweep_dir)) or "")
    assert parent.info.status == "FAILED"
    assert "stopped" in parent.data.tags["error"]


def test_read_parent_run_id_missing_and_corrupt(tmp_path: Path) -> None:
    assert read_parent_run_id(str(tmp_path)) is None
    (tmp_path / PARENT_RUN_ID_FILE).write_text("not a run id!\n")
    with pytest.raises(TrackingError, match="does not hold an MLflow run id"):
        read_parent_run_id(str(tmp_path))


# --- a real tracking server -----------------------------------------------------------------


@pytest.mark.slow
def test_sweep_against_a_tracking_server(mlflow_server: str, tmp_path: Path) -> None:  # noqa: F811
    _run_sweep(mlflow_server, tmp_path / "sweep", child_other_process=True)


@pytest.mark.slow
def test_run_artifacts_over_http(
    mlflow_server: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    tracker = MlflowTracker(mlflow_server, "server-exp")
    with _start(tracker, params={"llm": {"token": "t"}}) as run_id:
        tracker.log_table([{"id": "q1", "text": "x" * 10_000}])
        tracker.log_metrics({"nDCG@10": 0.3, "bad": math.nan})
    # MLflow's end_run printed no "View run" line (it reads the whole run back for it), and
    # the variable that says so is not left behind
    assert "View run" not in capsys.readouterr().out
    assert "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT" not in os.environ
    run = MlflowClient(mlflow_server).get_run(run_id)
    assert run.info.artifact_uri.startswith("mlflow-artifacts:")
    assert run.data.metrics == {"nDCG_at_10": 0.3}
    assert run.data.params["llm.token"] == REDACTED
    csv = pd.read_csv(io.StringIO(_text(mlflow_server, run_id, "per_query_results.csv")))
    assert csv.loc[0, "text"] == "x" * 10_000
    url = tracker.run_url()
    assert url == f"{mlflow_server}/#/experiments/{run.info.experiment_id}/runs/{run_id}"
    assert url in tracker.describe_location()


def test_log_input_retries_only_the_parallel_insert_race(monkeypatch):
    """Two sweep jobs inserting the same dataset row: the loser retries and links it."""
    from rag_experiments.tracking import mlflow_tracker as mt

    calls = []

    def flaky(dataset, context, tags):
        calls.append(context)
        if len(calls) == 1:
            raise RuntimeError("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.digest")

    monkeypatch.setattr(mt.mlflow, "log_input", flaky)
    monkeypatch.setattr(mt.time, "sleep", lambda s: None)
    mt._log_input_racing(object(), {})
    assert calls == ["evaluation", "evaluation"]

    def broken(dataset, context, tags):
        calls.append(context)
        raise RuntimeError("permission denied")

    calls.clear()
    monkeypatch.setattr(mt.mlflow, "log_input", broken)
    with pytest.raises(RuntimeError, match="permission denied"):
        mt._log_input_racing(object(), {})
    assert len(calls) == 1


def test_a_sweep_and_its_job_open_the_store_once(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: the store used to be opened again by every step before a job's run started
    (the sweep's parent, the job's run name, the tracker); now the process opens it once and
    every step shares that client."""
    opened: list[str] = []
    real = client_mod._open_client

    def counting(uri: str, attempts: int):  # noqa: ANN202
        opened.append(uri)
        return real(uri, attempts)

    monkeypatch.setattr(client_mod, "_open_client", counting)
    sweep_dir = tmp_path / "sw"
    parent = open_sweep(uri, "sweep-exp", sweep_dir, ["retriever.top_k"])
    assert parent_swept_keys(uri, parent) == ["retriever.top_k"]  # the job's run name
    tracker = MlflowTracker(uri, "sweep-exp")
    with tracker.start_run(params={}, config_yaml="", tags={}, parent_run_id=parent):
        tracker.log_metrics({"nDCG@10": 0.5})
    assert close_sweep(uri, str(sweep_dir)) == "FINISHED"
    assert opened == [uri]
    assert client_mod.open_client(uri) is client_mod.open_client(uri)
