"""Bounded-concurrency batches, the response cache and per-role usage, against the fake Ollama
on 127.0.0.1; and the whole job through Hydra with llm=ollama."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient
from pydantic import BaseModel, Field

from rag_experiments.build import build
from rag_experiments.common.http import RetryPolicy
from rag_experiments.errors import ConfigError
from rag_experiments.fakes.ollama_server import FakeOllamaServer
from rag_experiments.job import run_job
from rag_experiments.llm import factory
from rag_experiments.llm.base import Completion, Usage
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.cache import CachedChat, ResponseCache, request_key
from rag_experiments.llm.errors import LLMTimeoutError
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.ollama import OllamaChat
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.runner import evaluate
from rag_experiments.tracking.store import all_tags


class Answer(BaseModel):
    answer: str = Field(max_length=500)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(slow_s=3.0) as srv:
        yield srv


@pytest.fixture
def session() -> factory.ModelSession:
    return factory.ModelSession()  # no cache unless a test names a file


# --- the must-show batch ----------------------------------------------------------------------
TIMEOUT_S = 1.0
MAX_RETRIES = 1
BACKOFF_S = 0.2  # cap of the single backoff wait: min(backoff_max_s, backoff_s * 2**0)
CONCURRENCY = 4
N, N_SLOW = 30, 10  # requests 3, 6, 9, … 30 (i % 3 == 2, 0-based) sleep 3 s > TIMEOUT_S
OVERHEAD_S = 0.1  # generous allowance per HTTP attempt on 127.0.0.1 (measured: ~2 ms)


def batch() -> list[ChatRequest]:
    return [
        ChatRequest(user(f"[slow] q{i}" if i % 3 == 2 else f"q{i}"), schema=Answer)
        for i in range(N)
    ]


@pytest.mark.slow
def test_30_requests_every_third_timing_out_then_cached(server, tmp_path, session):
    """Must show: all finish, timeouts reported as timeouts, wall time under a derived bound;
    a rerun is answered from the cache with identical outputs and no HTTP request."""
    cache = tmp_path / "llm.sqlite"
    model = session.build_chat(
        OllamaChat(
            model="fake-llm",
            base_url=server.url,
            retry=RetryPolicy(
                timeout_s=TIMEOUT_S,
                max_retries=MAX_RETRIES,
                backoff_s=BACKOFF_S,
                backoff_max_s=BACKOFF_S,
            ),
        ),
        "judge",
        cache_path=str(cache),
        cache_mode="read_write",
    )
    started = time.perf_counter()
    first = complete_many(model, batch(), max_concurrency=CONCURRENCY, progress=False)
    elapsed = time.perf_counter() - started

    # Bound. A slow request makes (1 + MAX_RETRIES) attempts that each end at TIMEOUT_S, with
    # one backoff wait <= BACKOFF_S between them: p_slow <= 2 * (1 + 0.1) + 0.2 = 2.4 s. A fast
    # one takes p_fast <= 0.1 s. The pool hands the next request to the first free worker
    # (greedy list scheduling), so the makespan is at most W / c + (1 - 1/c) * p_max (Graham
    # 1966) with W = 10 * 2.4 + 20 * 0.1 = 26 s, c = 4: 6.5 + 0.75 * 2.4 = 8.3 s. And at least
    # 10 * 2 * TIMEOUT_S / c = 5 s: every slow request holds a worker for two full timeouts.
    p_slow = (1 + MAX_RETRIES) * (TIMEOUT_S + OVERHEAD_S) + BACKOFF_S
    p_fast = OVERHEAD_S
    work = N_SLOW * p_slow + (N - N_SLOW) * p_fast
    upper = work / CONCURRENCY + (1 - 1 / CONCURRENCY) * p_slow
    lower = N_SLOW * (1 + MAX_RETRIES) * TIMEOUT_S / CONCURRENCY
    assert upper == pytest.approx(8.3)
    assert lower <= elapsed, elapsed  # no request gave up before its timeouts
    # Greedy scheduling finishes by `upper` on an idle machine; on a loaded CI machine only
    # "well under one at a time" (work = 26 s) is a safe check that the 4 workers overlapped.
    assert elapsed < work, (elapsed, upper)

    assert len(first) == N
    for i, out in enumerate(first):
        if i % 3 == 2:
            assert isinstance(out, LLMTimeoutError) and out.reason == "timeout", out
        else:
            assert isinstance(out, Completion) and out.parsed == Answer(answer=f"q{i}")
            assert not out.cached
    assert server.counts["/api/chat"] == (N - N_SLOW) + N_SLOW * (1 + MAX_RETRIES)  # 40
    usage = session.usage_by_role()
    assert usage["judge.llm_calls"] == 30 and usage["judge.llm_errors"] == 10
    assert usage["judge.llm_cache_hits"] == 0 and usage["judge.llm_cache_hit_rate"] == 0.0
    assert len(ResponseCache(cache)) == 20  # failures are never stored

    # The server heals: a rerun only sends the 10 requests that failed.
    server.slow_s = 0.0
    server.reset_counts()
    second = complete_many(model, batch(), max_concurrency=CONCURRENCY, progress=False)
    assert server.total == N_SLOW and server.counts["/api/chat"] == N_SLOW
    assert all(isinstance(o, Completion) for o in second)
    assert [o.cached for o in second] == [i % 3 != 2 for i in range(N)]
    for a, b in zip(first, second, strict=True):
        if isinstance(a, Completion):
            assert (b.text, b.parsed, b.finish_reason) == (a.text, a.parsed, a.finish_reason)

    # The same batch again: no HTTP request at all, identical outputs.
    server.reset_counts()
    third = complete_many(model, batch(), max_concurrency=CONCURRENCY, progress=False)
    assert server.total == 0
    assert all(o.cached and o.latency_ms == 0.0 for o in third)
    assert [(o.text, o.parsed) for o in third] == [(o.text, o.parsed) for o in second]
    usage = session.usage_by_role()
    assert usage["judge.llm_calls"] == 90 and usage["judge.llm_cache_hits"] == 50
    assert usage["judge.llm_cache_hit_rate"] == pytest.approx(50 / 90)

    # A new process (new model object, same cache file): only the identity lookups, once.
    fresh = session.build_chat(
        OllamaChat(model="fake-llm", base_url=server.url), "judge", cache_path=str(cache)
    )
    fourth = complete_many(fresh, batch(), max_concurrency=CONCURRENCY, progress=False)
    assert dict(server.counts) == {"/api/tags": 1, "/api/show": 1}
    assert [(o.text, o.parsed) for o in fourth] == [(o.text, o.parsed) for o in second]


def test_batch_keeps_order_and_never_raises_for_one_request(server):
    model = OllamaChat(model="fake-llm", base_url=server.url, retry=RetryPolicy(max_retries=0))
    reqs = [
        ChatRequest(user("a")),
        ChatRequest(user("[cut] b"), schema=Answer),
        ChatRequest(user("c"), options={"max_tokens": 3}),
    ]
    out = complete_many(model, reqs, max_concurrency=2, progress=False)
    assert out[0].text == "echo: a" and out[2].text == "echo: c"
    assert out[1].reason == "truncated"
    with pytest.raises(ConfigError):
        complete_many(model, reqs, max_concurrency=0)


def test_requests_are_in_flight_up_to_max_concurrency(server):
    server.latency_s = 0.2  # long enough for the 4 workers to overlap on any machine load
    model = OllamaChat(model="fake-llm", base_url=server.url)
    reqs = [ChatRequest(user(f"q{i}")) for i in range(8)]
    out = complete_many(model, reqs, max_concurrency=4, progress=False)
    assert [o.text for o in out] == [f"echo: q{i}" for i in range(8)]  # order kept
    # concurrent (more than one at once) and never above the limit; exactly 4 on an idle machine,
    # fewer only if a worker thread could not start within 0.2 s (the speed-up: bench/)
    assert 2 <= server.peak_in_flight <= 4


# --- cache semantics ------------------------------------------------------------------------
def test_cache_modes(server, tmp_path, session):
    path = str(tmp_path / "c.sqlite")
    inner = OllamaChat(model="fake-llm", base_url=server.url)
    ro = session.build_chat(inner, "generator", cache_path=path, cache_mode="read_only")
    ro.complete(user("x"))
    ro.complete(user("x"))
    assert server.counts["/api/chat"] == 2 and len(ResponseCache(path)) == 0
    rw = session.build_chat(inner, "generator", cache_path=path, cache_mode="read_write")
    rw.complete(user("x"))
    assert rw.complete(user("x")).cached and server.counts["/api/chat"] == 3
    assert ro.complete(user("x")).cached  # read_only reads what read_write stored
    off = session.build_chat(inner, "generator", cache_path=path, cache_mode="off")
    assert not off.complete(user("x")).cached and server.counts["/api/chat"] == 4
    with pytest.raises(ConfigError, match="cache.mode"):
        factory.CacheSettings(path, "sometimes")


def test_request_key_covers_every_input():
    ident = {"provider": "ollama", "model": "m", "digest": "d1", "base_url": "u"}
    base = request_key(ident, user("q"), Answer, {"temperature": 0})
    assert base == request_key(dict(ident), user("q"), Answer, {"temperature": 0})
    assert len(base) == 64

    class Other(BaseModel):
        answer: int

    changed = [
        request_key({**ident, "digest": "d2"}, user("q"), Answer, {"temperature": 0}),
        request_key({**ident, "base_url": "v"}, user("q"), Answer, {"temperature": 0}),
        request_key({**ident, "model": "n"}, user("q"), Answer, {"temperature": 0}),
        request_key(ident, user("q2"), Answer, {"temperature": 0}),
        request_key(ident, user("q"), None, {"temperature": 0}),
        request_key(ident, user("q"), Other, {"temperature": 0}),
        request_key(ident, user("q"), Answer, {"temperature": 0.7}),
        request_key(ident, user("q"), Answer, {"temperature": 0, "seed": 1}),
    ]
    assert len({base, *changed}) == 1 + len(changed)


def test_fake_model_is_metered_not_cached(tmp_path, session):
    fake = FakeChat(text="hi")
    model = session.build_chat(fake, "generator", cache_path=str(tmp_path / "c.sqlite"))
    assert isinstance(model, CachedChat) and model.cache is None
    model.complete(user("x"))
    model.complete(user("x"))
    assert fake.calls == 2
    assert session.usage_by_role() == {
        "generator.llm_calls": 2.0,
        "generator.llm_cache_hits": 0.0,
        "generator.llm_errors": 0.0,
        "generator.prompt_tokens": 2.0,
        "generator.reused.prompt_tokens": 0.0,
        "generator.completion_tokens": 2.0,
        "generator.reasoning_tokens": 0.0,
        "generator.cache_hit.prompt_tokens": 0.0,
        "generator.cache_hit.completion_tokens": 0.0,
        "generator.llm_cache_hit_rate": 0.0,
    }
    assert session.identity_by_role()["generator.provider"] == "fake"
    assert session.identity_by_role()["generator.cache_mode"] == "off"


def test_usage_meter_counts_tokens_of_model_calls_only():
    meter = UsageMeter("judge")
    assert "judge.llm_cache_hit_rate" not in meter.metrics()  # no call, no rate
    meter.record(Completion(text="a", usage=Usage(10, 3)))
    meter.record(Completion(text="a", cached=True))
    meter.record_error()
    m = meter.metrics()
    assert (m["judge.llm_calls"], m["judge.llm_cache_hits"], m["judge.llm_errors"]) == (3, 1, 1)
    assert (m["judge.prompt_tokens"], m["judge.completion_tokens"]) == (10, 3)
    assert m["judge.llm_cache_hit_rate"] == pytest.approx(1 / 3)


# --- through the whole job ------------------------------------------------------------------
@pytest.mark.slow
def test_main_job_with_ollama_logs_usage_identity_and_reruns_from_cache(compose_cfg, server):
    overrides = (
        "embedder=hash",
        "judge=fake",
        "llm=ollama",
        f"llm.base_url={server.url}",
        "llm.model=fake-llm",
        "llm.num_ctx=4096",
        "max_concurrency=4",
    )
    run_job(compose_cfg(*overrides, "run_name=first"))
    chat_requests = server.counts["/api/chat"]
    run_job(compose_cfg(*overrides, "run_name=second"))
    assert server.counts["/api/chat"] == chat_requests  # the rerun made no model call

    cfg = compose_cfg(*overrides)
    client = MlflowClient(cfg.tracking.uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    first, second = runs["first"].data, runs["second"].data
    n = first.metrics["n_samples"]
    assert chat_requests == n  # one /api/chat per question
    assert first.metrics["generator.llm_calls"] == n
    assert first.metrics["generator.llm_cache_hits"] == 0
    assert first.metrics["generator.prompt_tokens"] > 0
    assert second.metrics["generator.llm_cache_hits"] == n
    assert second.metrics["generator.llm_cache_hit_rate"] == 1.0
    assert second.metrics["generator.prompt_tokens"] == 0  # nothing was processed
    tags = all_tags(client, runs["first"])  # the generator's identity: in tags.json
    assert tags["generator.provider"] == "ollama"
    assert tags["generator.digest"] == "a" * 64
    assert tags["generator.base_url"] == server.url
    assert tags["generator.num_ctx"] == "4096"
    assert tags["generator.cache_mode"] == "read_write"
    assert Path(cfg.paths.llm_cache).is_file()


@pytest.mark.slow
def test_runner_answers_concurrently_with_the_same_results(compose_cfg):
    """max_concurrency=4 answers several questions at once (the peak number of answer calls
    in flight is observed, not timed: wall-clock on a loaded CI machine is noise) and gives
    the same answers, retrievals and metrics as one at a time."""
    import threading

    cfg = compose_cfg("embedder=hash", "llm=fake", "judge=fake", "llm.delay_s=0.02")
    exp = build(cfg)
    answer = exp.target.answer
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def counted(sample):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        try:
            return answer(sample)
        finally:
            with lock:
                state["now"] -= 1

    exp.target.answer = counted
    one = evaluate(exp.dataset, exp.target, exp.metrics, progress=False, max_concurrency=1)
    assert state["peak"] == 1
    state["peak"] = 0
    four = evaluate(exp.dataset, exp.target, exp.metrics, progress=False, max_concurrency=4)
    assert 2 <= state["peak"] <= 4  # answered at once, never above the bound
    assert [r.response for r in four.responses] == [r.response for r in one.responses]
    assert [r.retrieved_ids for r in four.responses] == [r.retrieved_ids for r in one.responses]
    timing = ("duration_s", "latency_ms_p50", "latency_ms_p95")
    same = {k: v for k, v in one.metrics().items() if k not in timing}
    assert {k: v for k, v in four.metrics().items() if k not in timing} == pytest.approx(same)


def test_cache_kept_open_connections_serve_concurrent_threads_and_other_instances(tmp_path):
    """ResponseCache keeps its connections open (a pool of readers, one locked writer): 8
    threads each storing and reading back 25 entries at once all get their own entry, and a
    second instance on the same file (as another sweep job) sees all 200 at once."""
    import threading

    path = tmp_path / "llm.sqlite"
    cache = ResponseCache(path)
    errors: list[str] = []

    def worker(t: int) -> None:
        for i in range(25):
            key = f"t{t}-{i}"
            cache.put(key, "fake", Completion(text=key, usage=Usage(i, t), latency_ms=1.0))
            got = cache.get(key)
            if got is None or got.text != key or got.cached_usage != Usage(i, t):
                errors.append(key)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    other = ResponseCache(path)
    assert len(other) == 200
    hit = other.get("t3-7")
    assert hit is not None and hit.cached and hit.text == "t3-7" and hit.cached_usage == Usage(7, 3)
    assert other.get("t9-0") is None
