"""Concurrent judging (issue 13): the same results at any concurrency, back pressure from the
server, a bounded number of requests in flight, a breaker for a server that has gone, and
resume after ``kill -9`` during concurrent judging."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
import pytest
from pydantic import BaseModel

from rag_experiments.common.http import RetryPolicy
from rag_experiments.data.base import EvalDataset
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.fakes.openai_server import FakeOpenAIServer, schema_instance
from rag_experiments.llm.base import Completion, Usage
from rag_experiments.llm.errors import JUDGE_ERROR_REASONS, LLMHTTPError, LLMUnreachableError
from rag_experiments.llm.gate import EndpointDownError, EndpointGate
from rag_experiments.llm.openai_compat import OpenAICompatChat
from rag_experiments.metrics.answer_judge import AnswerJudge
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.context_recall import ContextRecall
from rag_experiments.metrics.deepeval_backend import DeepEvalContextPrecision, DeepEvalFaithfulness
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.scheduler import judge_rows
from rag_experiments.records import RagResponse, Sample
from rag_experiments.runner import evaluate

CONTEXTS = [
    "Accounts are requested by the line manager with form AR-1.",
    "The Service Desk creates the account within two working days.",
    "Passwords expire every 90 days.",
]


class VariedJudge:
    """A judge whose every reply is a valid instance of the asked schema with choices (verdicts,
    grades, context numbers) fixed by a hash of the messages, after a delay also fixed by that
    hash: rows get different values and finish out of order under concurrency, identically on
    every run. Counts the calls in flight."""

    provider = "varied"
    model = "varied"
    slot_affinity = False

    def __init__(self, max_concurrency: int, jitter_s: float = 0.02) -> None:
        self.max_concurrency = max_concurrency
        self.jitter_s = jitter_s
        self.in_flight = 0
        self.peak = 0
        self.calls = 0
        self._lock = threading.Lock()

    def complete(
        self, messages: list[dict], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).digest()
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        try:
            time.sleep(self.jitter_s * digest[0] / 255)
            if schema is None:
                return Completion(text="ok")
            stream = iter(digest[1:] * 4)
            value = schema_instance(schema.model_json_schema(), pick=lambda n: next(stream) % n)
            text = json.dumps(value)
            return Completion(
                text=text,
                parsed=schema.model_validate_json(text),
                usage=Usage(len(str(messages)) // 4, len(text) // 4),
            )
        finally:
            with self._lock:
                self.in_flight -= 1

    def describe(self) -> dict[str, str]:
        return {"provider": self.provider, "model": self.model, "digest": "v1"}


class DelayedTarget:
    """Answers from a script after a delay fixed per question (out of order when concurrent)."""

    def __init__(self, max_concurrency: int) -> None:
        self.max_concurrency = max_concurrency

    def prepare(self, dataset: EvalDataset) -> None:
        pass

    def answer(self, sample: Sample) -> RagResponse:
        n = int(sample.id[1:])
        time.sleep(0.002 * ((n * 7) % 5))
        if n % 9 == 4:
            return RagResponse(error="timeout", error_message="scripted")
        return RagResponse(
            response=f"Answer {n}: the line manager requests it with AR-1.",
            retrieved_contexts=CONTEXTS[: 1 + n % 3],
            retrieved_ids=[f"c{i}" for i in range(1 + n % 3)],
        )

    def describe(self) -> dict[str, str]:
        return {"target": "delayed"}


def _dataset(n: int) -> EvalDataset:
    samples = [
        Sample(
            id=f"q{i}",
            user_input=f"How is account {i} created?",
            reference="The line manager requests it with form AR-1.",
            question_type="procedural" if i % 2 else "definition_concept",
            answerable=i % 7 != 3,
        )
        for i in range(n)
    ]
    return EvalDataset("varied", samples, [])


def _metrics(judge: Any) -> list[Any]:
    return [
        Faithfulness(judge=judge),
        AnswerRelevancy(judge=judge, embedder=HashEmbedder()),
        ContextPrecision(judge=judge),
        ContextRecall(judge=judge),
        AnswerJudge(judge=judge),
        DeepEvalFaithfulness(judge=judge),
        DeepEvalContextPrecision(judge=judge),
    ]


def _untimed(value: Any) -> Any:
    """``value`` without its wall-clock fields (``latency_ms``, ``elapsed_s``)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in ("latency_ms", "elapsed_s")}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


@pytest.mark.slow
def test_concurrency_1_and_8_give_identical_tables_and_audits() -> None:
    results, peaks = {}, {}
    for c in (1, 8):
        judge = VariedJudge(max_concurrency=c)
        results[c] = evaluate(
            _dataset(24), DelayedTarget(max_concurrency=c), _metrics(judge), progress=False
        )
        peaks[c] = judge.peak
    one, eight = results[1], results[8]
    assert peaks[1] == 1 and 1 < peaks[8] <= 8  # it did run concurrently, within the bound
    assert pd.DataFrame(one.rows()).equals(pd.DataFrame(eight.rows()))
    assert _untimed(one.audit) == _untimed(eight.audit)  # same records, same order
    assert one.run_values == eight.run_values
    # rows really differ (a mix-up of rows would show) and every judged cell is a number
    faith = [r["faithfulness"] for r in one.rows()]
    assert len({v for v in faith if v == v}) > 1
    ok_rows = [r for r in one.rows() if r["error"] is None]
    assert all(r["faithfulness.reason"] is None for r in ok_rows)
    assert all(r["deepeval.faithfulness.reason"] is None for r in ok_rows)


def test_429_with_retry_after_on_30_percent_every_row_completes_within_the_limit() -> None:
    with FakeOpenAIServer(
        latency_s=0.02, slots=32, fault="429", fault_share=0.3, retry_after_s=0.05
    ) as server:
        judge = OpenAICompatChat(
            model=server.model,
            base_url=server.url,
            max_concurrency=4,
            in_flight=4,
            retry=RetryPolicy(max_retries=8, backoff_s=0.01, backoff_max_s=0.05),
        )
        samples = [
            Sample(id=f"q{i}", user_input=f"question {i}?", reference="ref") for i in range(12)
        ]
        responses = [
            RagResponse(response="an answer", retrieved_contexts=CONTEXTS[:2]) for _ in samples
        ]
        metrics = [Faithfulness(judge=judge), ContextPrecision(judge=judge)]
        out = judge_rows(metrics, samples, responses, progress=False)
    assert server.faults > 0.2 * server.requests  # the server did push back
    assert server.peak_in_flight <= 4  # never more than judge.in_flight in flight
    assert judge.gate.peak_in_flight <= 4
    for m in metrics:
        assert out[id(m)].error is None
        for row in out[id(m)].values:
            assert not any(v.reason in JUDGE_ERROR_REASONS for v in row.values()), row
    assert all(
        row["faithfulness"].value == row["faithfulness"].value  # not NaN
        for row in out[id(metrics[0])].values
    )


def test_gate_bounds_halves_under_backpressure_and_recovers() -> None:
    """The AIMD option with a hold (the default until issue 42)."""
    now = [0.0]
    gate = EndpointGate(4, clock=lambda: now[0], hold_all=True, decrease_every_s=0.0)

    def busy() -> None:
        raise LLMHTTPError("busy", status=429, retry_after_s=2.0)

    with pytest.raises(LLMHTTPError):
        gate.call(busy)
    assert gate.bound == 2  # halved
    # held until Retry-After has passed: a waiter wakes only when the clock moves on
    started = threading.Event()
    done = threading.Event()

    def caller() -> None:
        started.set()
        gate.call(lambda: None)
        done.set()

    threading.Thread(target=caller, daemon=True).start()
    started.wait()
    assert not done.wait(0.3)
    now[0] = 2.5
    assert done.wait(5)
    for _ in range(10):  # additive increase: 2 + 1/2 + 1/2.5 + … back to 4
        gate.call(lambda: None)
    assert gate.bound == 4


def test_breaker_fails_fast_after_consecutive_connection_failures_and_probes() -> None:
    now = [0.0]
    gate = EndpointGate(8, trip_after=3, probe_after_s=5.0, clock=lambda: now[0])
    calls = [0]

    def refused() -> None:
        calls[0] += 1
        raise LLMUnreachableError("refused")

    for _ in range(3):
        with pytest.raises(LLMUnreachableError):
            gate.call(refused)
    with pytest.raises(EndpointDownError, match="resume the run"):
        gate.call(refused)
    assert calls[0] == 3  # the fourth was not sent
    now[0] = 6.0  # past probe_after_s: one probe goes through and succeeds
    assert gate.call(lambda: "up") == "up"
    assert gate.call(lambda: "again") == "again"


def test_breaker_stays_closed_while_the_server_still_answers_some_calls() -> None:
    now = [0.0]
    gate = EndpointGate(8, trip_after=3, quiet_s=1.0, clock=lambda: now[0])
    gate.call(lambda: None)  # an answer at t = 0
    sent = [0]

    def dropped() -> None:
        sent[0] += 1
        raise LLMUnreachableError("connection reset")

    for _ in range(5):  # five drops in a row, all within a second of the last answer
        now[0] += 0.1
        with pytest.raises(LLMUnreachableError) as exc:
            gate.call(dropped)
        assert not isinstance(exc.value, EndpointDownError)
    assert sent[0] == 5  # every one was sent: the breaker stayed closed


def test_server_gone_mid_run_fails_the_remaining_rows_quickly_as_unreachable() -> None:
    server = FakeOpenAIServer(latency_s=0.05, slots=8).start()
    judge = OpenAICompatChat(
        model=server.model,
        base_url=server.url,
        max_concurrency=4,
        in_flight=4,
        retry=RetryPolicy(timeout_s=30, max_retries=2, backoff_s=3.0),
    )
    samples = [Sample(id=f"q{i}", user_input=f"question {i}?", reference="ref") for i in range(60)]
    responses = [
        RagResponse(response="an answer", retrieved_contexts=CONTEXTS[:1]) for _ in samples
    ]
    metric = ContextPrecision(judge=judge)
    stopper = threading.Timer(0.3, server.stop)
    stopper.start()
    started = time.perf_counter()
    out = judge_rows([metric], samples, responses, progress=False)[id(metric)]
    wall = time.perf_counter() - started
    stopper.join()
    reasons = [row["context_precision"].reason for row in out.values]
    assert reasons[0] is None and reasons[-1] == "unreachable"
    # after the breaker opened, no row waited out its retries. Without the breaker each of the
    # ~55 rows left would wait 3 + 6 s of backoff on 4 workers: over 120 s; with it, the rows
    # in flight when the server went wait once or twice and the rest fail at once (~10 s).
    # The bound leaves room for a loaded machine (31 s were seen with 0.2 s backoffs at load 9).
    assert wall < 45, wall
    assert sum(r == "unreachable" for r in reasons) > 30


# --- kill -9 during concurrent judging, then resume -----------------------------------------

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "sample"


@pytest.mark.slow
def test_kill_9_during_concurrent_judging_then_resume_scores_every_row_once(
    tmp_path: Path,
) -> None:
    lines = (SAMPLE / "eval.jsonl").read_text(encoding="utf-8").splitlines()[:16]
    data = tmp_path / "small.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = sorted(json.loads(x)["id"] for x in lines)
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    with FakeOpenAIServer(latency_s=0.25, slots=4) as server:

        def cmd(*extra: str) -> list[str]:
            return [
                sys.executable,
                "-m",
                "rag_experiments",
                "run",
                "dataset=jsonl",
                f"dataset.path={data}",
                f"dataset.corpus={SAMPLE / 'docs'}",
                "dataset.name=small",
                "llm=fake",
                "embedder=hash",
                "judge=openai",
                f"judge.base_url={server.url}",
                "judge.model=fake-judge",
                "judge.max_concurrency=4",
                "metrics=custom",
                "progress=false",
                f"tracking.uri={uri}",
                f"paths.cache_dir={tmp_path}/cache",
                f"hydra.run.dir={tmp_path}/job",
                *extra,
            ]

        proc = subprocess.Popen(
            cmd(), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None and server.requests < 30:
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        before = server.requests
        run_id = json.loads((tmp_path / "job" / "checkpoint.json").read_text())["run_id"]
        done = subprocess.run(
            cmd(f"resume={run_id}"),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        resumed_calls = server.requests - before

    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["resumed"] == "true"
    table = pd.read_csv(
        io.StringIO(
            Path(client.download_artifacts(run_id, "per_query_results.csv")).read_text(
                encoding="utf-8"
            )
        )
    )
    assert sorted(table["id"]) == expected  # every row exactly once
    assert table["faithfulness.reason"].isna().sum() > 0
    assert not table["faithfulness.reason"].isin(["unreachable", "timeout"]).any()
    # the judge calls made before the kill came from the response cache
    assert resumed_calls < run.data.metrics["judge_calls"]
    assert run.data.metrics["judge.llm_cache_hits"] > 0


# --- faults of the judge during a run (issue 16, items 1 and 5) ------------------------------


JUDGED = ("faithfulness", "answer_relevancy", "context_precision", "context_recall", "answer_judge")


def _run_with_faulty_judge(tmp_path: Path, fault: str, *extra: str) -> tuple[Any, Any]:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    with FakeOpenAIServer(latency_s=0.01, slots=8, fault=fault, fault_share=1 / 3) as server:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "rag_experiments",
                "run",
                "llm=fake",
                "embedder=hash",
                "judge=openai",
                f"judge.base_url={server.url}",
                "judge.model=fake-judge",
                "judge.max_concurrency=4",
                "judge.max_retries=0",
                "judge.parse_retries=0",
                "metrics=custom",
                "max_samples=12",
                "progress=false",
                f"tracking.uri={uri}",
                # no re-asks: a faulty reply must stay a failed cell, whatever call it hit
                *[f"metrics.suite.{m}.max_retries=0" for m in JUDGED],
                f"paths.cache_dir={tmp_path}/cache",
                f"hydra.run.dir={tmp_path}/job",
                *extra,
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        )
        assert server.faults > 0
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rag-experiments").experiment_id])
    return proc, run


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "reason"),
    [("500", "http_error"), ("garbage", "parse_error"), ("drop", "unreachable")],
)
def test_faulty_judge_run_completes_with_reasons_and_counts(
    tmp_path: Path,
    fault: str,
    reason: str,
) -> None:
    proc, run = _run_with_faulty_judge(tmp_path, fault, "max_failure_rate=0.9")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run.info.status == "FINISHED"
    n = run.data.metrics[f"judge.errors.{reason}"]
    assert n > 0
    assert f"judge errors (NaN cells): {reason} {int(n)}" in proc.stdout
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    local = client.download_artifacts(run.info.run_id, "per_query_results.csv")
    table = pd.read_csv(io.StringIO(Path(local).read_text(encoding="utf-8")))
    judged = [*JUDGED[:-1], "answer_judge.accuracy"]
    cells = table[[f"{c}.reason" for c in judged]]
    assert int((cells == reason).sum().sum()) >= 1
    for col in judged:  # every NaN cell has its reason
        assert table.loc[table[col].isna(), f"{col}.reason"].notna().all()


@pytest.mark.slow
def test_judge_service_failures_above_max_failure_rate_fail_the_run_after_logging(
    tmp_path: Path,
) -> None:
    proc, run = _run_with_faulty_judge(tmp_path, "500", "max_failure_rate=0.1")
    assert proc.returncode != 0
    assert "the judge failed on too many questions" in proc.stdout + proc.stderr
    assert run.info.status == "FAILED"
    assert run.data.metrics["judge.errors.http_error"] > 0  # logged before failing
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    assert "per_query_results.csv" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_worker_pool_runs_every_call_within_its_bound_and_hands_back_errors() -> None:
    """WorkerPool (the scheduler's threads): 40 calls on 4 workers all complete with their own
    result, at most 4 run at once (counted inside the calls), the initializer runs once per
    thread, an exception reaches its future, and shutdown(cancel_futures) drops calls not
    started."""
    from rag_experiments.metrics.scheduler import WorkerPool

    lock = threading.Lock()
    state = {"now": 0, "peak": 0, "inits": 0}
    gate = threading.Event()

    def init() -> None:
        with lock:
            state["inits"] += 1

    def work(i: int) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.005)
        with lock:
            state["now"] -= 1
        if i == 7:
            raise ValueError("row 7")
        return i * i

    pool = WorkerPool(4, initializer=init)
    futures = [pool.submit(work, i) for i in range(40)]
    assert [f.result() for i, f in enumerate(futures) if i != 7] == [
        i * i for i in range(40) if i != 7
    ]
    with pytest.raises(ValueError, match="row 7"):
        futures[7].result()
    assert state["peak"] <= 4
    pool.shutdown(wait=True)
    assert 1 <= state["inits"] <= 4  # one per thread started, never more than the bound

    running = threading.Event()

    def hold() -> bool:
        running.set()
        return gate.wait(5)

    blocked = WorkerPool(1)
    first = blocked.submit(hold)
    later = [blocked.submit(work, i) for i in range(3)]
    assert running.wait(5)  # the one worker is inside hold(); the other three wait
    blocked.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert first.result() is True
    assert all(f.cancelled() for f in later)
    with pytest.raises(RuntimeError, match="after shutdown"):
        blocked.submit(work, 0)


def test_by_default_a_429_makes_only_the_refused_call_wait_its_retry_after() -> None:
    """Issue 42: a 429 held every call and halved the bound; at 32 in flight with 5 % 429s the
    client spent its wall in one-second pauses. Now the bound and the other calls go on, and
    the refused call's retry waits the server's Retry-After (which the model client's retry
    ignored: only RetryableStatusError's was read)."""
    now = [0.0]
    gate = EndpointGate(4, clock=lambda: now[0])

    def busy() -> None:
        raise LLMHTTPError("busy", status=429, retry_after_s=2.0)

    with pytest.raises(LLMHTTPError):
        gate.call(busy)
    assert gate.bound == 4  # not halved
    done = threading.Event()
    threading.Thread(target=lambda: (gate.call(lambda: None), done.set()), daemon=True).start()
    assert done.wait(5)  # not held: the clock never moved
    # the refused call itself waits at least Retry-After before its retry
    calls: list[float] = []

    def refused_once() -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise LLMHTTPError("busy", status=429, retry_after_s=0.3)
        return "ok"

    retry = RetryPolicy(max_retries=1, backoff_s=0.01, backoff_max_s=5.0)
    assert retry.call(refused_once) == "ok"
    assert calls[1] - calls[0] >= 0.3  # was about 0.01 s (the backoff alone)
    staged = EndpointGate(4, clock=lambda: now[0], decrease_every_s=5.0)  # MLflow-like AIMD
    for t in (0.0, 1.0, 5.5):
        now[0] = t
        with pytest.raises(LLMHTTPError):
            staged.call(busy)
    assert staged.bound == 1  # halved at 0 s (4 → 2) and 5.5 s (2 → 1), not at 1 s
