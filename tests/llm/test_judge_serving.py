"""Judging against a served model (issue 25, and issue 27 item 9, issue 28 items 5 and 10):
single flight of identical requests, requests kept in flight beyond the server's slots,
prefix-aware lanes with slot affinity, prompt-cache usage from the server, tokens counted as
sent, and transport faults said as what happened."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
from omegaconf import DictConfig
from pydantic import BaseModel, Field

from rag_experiments.common.http import RetryPolicy
from rag_experiments.fakes.openai_server import FakeOpenAIServer
from rag_experiments.llm.base import Completion, Usage
from rag_experiments.llm.cache import CachedChat, ResponseCache
from rag_experiments.llm.errors import (
    LLMConnectionDroppedError,
    LLMError,
    LLMHTTPError,
    LLMUnreachableError,
)
from rag_experiments.llm.ollama import OllamaChat
from rag_experiments.llm.openai_compat import OpenAICompatChat, reported_usage
from rag_experiments.llm.transport import JsonHttp
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.context_recall import ContextRecall
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.judge import ask_judge
from rag_experiments.metrics.scheduler import judge_rows
from rag_experiments.records import RagResponse, Sample

SAMPLE = PROJECT_ROOT / "datasets" / "sample"
CONTEXTS = [
    "Accounts are requested by the line manager with form AR-1.",
    "The Service Desk creates the account within two working days.",
]


class Verdict(BaseModel):
    verdict: bool
    grade: int = Field(ge=1, le=5)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def served(server: FakeOpenAIServer, **kw: object) -> OpenAICompatChat:
    return OpenAICompatChat(model=server.model, base_url=server.url, **kw)  # type: ignore[arg-type]


# --- single flight ----------------------------------------------------------------------------
def test_two_identical_requests_in_flight_make_one_server_call(tmp_path: Path) -> None:
    with FakeOpenAIServer(latency_s=0.3, slots=4, vary=True) as server:
        cache = ResponseCache(tmp_path / "llm.sqlite")
        meter = UsageMeter("judge")
        judge = CachedChat(served(server), meter, cache)
        gate = threading.Barrier(2)
        out: list[Completion] = []

        def ask() -> None:
            gate.wait()
            out.append(judge.complete(user("Is the sky blue?"), schema=Verdict))

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.requests == 1  # the second waited for the first's answer
        again = judge.complete(user("Is the sky blue?"), schema=Verdict)  # from the cache
    assert out[0].parsed == out[1].parsed == again.parsed
    assert sorted(c.cached for c in out) == [False, True]
    assert len(cache) == 1
    sent = next(c for c in out if not c.cached)
    shared = next(c for c in out if c.cached)
    assert shared.usage == Usage() and shared.cached_usage == sent.usage
    m = meter.metrics()
    assert (m["judge.llm_calls"], m["judge.llm_cache_hits"]) == (3, 2)
    assert m["judge.prompt_tokens"] == sent.usage.prompt_tokens  # sent once
    assert m["judge.cache_hit.prompt_tokens"] == 2 * sent.usage.prompt_tokens


def test_identical_requests_share_the_first_callers_error() -> None:
    # 1 s per call: the second caller joins the first's flight even on a loaded machine
    with FakeOpenAIServer(latency_s=1.0, slots=4, fault="500", fault_share=1.0) as server:
        judge = CachedChat(served(server, retry=RetryPolicy(max_retries=0)), UsageMeter("judge"))
        gate = threading.Barrier(2)
        errors: list[BaseException] = []

        def ask() -> None:
            gate.wait()
            try:
                judge.complete(user("Is the sky blue?"), schema=Verdict)
            except LLMError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=ask) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.requests == 1
    assert len(errors) == 2 and all(e.reason == "http_error" for e in errors)


@pytest.mark.slow
def test_rerun_of_a_run_at_concurrency_16_against_a_varying_server_is_identical(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows 2k and 2k+1 are the same question: their judge prompts are identical and in flight
    together; the server answers every call differently. Without single flight the run kept
    the reply of one call per row while the cache kept another's, and the rerun differed."""
    from rag_experiments.commands.rerun import rerun
    from rag_experiments.job import run_job

    lines = (SAMPLE / "eval.jsonl").read_text().splitlines()[:8]
    doubled = []
    for line in lines:
        doubled.append(line)
        doubled.append(line.replace('"id": "s0', '"id": "d0', 1))
    data = tmp_path / "doubled.jsonl"
    data.write_text("\n".join(doubled) + "\n")
    with FakeOpenAIServer(latency_s=0.1, slots=16, vary=True) as server:
        cfg = compose_cfg(
            "dataset=jsonl", f"dataset.path={data}", f"dataset.corpus={SAMPLE / 'docs'}",
            "dataset.name=doubled", "embedder=hash", "llm=fake", "judge=openai",
            f"judge.base_url={server.url}", f"judge.model={server.model}",
            "judge.max_concurrency=16", "judge.max_retries=0",
        )  # fmt: skip
        run_job(cfg)
        first_calls = server.requests
        uri = f"sqlite:///{tmp_path}/mlruns.db"
        client = mlflow.MlflowClient(uri)
        exp = client.get_experiment_by_name("rag-experiments")
        (run,) = client.search_runs([exp.experiment_id])
        report = rerun(run.info.run_id, uri)
        assert server.requests == first_calls  # the rerun was answered from the cache
    assert report.identical, report.format()
    metrics = client.get_run(run.info.run_id).data.metrics
    # each pair of identical prompts cost one call: half the judge calls were shared
    assert metrics["judge.llm_calls"] - metrics["judge.llm_cache_hits"] == first_calls
    assert metrics["judge.llm_cache_hits"] >= first_calls
    capsys.readouterr()


# --- keeping the server full ------------------------------------------------------------------
def _rows(n: int) -> tuple[list[Sample], list[RagResponse]]:
    samples = [Sample(id=f"q{i}", user_input=f"question {i}?", reference="ref") for i in range(n)]
    responses = [RagResponse(response="an answer", retrieved_contexts=CONTEXTS) for _ in samples]
    return samples, responses


def test_in_flight_defaults_to_twice_the_slots_and_can_be_set() -> None:
    samples, responses = _rows(12)
    with FakeOpenAIServer(latency_s=0.1, slots=4) as server:
        judge = served(server, max_concurrency=4)
        assert (judge.slots, judge.max_concurrency) == (4, 8)
        judge_rows([ContextPrecision(judge=judge)], samples, responses, progress=False)
        assert server.peak_in_flight == 8  # 4 computing, 4 queued at the server
    with FakeOpenAIServer(latency_s=0.05, slots=4) as server:
        judge = served(server, max_concurrency=4, in_flight=3)
        judge_rows([ContextPrecision(judge=judge)], samples, responses, progress=False)
        assert server.peak_in_flight == 3


def test_slot_affinity_runs_each_question_on_one_lane_with_its_slot() -> None:
    samples, responses = _rows(6)
    with FakeOpenAIServer(latency_s=0.02, slots=2) as server:
        judge = served(server, max_concurrency=2, slot_affinity=True)
        metrics = [
            ContextPrecision(judge=judge),
            Faithfulness(judge=judge),
            ContextRecall(judge=judge),
        ]
        judge_rows(metrics, samples, responses, progress=False)
        seen = list(server.seen)
    assert len(seen) == 18 and all(cache is True for _, cache, _ in seen)
    by_question: dict[str, set[int]] = {}
    for slot, _, prompt in seen:
        question = next(s.user_input for s in samples if s.user_input in prompt)
        by_question.setdefault(question, set()).add(slot)
    assert all(len(slots) == 1 for slots in by_question.values())  # one slot per question
    assert {s for slots in by_question.values() for s in slots} == {0, 1}  # both lanes used
    # on each slot, a question's three calls come one after another
    for lane in (0, 1):
        order = [
            next(s.user_input for s in samples if s.user_input in p)
            for sl, _, p in seen
            if sl == lane
        ]
        runs = [q for i, q in enumerate(order) if i == 0 or order[i - 1] != q]
        assert len(runs) == len(set(order)), order


def test_server_prompt_cache_use_is_read_from_usage_fields() -> None:
    openai_style = {"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                              "prompt_tokens_details": {"cached_tokens": 64}}}  # fmt: skip
    llama_server = {"usage": {"prompt_tokens": 100, "completion_tokens": 5},
                    "timings": {"cache_n": 80, "prompt_n": 20}}  # fmt: skip
    assert reported_usage(openai_style) == Usage(100, 5, 64)
    assert reported_usage(llama_server) == Usage(100, 5, 80)
    assert reported_usage({}) == Usage()
    meter = UsageMeter("judge")
    meter.record(Completion(text="a", usage=Usage(100, 5, 80)))
    meter.record(Completion(text="a", usage=Usage(50, 5, 0)))
    m = meter.metrics()
    assert (m["judge.prompt_tokens"], m["judge.reused.prompt_tokens"]) == (150, 80)


# --- tokens count what was sent (issue 28 item 10) ----------------------------------------------
def test_a_cached_judgement_counts_no_tokens_sent_and_shows_them_apart(tmp_path: Path) -> None:
    with FakeOpenAIServer(latency_s=0.0, slots=4) as server:
        meter = UsageMeter("judge")
        judge = CachedChat(served(server), meter, ResponseCache(tmp_path / "llm.sqlite"))
        first = ask_judge(judge, user("Grade the answer."), Verdict, prompt_id="t")
        rerun = ask_judge(judge, user("Grade the answer."), Verdict, prompt_id="t")
        assert server.requests == 1
    # the fake counts words: 3 in the prompt, 4 in '{"verdict": true, "grade": 1}'
    assert (first.prompt_tokens, first.completion_tokens) == (3, 4)
    assert (rerun.prompt_tokens, rerun.completion_tokens) == (0, 0)  # nothing was sent
    m = meter.metrics()
    assert (m["judge.prompt_tokens"], m["judge.completion_tokens"]) == (3, 4)
    assert (m["judge.cache_hit.prompt_tokens"], m["judge.cache_hit.completion_tokens"]) == (3, 4)


# --- transport faults said as what happened (issue 27 item 9) ----------------------------------
def test_a_dropped_connection_is_not_called_unreachable() -> None:
    with FakeOpenAIServer(latency_s=0.0, slots=2, fault="drop", fault_share=1.0) as server:
        judge = served(server, retry=RetryPolicy(max_retries=1, backoff_s=0.01))
        with pytest.raises(LLMUnreachableError) as info:
            judge.complete(user("hello"))
        assert server.requests == 2  # retried once
    message = str(info.value)
    assert "dropped" in message and "cannot connect" not in message
    assert "start the server" not in message


def test_a_200_whose_body_is_not_json_is_retried() -> None:
    with FakeOpenAIServer(latency_s=0.0, slots=2, fault="badbody", fault_share=0.5) as server:
        judge = served(server, retry=RetryPolicy(max_retries=2, backoff_s=0.01))
        first = judge.complete(user("hello"))  # request 0: answered
        second = judge.complete(user("hello"))  # request 1: a bad body, retried as request 2
        assert server.requests == 3 and server.faults == 1
    assert first.text == second.text == "ok"


def test_the_client_reuses_one_kept_alive_connection_and_replaces_one_the_server_closed() -> None:
    with FakeOpenAIServer(latency_s=0.0, slots=2) as server:
        http = JsonHttp(server.url, 5.0, where="judge", unreachable_hint="start it")
        body = {"messages": [{"role": "user", "content": "x"}]}
        for _ in range(3):
            assert http.request("POST", "/chat/completions", body)["choices"][0]["message"] == {
                "role": "assistant",
                "content": "ok",
            }
        assert (server.requests, server.connections) == (3, 1)
        server.close_connections()  # as a server closing idle kept-alive connections
        time.sleep(0.05)  # the close reaches the client's socket
        assert http.request("GET", "/models")["data"][0]["id"] == server.model
        assert server.connections == 2  # a new one, not an error


def test_an_error_status_keeps_its_body_and_retry_after() -> None:
    with FakeOpenAIServer(
        latency_s=0.0, slots=2, fault="429", fault_share=1.0, retry_after_s=3
    ) as server:
        http = JsonHttp(server.url, 5.0, where="judge", unreachable_hint="start it")
        with pytest.raises(LLMHTTPError) as info:
            http.request("POST", "/chat/completions", {"messages": [{"content": "x"}]})
    assert info.value.status == 429 and info.value.retry_after_s == 3.0
    assert "injected 429" in info.value.body


def test_a_refused_connection_is_unreachable_not_dropped() -> None:
    from rag_experiments.fakes.llama_cpp_server import free_port

    http = JsonHttp(f"http://127.0.0.1:{free_port()}/v1", 5.0, where="judge", unreachable_hint="x")
    with pytest.raises(LLMUnreachableError, match="cannot connect") as info:
        http.request("GET", "/models")
    assert not isinstance(info.value, LLMConnectionDroppedError)


# --- a refused connection at preflight is not retried (issue 28 item 5) ------------------------
def test_ollama_identity_and_check_fail_at_once_on_a_refused_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rag_experiments.fakes.llama_cpp_server import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    judge = OllamaChat(
        model="llama3.1:8b", base_url=url, retry=RetryPolicy(max_retries=2, backoff_s=1.0)
    )
    started = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        identity = judge.describe()  # asked before the preflight (run tags, cache keys)
        with pytest.raises(LLMUnreachableError, match="cannot reach"):
            judge.check()
    assert time.perf_counter() - started < 1.0  # no backoff wait
    assert identity["digest"] == ""
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_probe_keeps_the_dropped_wording() -> None:
    with FakeOpenAIServer(latency_s=0.0, slots=2, fault="drop", fault_share=1.0) as server:
        http = JsonHttp(server.url, 5.0, where="judge", unreachable_hint="start it")
        with pytest.raises(LLMUnreachableError, match="dropped"):
            http.probe("POST", "/chat/completions", {"messages": [{"content": "x"}]})


# --- a real OpenAI-compatible server ----------------------------------------------------------
@pytest.mark.llm
@pytest.mark.slow
def test_run_with_llm_and_judge_on_llama_cpp_server_end_to_end(
    compose_cfg: Callable[..., DictConfig],
    tmp_path: Path,
    llama_server: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``llm=openai judge=openai`` against llama-cpp-python's server (bundled SmolLM2): the
    answers and the judgements come from it, its JSON-schema mode constrains the judge's
    replies, and the usage it reports is logged."""
    import json

    from rag_experiments.job import run_job

    cfg = compose_cfg(
        "llm=openai", f"llm.base_url={llama_server}", "llm.model=smollm2", "llm.max_tokens=48",
        "judge=openai", f"judge.base_url={llama_server}", "judge.model=smollm2",
        "judge.max_concurrency=1", "judge.timeout_s=600", "llm.timeout_s=600",
        "embedder=hash", "retriever.top_k=2", "max_samples=2", "max_concurrency=1",
    )  # fmt: skip
    run_job(cfg)
    client = mlflow.MlflowClient(cfg.tracking.uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED"
    m = run.data.metrics
    assert m["generator.llm_calls"] == 2 and m["generator.llm_cache_hits"] == 0
    assert m["generator.prompt_tokens"] > 0 and m["generator.completion_tokens"] > 0
    assert m["judge.llm_calls"] >= 8 and m["judge.prompt_tokens"] > 0
    assert m["judge.completion_tokens"] > 0
    assert m["judge_prompt_tokens"] == m["judge.prompt_tokens"]  # one count of what was sent
    path = client.download_artifacts(run.info.run_id, "judge_audit.jsonl", str(tmp_path))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    raws = [
        raw
        for row in rows
        for rec in row.values()
        if isinstance(rec, dict) and isinstance(rec.get("judgement"), dict)
        for raw in rec["judgement"]["raw"]
    ]
    assert raws, rows
    # its grammar (response_format json_object + schema) makes every reply one JSON object
    # (its strings may hold raw line breaks, which strict JSON refuses)
    assert all(isinstance(json.loads(raw, strict=False), dict) for raw in raws)
    capsys.readouterr()
