"""OpenAICompatChat and OpenAICompatEmbedder: against llama-cpp-python's real server (started
here with the bundled SmolLM2 GGUF on a free port of 127.0.0.1) and against pytest-httpserver
for the server behaviours a real server cannot be told to show."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import BaseModel, Field
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from rag_experiments.common.http import RetryPolicy
from rag_experiments.embedding.openai_compat import OpenAICompatEmbedder
from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm import factory
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.errors import (
    ContextOverflowError,
    LLMHTTPError,
    LLMTruncatedError,
    ModelNotFoundError,
)
from rag_experiments.llm.openai_compat import OpenAICompatChat

SERVER_N_CTX = 1024  # tests/conftest.py LLAMA_SERVER_N_CTX


class Answer(BaseModel):
    answer: str = Field(max_length=300)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# --- the real llama.cpp server (the session's `llama_server` fixture, tests/conftest.py) ---
@pytest.mark.llm
@pytest.mark.slow
def test_llama_cpp_server_plain_and_deterministic(llama_server):
    chat = OpenAICompatChat(base_url=llama_server, max_tokens=12, retry=RetryPolicy(timeout_s=60))
    out = chat.complete(user("Name the capital of France."))
    assert out.text.strip() and out.finish_reason in ("stop", "length")
    assert out.usage.prompt_tokens > 0 and 0 < out.usage.completion_tokens <= 12
    assert chat.complete(user("Name the capital of France.")).text == out.text  # temp 0, seed 0


@pytest.mark.llm
@pytest.mark.slow
def test_llama_cpp_server_structured_output_falls_back_to_its_json_mode(llama_server):
    chat = OpenAICompatChat(base_url=llama_server, max_tokens=48, retry=RetryPolicy(timeout_s=60))
    out = chat.complete(
        user("Reply in JSON with the key answer: the capital of France."), schema=Answer
    )
    assert isinstance(out.parsed, Answer)
    # llama-cpp-python refuses {"type": "json_schema"} (HTTP 500, "Input should be 'text' or
    # 'json_object'") and constrains {"type": "json_object", "schema": …} with a grammar.
    assert chat.format_mode == "json_object_schema"
    # a JSON reply cut by max_tokens is "truncated", not a parse error
    with pytest.raises(LLMTruncatedError) as info:
        chat.complete(
            user("Reply in JSON with the key answer: a long story."), schema=Answer, max_tokens=4
        )
    assert info.value.reason == "truncated" and info.value.raw


@pytest.mark.llm
@pytest.mark.slow
def test_llama_cpp_server_context_overflow_names_both_numbers(llama_server):
    long_prompt = user("word " * 1500)
    unchecked = OpenAICompatChat(
        base_url=llama_server, max_tokens=8, retry=RetryPolicy(timeout_s=60)
    )
    with pytest.raises(ContextOverflowError) as info:
        unchecked.complete(long_prompt)  # no window configured: the server says so
    assert info.value.context_window == SERVER_N_CTX
    assert info.value.prompt_tokens > SERVER_N_CTX
    checked = OpenAICompatChat(base_url=llama_server, context_window=SERVER_N_CTX)
    with pytest.raises(ContextOverflowError, match=r"about 1882 tokens .* 1024 tokens"):
        checked.complete(long_prompt)  # estimated before the call: ceil(7500 / 4) + 4 + 3


@pytest.mark.llm
@pytest.mark.slow
def test_llama_cpp_server_batch_and_cache(llama_server, tmp_path):
    session = factory.ModelSession(factory.CacheSettings(str(tmp_path / "llm.sqlite")))
    model = session.build_chat(
        {
            "_target_": "rag_experiments.llm.openai_compat.OpenAICompatChat",
            "base_url": llama_server,
            "max_tokens": 8,
            "timeout_s": 60,
        },
        "generator",
    )
    reqs = [ChatRequest(user(f"Count to {i}.")) for i in range(3)]
    first = complete_many(model, reqs, max_concurrency=2, progress=False)
    again = complete_many(model, reqs, max_concurrency=2, progress=False)
    usage = session.usage_by_role()
    assert all(not o.cached for o in first) and all(o.cached for o in again)
    assert [o.text for o in again] == [o.text for o in first]
    assert usage["generator.llm_calls"] == 6 and usage["generator.llm_cache_hits"] == 3


# --- server behaviours, scripted with pytest-httpserver ----------------------------------------
def _ok(content: str, finish: str = "stop") -> dict:
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5},
        "model": "served-name",
    }


def test_format_ladder_down_to_plain_text(httpserver: HTTPServer):
    seen: list[dict] = []

    def handler(request: Request) -> Response:
        body = request.get_json()
        seen.append(body)
        fmt = body.get("response_format")
        if fmt is not None:  # this server knows no response_format at all
            return Response(
                json.dumps({"error": {"message": "unknown field response_format"}}),
                status=400 if fmt["type"] != "json_object" else 422,
            )
        return Response(
            json.dumps(_ok('Here: {"answer": "Paris",}')),
            status=200,
            content_type="application/json",
        )

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)
    chat = OpenAICompatChat(base_url=httpserver.url_for("/v1"))
    out = chat.complete(user("Capital of France?"), schema=Answer)
    assert out.parsed == Answer(answer="Paris") and out.model == "served-name"
    assert [b.get("response_format", {}).get("type") for b in seen] == [
        "json_schema",
        "json_object",
        "json_object",
        None,
    ]
    assert seen[0]["response_format"]["json_schema"]["schema"] == Answer.model_json_schema()
    assert "schema" in seen[1]["response_format"] and "schema" not in seen[2]["response_format"]
    assert "Reply with one JSON object" in seen[3]["messages"][-1]["content"]
    assert chat.format_mode == "text"
    chat.complete(user("again"), schema=Answer)
    assert len(seen) == 5  # the working mode is remembered: one request


def test_api_key_is_sent_but_never_shown(httpserver: HTTPServer, monkeypatch):
    monkeypatch.setenv("RX_TEST_KEY", "sk-very-secret")
    httpserver.expect_request(
        "/v1/chat/completions", headers={"Authorization": "Bearer sk-very-secret"}
    ).respond_with_json({"error": "boom sk-nothing"}, status=400)
    chat = OpenAICompatChat(
        base_url=httpserver.url_for("/v1"),
        api_key_env="RX_TEST_KEY",
        retry=RetryPolicy(max_retries=0),
    )
    with pytest.raises(LLMHTTPError) as info:
        chat.complete(user("q"))
    assert info.value.status == 400 and "boom" in str(info.value)
    assert len(httpserver.log) == 1  # the header matched
    for shown in (str(info.value), repr(chat), json.dumps(chat.describe())):
        assert "sk-very-secret" not in shown
    monkeypatch.delenv("RX_TEST_KEY")
    with pytest.raises(ConfigError, match="RX_TEST_KEY"):
        OpenAICompatChat(base_url=httpserver.url_for("/v1"), api_key_env="RX_TEST_KEY")


def test_model_not_found_and_rate_limit_retry(httpserver: HTTPServer):
    httpserver.expect_oneshot_request("/v1/chat/completions").respond_with_json(
        {"error": {"message": "The model `nope` does not exist."}}, status=404
    )
    chat = OpenAICompatChat(model="nope", base_url=httpserver.url_for("/v1"))
    with pytest.raises(ModelNotFoundError, match="GET .*/v1/models"):
        chat.complete(user("q"))

    httpserver.clear()
    httpserver.expect_ordered_request("/v1/chat/completions").respond_with_json(
        {"error": "slow down"}, status=429
    )
    httpserver.expect_ordered_request("/v1/chat/completions").respond_with_json(_ok("fine"))
    chat = OpenAICompatChat(
        base_url=httpserver.url_for("/v1"), retry=RetryPolicy(max_retries=1, backoff_s=0.01)
    )
    assert chat.complete(user("q")).text == "fine"
    assert len(httpserver.log) == 2


def test_openai_embedder_orders_by_index_and_normalises(httpserver: HTTPServer):
    def handler(request: Request) -> Response:
        texts = request.get_json()["input"]
        data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(texts)]
        return Response(json.dumps({"data": data[::-1]}), content_type="application/json")

    httpserver.expect_request("/v1/embeddings").respond_with_handler(handler)
    emb = OpenAICompatEmbedder(base_url=httpserver.url_for("/v1"), batch_size=2)
    vecs = emb.embed_documents(["abc", "a", "abcd"])
    raw = np.array([[3, 1, 0], [1, 1, 0], [4, 1, 0]], dtype=np.float64)
    np.testing.assert_allclose(vecs, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-6)
    assert len(httpserver.log) == 2 and emb.dim == 3
    assert emb.id == f"openai:default@{httpserver.url_for('/v1')}:norm1"


def test_openai_embedder_refuses_token_level_vectors(httpserver: HTTPServer):
    httpserver.expect_request("/v1/embeddings").respond_with_json(
        {"data": [{"index": 0, "embedding": [[0.1, 0.2], [0.3, 0.4]]}]}
    )
    emb = OpenAICompatEmbedder(base_url=httpserver.url_for("/v1"))
    with pytest.raises(LLMError, match="one vector per token") as info:
        emb.embed_query("x")
    assert info.value.reason == "bad_response"
