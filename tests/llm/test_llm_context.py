"""Context-window arithmetic, trimming of contexts by the baseline target, retries' bounds and
the typed errors."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from rag_experiments.build import build
from rag_experiments.common.http import RetryPolicy
from rag_experiments.errors import ConfigError
from rag_experiments.fakes.ollama_server import FakeOllamaServer
from rag_experiments.llm.context import estimate_tokens, fit_contexts
from rag_experiments.llm.errors import (
    LLMHTTPError,
    LLMTimeoutError,
    LLMUnreachableError,
    ModelNotFoundError,
    is_retryable,
)


def test_estimate_tokens_by_hand():
    messages = [{"role": "system", "content": "abcdabcd"}, {"role": "user", "content": "x" * 9}]
    # 3 (reply priming) + (4 + ceil(8/4)) + (4 + ceil(9/4)) = 3 + 6 + 7
    assert estimate_tokens(messages) == 16
    assert estimate_tokens([]) == 3


def _build(contexts: list[str]) -> list[dict[str, str]]:
    return [{"role": "user", "content": "|".join(contexts)}]


def _chars(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages)


def test_fit_contexts_drops_lowest_ranked_then_cuts_the_top_one():
    ctx = ["aaaa", "bbbb", "cccc"]
    kept, report = fit_contexts(ctx, _build, _chars, budget=100)
    assert kept == ctx and not report.trimmed and report.prompt_tokens == 14
    kept, report = fit_contexts(ctx, _build, _chars, budget=9)  # "aaaa|bbbb" = 9
    assert kept == ["aaaa", "bbbb"] and (report.dropped, report.chars_cut) == (1, 0)
    kept, report = fit_contexts(ctx, _build, _chars, budget=2)
    assert kept == ["aa"] and (report.dropped, report.chars_cut, report.prompt_tokens) == (2, 2, 2)
    kept, report = fit_contexts(ctx, _build, lambda m: _chars(m) + 5, budget=2)
    assert kept == [""] and report.chars_cut == 4  # nothing fits: the call will overflow


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer() as srv:
        yield srv


@pytest.mark.parametrize("truncate", [True, False])
def test_baseline_truncates_contexts_to_the_window_and_flags_the_row(compose_cfg, server, truncate):
    cfg = compose_cfg(
        "embedder=hash",
        "judge=fake",
        "llm=ollama",
        f"llm.base_url={server.url}",
        "llm.model=fake-llm",
        "llm.num_ctx=400",
        "llm.max_tokens=100",
        f"target.truncate_contexts={str(truncate).lower()}",
    )
    exp = build(cfg)
    exp.target.prepare(exp.dataset)
    sample = exp.dataset.samples[0]
    resp = exp.target.answer(sample)
    assert len(resp.retrieved_contexts) == 5  # retrieval itself is untouched
    if not truncate:
        # ~5 contexts of up to 800 characters: far more than the 400-token window
        assert resp.error == "context_overflow" and "400" in resp.error_message
        assert server.counts["/api/chat"] == 0
        return
    assert resp.error is None, resp.error_message
    assert resp.metadata["contexts_truncated"] is True
    assert resp.metadata["contexts_dropped"] >= 1
    (sent,) = [b for b in server.bodies if b["path"] == "/api/chat"]
    assert estimate_tokens(sent["messages"]) <= 400 - 100  # the budget: window - max_tokens


def test_retry_policy_bounds_and_classification():
    policy = RetryPolicy(max_retries=3, backoff_s=0.5, backoff_max_s=1.5)
    assert policy.max_total_wait_s() == 0.5 + 1.0 + 1.5  # min(cap, 0.5 * 2**k), k = 0, 1, 2
    with pytest.raises(ConfigError):
        RetryPolicy(max_retries=-1)
    assert is_retryable(LLMTimeoutError("t")) and is_retryable(LLMUnreachableError("u"))
    assert is_retryable(LLMHTTPError("x", status=503))
    assert is_retryable(LLMHTTPError("x", status=429))
    assert not is_retryable(LLMHTTPError("x", status=400))
    assert not is_retryable(ModelNotFoundError("m"))

    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise LLMHTTPError("busy", status=503, body="x" * 1000)
        return "done"

    assert RetryPolicy(max_retries=2, backoff_s=0.0).call(flaky) == "done" and len(calls) == 3
    err = LLMHTTPError("failed", status=500, body="y" * 1000)
    assert str(err).endswith("y" * 300 + ")") and "HTTP 500" in str(err)
    assert math.isclose(RetryPolicy(max_retries=0).max_total_wait_s(), 0.0)
