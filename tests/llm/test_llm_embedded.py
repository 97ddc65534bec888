"""The embedded GGUF model (llama-cpp-python + bundled SmolLM2-135M) and tolerant parsing."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from rag_experiments.common.http import RetryPolicy
from rag_experiments.llm.embedded import EmbeddedChat, LLMTimeoutError, bundled_model_path
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.parsing import LLMParseError, LLMTruncatedError, parse_structured


class Verdicts(BaseModel):
    verdicts: list[int] = Field(max_length=5)


@pytest.mark.parametrize(
    "text",
    [
        '{"verdicts": [1, 0]}',
        '```json\n{"verdicts": [1, 0]}\n```',
        'Sure! Here it is: {"verdicts": [1, 0]} Hope this helps.',
        '{"verdicts": [1, 0,],}',
        '{"verdicts": [1,\n 0], "note": "line one\nline two"}',  # raw newline in a string
    ],
)
def test_tolerant_parsing_repairs_fences_prose_and_trailing_commas(text):
    assert parse_structured(text, Verdicts).verdicts == [1, 0]


def test_truncated_output_is_its_own_error():
    with pytest.raises(LLMTruncatedError) as info:
        parse_structured('{"verdicts": [1, 0', Verdicts, finish_reason="length")
    assert info.value.reason == "truncated" and info.value.raw == '{"verdicts": [1, 0'


def test_wrong_shape_is_a_parse_error_with_raw_text():
    with pytest.raises(LLMParseError, match="verdicts") as info:
        parse_structured('{"verdicts": [1, 2, 3, 4, 5, 6]}', Verdicts)
    assert info.value.reason == "parse_error"


def test_fake_chat_answers_from_first_context():
    fake = FakeChat()
    msg = [
        {
            "role": "user",
            "content": "Context passages:\n\n[1] Badges expire yearly. More.\n\nQuestion: x?",
        }
    ]
    assert fake.complete(msg).text == "Badges expire yearly."
    assert fake.calls == 1


@pytest.mark.llm
@pytest.mark.slow
def test_embedded_model_generates_and_constrains_json():
    assert bundled_model_path().stat().st_size > 10_000_000
    chat = EmbeddedChat(n_ctx=1024, max_tokens=32)
    out = chat.complete([{"role": "user", "content": "Name the capital of France."}])
    assert out.text.strip() and out.usage.completion_tokens > 0 and out.usage.prompt_tokens > 0
    again = chat.complete([{"role": "user", "content": "Name the capital of France."}])
    assert again.text == out.text  # temperature 0 + fixed seed: deterministic

    class Answer(BaseModel):
        answer: str = Field(max_length=200)

    structured = chat.complete(
        [{"role": "user", "content": "Reply in JSON with the key answer: the capital of France."}],
        schema=Answer,
        max_tokens=64,
    )
    assert isinstance(structured.parsed, Answer)
    ident = chat.describe()
    assert ident["provider"] == "embedded" and len(ident["digest"]) == 16


@pytest.mark.llm
@pytest.mark.slow
def test_embedded_model_times_out():
    chat = EmbeddedChat(n_ctx=512, max_tokens=400, retry=RetryPolicy(timeout_s=0.01))
    with pytest.raises(LLMTimeoutError) as info:
        chat.complete([{"role": "user", "content": "Write a long story about rivers."}])
    assert info.value.reason == "timeout"


@pytest.mark.parametrize(
    ("n_threads", "cores", "expected"), [(3, 8, 3), (None, 8, 4), (None, 2, 1)]
)
def test_embedded_model_evaluates_prompts_on_its_own_threads(
    tmp_path, monkeypatch, n_threads, cores, expected
):
    """The generator and the judge run at once: each evaluates prompts on its n_threads (None:
    half the cores), not on llama.cpp's default of every core."""
    llama_cpp = pytest.importorskip("llama_cpp")
    seen: dict = {}
    monkeypatch.setattr(llama_cpp, "Llama", lambda **kw: seen.update(kw) or object())
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    EmbeddedChat(model_path=str(gguf), n_threads=n_threads)._load()
    assert seen["n_threads"] == n_threads and seen["n_threads_batch"] == expected
