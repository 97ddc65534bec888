"""Reasoning models (issue 38): the request field each server gets per ``reasoning`` setting,
the reasoning read from each server's reply shape (separate field, inline tags, harmony
markers), replies cut while thinking, reasoning tokens, the budget, the Ollama preflight and the
response cache. Values are the fakes' own texts, counted by hand."""

from __future__ import annotations

import io
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from rag_experiments.common.http import RetryPolicy
from rag_experiments.errors import ConfigError
from rag_experiments.fakes.ollama_server import FakeOllamaServer
from rag_experiments.fakes.openai_server import REASONING_SHAPES, THOUGHT, FakeOpenAIServer
from rag_experiments.llm.cache import CachedChat, ResponseCache
from rag_experiments.llm.ollama import OllamaChat
from rag_experiments.llm.openai_compat import OpenAICompatChat
from rag_experiments.llm.parsing import StructuredOutput, strict_choice
from rag_experiments.llm.reasoning import (
    STOP_AFTER,
    ReasoningTruncatedError,
    ReasoningWatch,
    Split,
    openai_fields,
    split_reasoning,
)
from rag_experiments.llm.usage import UsageMeter


class Verdict(StructuredOutput):
    verdict: strict_choice(0, 1)  # type: ignore[valid-type]
    reason: str


MESSAGES = [{"role": "user", "content": "Is the answer supported?"}]
PLAIN = Verdict(verdict=0, reason="x")  # the fakes' smallest instance of the schema


# --- splitting ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', Split('{"a": 1}', "")),
        ('<think>a b</think>\n{"a": 1}', Split('{"a": 1}', "a b")),
        ('a b</think>{"a": 1}', Split('{"a": 1}', "a b")),  # the template opened <think>
        ('<think>one</think>x<think>two</think>{"a": 1}', Split('x{"a": 1}', "one\ntwo")),
        ("<think>cut in the mid", Split("", "cut in the mid", open=True)),
        (
            "<|channel|>analysis<|message|>hmm<|end|><|start|>assistant<|channel|>final"
            '<|message|>{"a": 1}<|return|>',
            Split('{"a": 1}', "hmm"),
        ),
        ('analysishmmassistantfinal{"a": 1}', Split('{"a": 1}', "hmm")),  # tokens dropped
        ("<|channel|>analysis<|message|>cut", Split("", "cut", open=True)),
    ],
)
def test_split_reasoning(text, expected):
    assert split_reasoning(text) == expected


# --- what each setting sends, and the verdicts ----------------------------------------
OPENAI_SENT = {
    "auto": {},
    "off": {"chat_template_kwargs": {"enable_thinking": False}},
    "on": {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "medium"},
    "high": {"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "high"},
}


@pytest.mark.parametrize("shape", REASONING_SHAPES)
@pytest.mark.parametrize("setting", list(OPENAI_SENT))
def test_openai_shapes_give_the_plain_judges_verdict(shape, setting):
    with FakeOpenAIServer(latency_s=0) as plain:
        reference = OpenAICompatChat(base_url=plain.url, model="fake-judge").complete(
            MESSAGES, Verdict
        )
    with FakeOpenAIServer(latency_s=0, reasoning=shape) as server:
        model = OpenAICompatChat(base_url=server.url, model="fake-judge", reasoning=setting)
        got = model.complete(MESSAGES, Verdict)
        assert server.reasoning_sent == [OPENAI_SENT[setting]]
    assert got.parsed == reference.parsed == PLAIN
    # the fake thinks unless enable_thinking is false
    assert got.reasoning == ("" if setting == "off" else THOUGHT)
    # estimated: ceil(147 / 4) = 37 characters' tokens, at most the reply's completion tokens
    # (the fake counts words: 28 of the thought + 3 or 4 of the answer)
    estimate = min(math.ceil(147 / 4), got.usage.completion_tokens)
    assert got.usage.reasoning_tokens == (0 if setting == "off" else estimate)
    if shape == "vllm" and setting != "off":
        assert (got.usage.completion_tokens, got.usage.reasoning_tokens) == (32, 32)


def test_openai_styles():
    assert openai_fields("low", "kwargs") == {"chat_template_kwargs": {"enable_thinking": True}}
    assert openai_fields("low", "effort") == {"reasoning_effort": "low"}
    with pytest.raises(ConfigError, match="reasoning_style=kwargs or both"):
        OpenAICompatChat(reasoning="off", reasoning_style="effort")
    with pytest.raises(ConfigError, match="not one of auto, off, on"):
        OpenAICompatChat(reasoning="maybe")


OLLAMA_SENT = {"auto": None, "off": False, "on": True, "high": "high"}


@pytest.mark.parametrize("setting", list(OLLAMA_SENT))
def test_ollama_think_and_thinking_field(setting):
    with FakeOllamaServer(judge=True) as plain:
        reference = OllamaChat("fake-llm", base_url=plain.url).complete(MESSAGES, Verdict)
    with FakeOllamaServer(judge=True, thinking=True, family="gptoss") as server:
        model = OllamaChat("fake-llm", base_url=server.url, reasoning=setting, max_tokens=100)
        got = model.complete(MESSAGES, Verdict)
        body = server.bodies[-1]
    assert body.get("think") == OLLAMA_SENT[setting]
    assert ("think" in body) == (setting != "auto")
    # max_tokens covers reasoning + answer: the level's budget is added
    budget = {"auto": 0, "off": 0, "on": 2048, "high": 4096}[setting]
    assert body["options"]["num_predict"] == 100 + budget
    assert got.parsed == reference.parsed == PLAIN
    assert got.reasoning == ("" if setting == "off" else THOUGHT)


# --- cut while thinking --------------------------------------------------------------
@pytest.mark.parametrize("shape", REASONING_SHAPES)
def test_reply_cut_while_thinking_is_reasoning_truncated(shape, caplog):
    with FakeOpenAIServer(latency_s=0, reasoning=shape, cut_thinking=True) as server:
        model = OpenAICompatChat(base_url=server.url, model="fake-judge", reasoning="on")
        with caplog.at_level(logging.WARNING):
            for _ in range(2):
                with pytest.raises(ReasoningTruncatedError) as err:
                    model.complete(MESSAGES, Verdict)
    assert err.value.reason == "reasoning_truncated"
    assert "max_tokens=2560" in str(err.value)  # 512 + the budget 2048
    hints = [r for r in caplog.records if "reply cut while reasoning" in r.getMessage()]
    assert len(hints) == 1  # printed once per model
    assert "judge.reasoning=off" in hints[0].getMessage()
    # the cut thought (73 characters) still counts: ceil(73 / 4) = 19 tokens, at most the
    # completion tokens the fake reports (its words: 14)
    assert err.value.usage.reasoning_tokens == min(19, err.value.usage.completion_tokens)


def test_a_server_whose_replies_are_all_cut_is_not_called_after_the_stop(caplog):
    with FakeOpenAIServer(latency_s=0, reasoning="vllm", cut_thinking=True) as server:
        model = OpenAICompatChat(base_url=server.url, model="fake-judge", reasoning="on")
        with caplog.at_level(logging.WARNING):
            for _ in range(STOP_AFTER + 3):
                with pytest.raises(ReasoningTruncatedError) as err:
                    model.complete(MESSAGES, Verdict)
        assert server.requests == STOP_AFTER  # the last 3 made no request
    assert err.value.reason == "reasoning_truncated" and "not called" in str(err.value)
    assert "set judge.reasoning=off" in str(err.value)
    stops = [r for r in caplog.records if "no more calls" in r.getMessage()]
    assert len(stops) == 1


def test_one_answered_reply_disarms_the_stop():
    watch = ReasoningWatch(stop_after=2)
    watch.answered()
    for _ in range(5):
        watch.cut("m")
    watch.check("m")  # a model that answered once is only cut on some questions
    fresh = ReasoningWatch(stop_after=2)
    fresh.cut("m")
    fresh.check("m")  # 1 of 2: still called
    fresh.cut("m")
    with pytest.raises(ReasoningTruncatedError, match="the first 2 replies were all cut"):
        fresh.check("m")


def test_ollama_cut_while_thinking():
    with FakeOllamaServer(judge=True, thinking=True, cut_thinking=True) as server:
        model = OllamaChat("fake-llm", base_url=server.url, reasoning="on")
        with pytest.raises(ReasoningTruncatedError):
            model.complete(MESSAGES, Verdict)


# --- usage ---------------------------------------------------------------------------
def test_reported_reasoning_tokens_win_over_the_estimate():
    with FakeOpenAIServer(latency_s=0, reasoning="vllm", report_reasoning_tokens=True) as s:
        got = OpenAICompatChat(base_url=s.url, model="fake-judge").complete(MESSAGES, Verdict)
    assert got.usage.reasoning_tokens == 28  # the thought's words, as the fake reports


def test_meter_counts_reasoning_tokens_and_the_cache_keeps_the_reasoning(tmp_path):
    meter = UsageMeter("judge")
    with FakeOpenAIServer(latency_s=0, reasoning="llama_cpp") as server:
        inner = OpenAICompatChat(base_url=server.url, model="fake-judge", reasoning="on")
        cache = ResponseCache(tmp_path / "c.sqlite")
        model = CachedChat(inner, meter, cache)
        first = model.complete(MESSAGES, Verdict)
        again = model.complete(MESSAGES, Verdict)
        auto = CachedChat(
            OpenAICompatChat(base_url=server.url, model="fake-judge"), meter, cache
        ).complete(MESSAGES, Verdict)
        assert server.requests == 2  # the second call was a hit; auto is another key
    assert again.cached and again.reasoning == first.reasoning == THOUGHT
    assert again.parsed == first.parsed == PLAIN
    assert not auto.cached
    # per call min(ceil(147 / 4), 32 completion tokens: 4 answer + 28 thought words) = 32
    assert meter.metrics()["judge.reasoning_tokens"] == 2 * 32
    assert inner.describe()["reasoning"] == "on"
    assert "reasoning" not in OpenAICompatChat().describe()  # auto: the old cache keys


# --- Ollama preflight ----------------------------------------------------------------
def test_ollama_preflight_refuses_what_the_model_cannot_do():
    with FakeOllamaServer() as server:  # no "thinking" capability
        with pytest.raises(ConfigError, match=r"its values: auto, off;"):
            OllamaChat("fake-llm", base_url=server.url, reasoning="on").check()
        OllamaChat("fake-llm", base_url=server.url, reasoning="off").check()
    with FakeOllamaServer(thinking=True, family="gptoss") as server:
        with pytest.raises(ConfigError, match=r"auto, off, low, medium, high"):
            OllamaChat("fake-llm", base_url=server.url, reasoning="on").check()
        OllamaChat("fake-llm", base_url=server.url, reasoning="high").check()
    with FakeOllamaServer(thinking=True) as server:
        OllamaChat("fake-llm", base_url=server.url, reasoning="on").check()


def test_embedded_accepts_only_auto_and_off():
    from rag_experiments.llm.embedded import EmbeddedChat

    with pytest.raises(ConfigError, match="no reasoning switch"):
        EmbeddedChat(reasoning="on")


# --- the real llama-cpp-python server (the session's `llama_server`, tests/conftest.py) ----
@pytest.mark.llm
@pytest.mark.slow
def test_llama_cpp_python_server_takes_the_reasoning_fields(llama_server):
    """llama-cpp-python's server ignores ``chat_template_kwargs`` and ``reasoning_effort`` in a
    request (its request model drops unknown fields; its templates are fixed at load time), so
    every setting gives the verdict of ``auto``. The bundled SmolLM2-135M has no thinking
    template and answers under a JSON grammar: no ``<think>`` to cut, no reasoning tokens."""
    question = [
        {
            "role": "user",
            "content": "Context: Paris is the capital of France.\nAnswer: Paris.\nIs the "
            'answer supported by the context? Reply in JSON: {"verdict": 1 or 0, "reason": …}',
        }
    ]
    verdicts = {}
    for setting in ("auto", "off", "on"):
        chat = OpenAICompatChat(
            base_url=llama_server,
            max_tokens=40,
            reasoning=setting,
            reasoning_budget=0,  # n_ctx is 1024: the default budget would not fit
            retry=RetryPolicy(timeout_s=60),
        )
        out = chat.complete(question, Verdict)  # a refused field fails here (HTTP 4xx)
        assert out.reasoning == "" and out.usage.reasoning_tokens == 0
        verdicts[setting] = out.parsed
    assert verdicts["off"] == verdicts["on"] == verdicts["auto"]


# --- a run whose judge is cut while thinking ----------------------------------------------
@pytest.mark.slow
def test_run_with_a_judge_cut_while_thinking_fails_fast_with_one_hint(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    with FakeOpenAIServer(latency_s=0, reasoning="vllm", cut_thinking=True) as server:
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
                "judge.reasoning=on",
                "metrics=custom",
                "max_samples=12",
                "progress=false",
                f"tracking.uri={uri}",
                f"paths.cache_dir={tmp_path}/cache",
                f"hydra.run.dir={tmp_path}/job",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        )
        requests = server.requests
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert out.count("reply cut while reasoning") == 1  # the hint, once
    # the stop: after STOP_AFTER cut replies (plus those already in flight when it was set)
    # no more requests: fewer than half of the 12 questions' 57 judge calls (4.74 a question)
    assert STOP_AFTER <= requests < 57 // 2
    assert "no more calls to it in this run" in out
    assert "the judge failed on too many questions" in out
    assert "set judge.reasoning=off" in out
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rag-experiments").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.metrics["judge.reasoning_tokens"] > 0
    local = client.download_artifacts(run.info.run_id, "per_query_results.csv")
    table = pd.read_csv(io.StringIO(Path(local).read_text(encoding="utf-8")))
    assert table["faithfulness"].isna().all()
    assert (table["faithfulness.reason"] == "reasoning_truncated").all()
