"""OllamaChat and OllamaEmbedder against a fake Ollama speaking real HTTP on 127.0.0.1
(:class:`~rag_experiments.fakes.ollama_server.FakeOllamaServer`)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest
from pydantic import BaseModel, Field

from rag_experiments.common.http import RetryPolicy
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.embedding.ollama import OllamaEmbedder
from rag_experiments.fakes.ollama_server import FakeOllamaServer
from rag_experiments.llm.errors import (
    ContextOverflowError,
    LLMParseError,
    LLMTimeoutError,
    LLMTruncatedError,
    LLMUnreachableError,
    ModelNotFoundError,
)
from rag_experiments.llm.ollama import OllamaChat, canonical_model_name


class Answer(BaseModel):
    answer: str = Field(max_length=500)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer(slow_s=1.5) as srv:
        yield srv


def chat(server: FakeOllamaServer, **kw) -> OllamaChat:
    kw.setdefault("retry", RetryPolicy(timeout_s=5.0, backoff_s=0.01))
    return OllamaChat(model="fake-llm", base_url=server.url, num_ctx=2048, **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_request_carries_num_ctx_options_format_and_keep_alive(server):
    model = chat(
        server, max_tokens=77, temperature=0.3, seed=9, keep_alive="-1", options={"top_k": 5}
    )
    out = model.complete(user("What is X?"), schema=Answer)
    assert out.parsed == Answer(answer="What is X?")
    body = server.bodies[-1]
    assert body["path"] == "/api/chat" and body["stream"] is False
    assert body["options"] == {
        "num_ctx": 2048,
        "num_predict": 77,
        "temperature": 0.3,
        "seed": 9,
        "top_k": 5,
    }
    assert body["format"] == Answer.model_json_schema()
    assert body["keep_alive"] == "-1"
    # per-call options override the defaults
    model.complete(user("q"), max_tokens=5, temperature=0.0)
    assert server.bodies[-1]["options"]["num_predict"] == 5
    assert "format" not in server.bodies[-1]


def test_usage_finish_reason_and_plain_text(server):
    out = chat(server).complete(user("hello"))
    assert out.text == "echo: hello" and out.finish_reason == "stop" and not out.cached
    # the fake reports eval_count = len(text) // 4 and prompt_eval_count = len(json(messages)) // 4
    assert out.usage.completion_tokens == len("echo: hello") // 4
    assert out.usage.prompt_tokens == len('[{"role": "user", "content": "hello"}]') // 4
    assert out.latency_ms > 0


@pytest.mark.parametrize("marker", ["[fenced]", "[prose]", "[trailing-comma]"])
def test_tolerant_parsing_of_messy_json(server, marker):
    out = chat(server).complete(user(f"{marker} q"), schema=Answer)
    assert out.parsed == Answer(answer=f"{marker} q")
    assert server.counts["/api/chat"] == 1  # repaired locally, no second request


def test_json_cut_by_length_is_truncated_not_parse_error(server):
    with pytest.raises(LLMTruncatedError) as info:
        chat(server, parse_retries=2).complete(user("[cut] q"), schema=Answer)
    assert info.value.reason == "truncated"
    assert info.value.raw == '{"answer": "[cut] q"}'[: len('{"answer": "[cut] q"}') // 2]
    assert "max_tokens=512" in str(info.value)
    assert server.counts["/api/chat"] == 1  # truncation is not "repaired"
    # the failed call's tokens travel with the error (token totals include failed calls)
    body = json.dumps(server.bodies[-1]["messages"])
    assert info.value.usage.prompt_tokens == len(body) // 4
    assert info.value.usage.completion_tokens == len(info.value.raw) // 4


def test_invalid_json_is_repaired_by_a_second_request(server):
    out = chat(server, parse_retries=1).complete(user("[bad-once] q"), schema=Answer)
    assert out.parsed == Answer(answer="[bad-once] q")
    assert server.counts["/api/chat"] == 2
    repair = server.bodies[-1]["messages"]
    assert repair[1] == {"role": "assistant", "content": "I think the answer is yes."}
    assert "not JSON" in repair[2]["content"]


def test_invalid_json_without_retries_is_a_parse_error_with_raw_text(server):
    with pytest.raises(LLMParseError) as info:
        chat(server, parse_retries=0).complete(user("[bad-once] q"), schema=Answer)
    assert info.value.reason == "parse_error" and info.value.raw == "I think the answer is yes."


def test_silent_prompt_truncation_is_detected(server):
    with pytest.raises(ContextOverflowError) as info:
        chat(server).complete(user("[overflow] q"))
    err = info.value
    assert err.reason == "context_overflow"
    assert (err.prompt_tokens, err.context_window) == (2048, 2048)
    assert "2048" in str(err) and "num_ctx" in str(err)


def test_prompt_over_the_window_fails_before_the_call(server):
    model = OllamaChat(model="fake-llm", base_url=server.url, num_ctx=100)
    text = "x" * 400  # ceil(400 / 4) + 4 per message + 3 priming = 107 tokens > 100
    with pytest.raises(ContextOverflowError) as info:
        model.complete(user(text))
    assert (info.value.prompt_tokens, info.value.context_window) == (107, 100)
    assert "107" in str(info.value) and "100" in str(info.value)
    assert server.total == 0


def test_model_not_pulled_names_the_fix(server):
    model = OllamaChat(model="llama3.1:8b", base_url=server.url, retry=RetryPolicy(backoff_s=0.01))
    with pytest.raises(ModelNotFoundError, match=r"ollama pull llama3\.1:8b") as info:
        model.complete(user("q"))
    assert info.value.reason == "model_not_found"
    assert server.counts["/api/chat"] == 1  # 404 is not retried
    with pytest.raises(ModelNotFoundError):
        model.digest()


def test_unreachable_server_names_the_fix_after_retries():
    model = OllamaChat(
        model="m",
        base_url=f"http://127.0.0.1:{free_port()}",
        retry=RetryPolicy(max_retries=2, backoff_s=0.01, backoff_max_s=0.02),
    )
    started = time.perf_counter()
    with pytest.raises(LLMUnreachableError, match="ollama serve") as info:
        model.complete(user("q"))
    assert info.value.reason == "unreachable" and "llm.base_url" in str(info.value)
    assert time.perf_counter() - started < 2.0
    assert model.describe()["digest"] == ""  # describe never raises


def test_timeout_is_retried_then_reported(server):
    model = chat(server, retry=RetryPolicy(timeout_s=0.5, max_retries=1, backoff_s=0.01))
    started = time.perf_counter()
    with pytest.raises(LLMTimeoutError, match="timeout_s=0.5") as info:
        model.complete(user("[slow] q"))
    elapsed = time.perf_counter() - started
    assert info.value.reason == "timeout"
    assert server.counts["/api/chat"] == 2  # 1 + max_retries attempts
    # two timeouts + one 0.01 s backoff; the slack is for a loaded machine, far below the
    # default backoff a wrong policy would add
    assert 2 * 0.5 <= elapsed < 2 * 0.5 + 0.01 + 2.5


def test_describe_reports_digest_and_details_once(server):
    model = chat(server)
    ident = model.describe()
    assert ident["digest"] == "a" * 64 and ident["quantization"] == "Q4_0"
    assert ident["context_length"] == "8192" and ident["num_ctx"] == "2048"
    assert ident["base_url"] == server.url and ident["provider"] == "ollama"
    model.describe()
    assert server.counts["/api/tags"] == 1 and server.counts["/api/show"] == 1


def test_canonical_model_names():
    assert canonical_model_name("llama3.1") == "llama3.1:latest"
    assert canonical_model_name("llama3.1:8b") == "llama3.1:8b"
    assert canonical_model_name("registry:5000/ns/m") == "registry:5000/ns/m:latest"


def test_ollama_embedder_vectors_id_and_batches(server):
    emb = OllamaEmbedder(
        model="fake-embed", base_url=server.url, batch_size=2, query_prefix="query: "
    )
    texts = ["alpha beta", "gamma", "delta epsilon", ""]
    vecs = emb.embed_documents(texts)
    # the fake answers hashing-trick vectors (dim 16), which the embedder L2-normalises again
    np.testing.assert_allclose(vecs, HashEmbedder(dim=16).embed_documents(texts), atol=1e-6)
    assert server.counts["/api/embed"] == 2  # 4 texts, batch_size 2
    np.testing.assert_allclose(
        emb.embed_query("alpha"), HashEmbedder(dim=16).embed_query("query: alpha"), atol=1e-6
    )
    assert emb.dim == 16
    assert emb.id.startswith(f"ollama:fake-embed:{'b' * 12}:trunc1:norm1:p")
    embed_bodies = [b for b in server.bodies if b["path"] == "/api/embed"]
    assert embed_bodies[0]["input"] == ["alpha beta", "gamma"]
    assert all(b["truncate"] is True for b in embed_bodies)


def test_ollama_embedder_model_not_pulled(server):
    emb = OllamaEmbedder(model="bge-m3", base_url=server.url)
    with pytest.raises(ModelNotFoundError, match="ollama pull bge-m3"):
        emb.embed_documents(["x"])
    with pytest.raises(ModelNotFoundError):
        _ = emb.id
