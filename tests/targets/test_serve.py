"""``rag-exp serve`` runs the baseline behind HTTP; evaluating it through ``target=http`` gives
the same retrieval metrics as ``target=baseline`` with the same config."""

from __future__ import annotations

import math
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hydra.utils import instantiate
from mlflow.tracking import MlflowClient

from rag_experiments.analysis.runs import run_values
from rag_experiments.build import build_target
from rag_experiments.errors import ConfigError
from rag_experiments.job import run_job
from rag_experiments.records import RagResponse, Sample
from rag_experiments.targets.http import HttpTarget
from rag_experiments.targets.http_server import TargetServer
from rag_experiments.tracking.store import RunStore

FAST = ["embedder=hash", "llm=fake", "judge=fake", "progress=false"]
"""Overrides shared by the server and both runs: no model to load."""


class _Served:
    def __init__(self, proc: subprocess.Popen, url: str, lines: list[str]):
        self.proc, self.url, self.lines = proc, url, lines


@pytest.fixture
def served_baseline(tmp_path: Path) -> Iterator[_Served]:
    """``rag-exp serve --port 0`` as a subprocess; yields once it prints its URL."""
    cmd = [
        sys.executable,
        "-m",
        "rag_experiments",
        "serve",
        "--port",
        "0",
        *FAST,
        f"paths.cache_dir={tmp_path}/serve_cache",
        f"hydra.run.dir={tmp_path}/serve_out",
    ]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    found: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "listening on " in line:
                found.put(line.split("listening on ", 1)[1].split()[0])

    threading.Thread(target=read, daemon=True).start()
    try:
        try:
            url = found.get(timeout=120)
        except queue.Empty:
            pytest.fail("rag-exp serve did not start:\n" + "".join(lines))
        yield _Served(proc, url, lines)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _metrics(uri: str, run_name: str) -> dict[str, float]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    (run,) = client.search_runs([exp.experiment_id], f"attributes.run_name = '{run_name}'")
    assert run.info.status == "FINISHED"
    store = RunStore(uri)  # logged headline metrics + every value of the table:
    return run_values(store, store.get_run(run.info.run_id))


@pytest.mark.slow
def test_http_run_against_served_baseline_matches_baseline(served_baseline, compose_cfg, tmp_path):
    url = served_baseline.url
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["target"]["embedder"] == "hash-256"

    uri = f"sqlite:///{tmp_path}/mlruns.db"  # the compose_cfg fixture logs here too
    http_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_experiments",
            "run",
            "target=http",
            f"target.url={url}/ask",
            *FAST,
            f"paths.cache_dir={tmp_path}/http_cache",
            f"tracking.uri={uri}",
            "run_name=via-http",
            f"hydra.run.dir={tmp_path}/http_out",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert http_run.returncode == 0, http_run.stdout + http_run.stderr
    run_job(compose_cfg(*FAST, "run_name=baseline"))

    via_http, baseline = _metrics(uri, "via-http"), _metrics(uri, "baseline")
    timing = {"duration_s", "latency_ms_p50", "latency_ms_p95"}
    # the baseline run also has its generator's usage (generator.llm_calls …); the HTTP run
    # cannot know it
    assert set(via_http) <= set(baseline)
    assert {k for k in set(baseline) - set(via_http) if not k.startswith("generator.")} == set()
    for key in (
        "nDCG_at_10",
        "Hit_at_1",
        "MRR_at_10",
        "R_at_5",
        "chunk.nDCG_at_10",
        "keyword_coverage",
    ):
        assert key in baseline and f"{key}_n_valid" in baseline
    assert baseline["Hit_at_10_n_valid"] == baseline["n_samples"] - baseline["n_unanswerable"]
    different = {
        k: (via_http[k], baseline[k])
        for k in set(via_http) - timing
        if not math.isclose(via_http[k], baseline[k], rel_tol=0, abs_tol=1e-12)
    }
    assert not different
    assert via_http["n_failed"] == 0 and via_http["latency_ms_p50"] > 0

    # Without the endpoint's doc ids, contexts are matched to the corpus by text: every chunk
    # the baseline returned maps back to its own document.
    cfg = compose_cfg(*FAST, "target=http", f"target.url={url}/ask", "target.response.doc_ids=null")
    dataset = instantiate(cfg.dataset).load()
    target = build_target(cfg.target)
    target.prepare(dataset)
    samples = dataset.samples[:20]
    by_text = [target.answer(s) for s in samples]
    with_doc_ids = HttpTarget(f"{url}/ask")
    with_ids = [with_doc_ids.answer(s) for s in samples]
    for s, a, b in zip(samples, by_text, with_ids, strict=True):
        assert a.error is None and a.metadata["doc_ids_source"] == "text_match"
        own_docs = list(dict.fromkeys(cid.rsplit("#", 1)[0] for cid in b.retrieved_ids))
        assert a.retrieved_doc_ids == own_docs, s.id
        assert b.retrieved_doc_ids[: len(own_docs)] == own_docs  # the deeper endpoint ranking

    served_baseline.proc.send_signal(signal.SIGTERM)
    assert served_baseline.proc.wait(timeout=20) == 0
    time.sleep(0.2)
    assert any("rag-exp serve: stopped" in line for line in served_baseline.lines)


class _EchoTarget:
    """Answers with the question as its context; ``boom`` fails, ``crash`` raises."""

    max_concurrency = 1

    def prepare(self, dataset):
        pass

    def answer(self, sample: Sample) -> RagResponse:
        if sample.user_input == "boom":
            return RagResponse(error="timeout", error_message="generator timed out")
        if sample.user_input == "crash":
            raise RuntimeError("bug")
        return RagResponse(
            response="ok",
            retrieved_contexts=[sample.user_input],
            retrieved_ids=["d#0"],
            retrieved_doc_ids=["d"],
            latency_ms=1.5,
        )

    def describe(self):
        return {"target": "echo"}


def test_server_api_contract():
    with TargetServer(_EchoTarget(), port=0) as server:
        ask = f"{server.url}/ask"
        ok = httpx.post(ask, json={"question": "why?"})
        assert ok.status_code == 200
        assert ok.json() == {
            "answer": "ok",
            "contexts": ["why?"],
            "context_ids": ["d#0"],
            "doc_ids": ["d"],
            "latency_ms": 1.5,
        }
        assert httpx.post(ask, json={"q": "x"}).status_code == 400
        assert httpx.post(ask, content=b"not json").json()["error"] == "bad_request"
        slow = httpx.post(ask, json={"question": "boom"})
        assert slow.status_code == 504 and slow.json()["error"] == "timeout"
        crash = httpx.post(ask, json={"question": "crash"})
        assert crash.status_code == 500 and "RuntimeError: bug" in crash.json()["message"]
        assert httpx.get(f"{server.url}/missing").json()["error"] == "http_404"
        assert httpx.get(f"{server.url}/health").json() == {
            "status": "ok",
            "target": {"target": "echo"},
        }
        # the default http target config speaks this API
        resp = HttpTarget(ask).answer(Sample(id="q1", user_input="who?"))
        assert (
            resp.response,
            resp.retrieved_contexts,
            resp.retrieved_ids,
            resp.retrieved_doc_ids,
        ) == ("ok", ["who?"], ["d#0"], ["d"])
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health")
    with TargetServer(_EchoTarget(), port=0) as busy:
        with pytest.raises(ConfigError, match="port is in use"):
            TargetServer(_EchoTarget(), port=busy.port).start()


def test_serve_refuses_non_baseline_target_and_multirun(compose_cfg):
    from rag_experiments.commands.serve import main, serve_job

    with pytest.raises(ConfigError, match="runs the built-in baseline"):
        serve_job(compose_cfg("target=http"))
    with pytest.raises(ConfigError, match="multirun"):
        main(["-m", "chunker.size=256,512"])


def test_a_request_over_the_size_limit_gets_413_before_it_is_read():
    """rag-exp serve took a 20 MB question; the limit is configurable (--max-request-mb)."""
    with TargetServer(_EchoTarget(), port=0, max_request_bytes=1000) as server:
        ask = f"{server.url}/ask"
        big = httpx.post(ask, json={"question": "x" * 2000})
        assert big.status_code == 413 and big.json()["error"] == "http_413"
        assert "over 1,000 bytes" in big.json()["message"]
        assert "--max-request-mb" in big.json()["message"]
        assert httpx.post(ask, json={"question": "x" * 900}).status_code == 200
    with TargetServer(_EchoTarget(), port=0) as server:  # the default: 1 MB
        ask = f"{server.url}/ask"
        assert httpx.post(ask, json={"question": "x" * 2_000_000}).status_code == 413
        assert httpx.post(ask, json={"question": "x" * 500_000}).status_code == 200
