"""The error classes declare the fields code reads (``reason``, ``raw``, ``usage``), and every
reader takes them by plain attribute access: the values set by hand on an error arrive in the
judge's audit record, a batch slot and a baseline response; no ``getattr``/``hasattr`` probe of
a caught exception remains in the package."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rag_experiments.common.usage import Usage
from rag_experiments.errors import ConfigError, LLMError, RagExpError, TargetError
from rag_experiments.llm.base import Completion
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.errors import LLMTimeoutError
from rag_experiments.llm.parsing import LLMParseError, LLMTruncatedError
from rag_experiments.metrics.judge import ask_judge
from rag_experiments.records import Sample
from rag_experiments.retrieval.retriever import RetrievalResult
from rag_experiments.targets.baseline import BaselineTarget

ROOT = Path(__file__).resolve().parents[1]


class Verdict(BaseModel):
    verdict: int


class Raising:
    """A chat model whose every call raises ``error`` (counts its calls)."""

    max_concurrency = 1

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def complete(self, messages: Any, schema: Any = None, **options: Any) -> Completion:
        self.calls += 1
        raise self.error


# --- the declarations ------------------------------------------------------------------------
def test_fields_have_defaults_on_every_class() -> None:
    plain = LLMError("boom")
    assert (plain.reason, plain.raw, plain.usage) == ("llm_error", None, None)
    assert LLMTimeoutError("slow").reason == "timeout"
    assert LLMError("x", reason="http_error").reason == "http_error"
    assert ConfigError("bad key").reason is None  # a class that names no reason
    assert TargetError("http_500", "server error").reason == "http_500"
    parse = LLMTruncatedError("cut", raw='{"verdict": ', usage=Usage(11, 4))
    assert (parse.reason, parse.raw, parse.usage) == ("truncated", '{"verdict": ', Usage(11, 4))


# --- reader 1: the judge's audit record ------------------------------------------------------
def test_judge_record_takes_raw_and_usage_of_each_failed_call() -> None:
    judge = Raising(LLMParseError("not JSON", raw="I think yes", usage=Usage(7, 3)))
    record = ask_judge(
        judge, [{"role": "user", "content": "q"}], Verdict, prompt_id="p", max_retries=1
    )
    # two calls (1 + one retry of parse_error), each failing with 7 prompt + 3 completion tokens
    assert judge.calls == 2 and record.calls == 2
    assert record.raw == ["I think yes", "I think yes"]
    assert (record.prompt_tokens, record.completion_tokens) == (14, 6)
    assert (record.error, record.error_message) == ("parse_error", "not JSON")
    assert record.parsed is None


def test_judge_record_of_a_failure_without_reply_keeps_no_raw() -> None:
    record = ask_judge(
        Raising(LLMTimeoutError("no answer in 5 s")), [], Verdict, prompt_id="p", max_retries=1
    )
    # timeout is not re-asked: one call, no raw text, no tokens
    assert (record.calls, record.raw, record.prompt_tokens) == (1, [], 0)
    assert record.error == "timeout"


# --- reader 2: a batch slot ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (LLMParseError("bad", raw="x", usage=Usage(2, 1)), "parse_error"),
        (TargetError("http_500", "server error"), "http_500"),  # declared reason kept
        (ConfigError("model file missing"), "llm_error"),  # no reason: the batch's own
        (ValueError("a bug"), "unexpected_error"),  # a foreign exception
    ],
)
def test_batch_slot_carries_the_declared_reason(error: BaseException, reason: str) -> None:
    [slot] = complete_many(Raising(error), [ChatRequest([])], progress=False)
    assert isinstance(slot, LLMError)
    assert slot.reason == reason
    if isinstance(error, LLMError):
        assert slot is error and (slot.raw, slot.usage) == ("x", Usage(2, 1))
    else:
        assert slot.__cause__ is error


# --- reader 3: a baseline response -----------------------------------------------------------
class OneHit:
    def retrieve(self, question: str) -> RetrievalResult:
        return RetrievalResult(contexts=["Paris is in France."], chunk_ids=["c1"], doc_ids=["d1"])


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (LLMTimeoutError("no answer within timeout_s=5"), "timeout"),
        (ConfigError("model file missing"), "generation_failed"),
    ],
)
def test_baseline_response_error_is_the_declared_reason(error: RagExpError, reason: str) -> None:
    unused: Any = None
    target = BaselineTarget(unused, unused, OneHit(), unused, Raising(error))  # type: ignore[arg-type]
    response = target.answer(Sample(id="q1", user_input="Where is Paris?"))
    assert (response.error, response.error_message) == (reason, str(error))
    assert response.retrieved_contexts == ["Paris is in France."]


# --- no probes -------------------------------------------------------------------------------
def exception_probes(source: str, filename: str = "<src>") -> list[str]:
    """``file:line`` of every ``getattr``/``hasattr`` whose first argument is the name bound by
    an enclosing ``except … as <name>``."""
    found = []
    for handler in ast.walk(ast.parse(source)):
        if not (isinstance(handler, ast.ExceptHandler) and handler.name):
            continue
        for node in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr"}
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id == handler.name
            ):
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_checker_finds_a_probe() -> None:
    source = (
        "try:\n    f()\nexcept Exception as exc:\n    r = getattr(exc, 'reason', None)\n"
        "    ok = hasattr(exc, 'raw')\n    n = getattr(other, 'x', 0)\n"
    )
    assert exception_probes(source) == [
        "<src>:4: getattr(exc, 'reason', None)",
        "<src>:5: hasattr(exc, 'raw')",
    ]


def test_no_exception_is_probed_with_getattr() -> None:
    found = [
        probe
        for path in sorted((ROOT / "rag_experiments").rglob("*.py"))
        for probe in exception_probes(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not found, (
        "a caught exception is probed; declare the field on its error class "
        "(rag_experiments/errors.py) and catch that class:\n" + "\n".join(found)
    )
