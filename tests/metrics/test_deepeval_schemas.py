"""The bounded copies of DeepEval's schemas the judge is asked with, the verdict count the
adapter derives from the test case and from the previous reply, and token totals that include
failed judge calls."""

from __future__ import annotations

import importlib
import typing
from typing import Any

import pytest
from deepeval.metrics.contextual_precision.schema import Verdicts as PrecisionVerdicts
from deepeval.metrics.faithfulness.schema import Claims
from deepeval.metrics.faithfulness.schema import Verdicts as FaithfulnessVerdicts
from pydantic import BaseModel, ValidationError

from rag_experiments.llm.base import Completion, Message, Usage
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.parsing import LLMParseError, LLMTruncatedError
from rag_experiments.metrics.deepeval_backend import (
    DeepEvalContextPrecision,
    DeepEvalFaithfulness,
)
from rag_experiments.metrics.deepeval_backend.schemas import bounded_schema, to_deepeval
from rag_experiments.metrics.judge import ask_judge
from rag_experiments.records import RagResponse, Sample

SAMPLE = Sample(id="q1", user_input="Who signs AR-1?", reference="The line manager.")
RESPONSE = RagResponse(
    response="The line manager signs AR-1. It is free.",
    retrieved_contexts=["AR-1 is signed by the line manager.", "It is free.", "Other text."],
)


def test_lists_strings_and_verdicts_are_bounded() -> None:
    claims = bounded_schema(Claims, max_items=4, max_chars=50).model_json_schema()
    assert claims["properties"]["claims"]["maxItems"] == 4
    assert claims["properties"]["claims"]["items"]["maxLength"] == 50
    verdicts = bounded_schema(PrecisionVerdicts, max_items=4, max_chars=50, n_verdicts=2)
    js = verdicts.model_json_schema()
    assert js["properties"]["verdicts"]["minItems"] == js["properties"]["verdicts"]["maxItems"] == 2
    item = js["$defs"]["ContextualPrecisionVerdict"]["properties"]
    assert item["verdict"]["enum"] == ["yes", "no"]  # DeepEval's YesNo literal, as strings
    assert item["reason"]["maxLength"] == 50
    faith = bounded_schema(FaithfulnessVerdicts, max_items=4, max_chars=50).model_json_schema()
    assert faith["$defs"]["FaithfulnessVerdict"]["properties"]["verdict"]["enum"] == [
        "yes",
        "no",
        "borderline",
    ]  # DeepEval 4's YesNoBorderline
    with pytest.raises(ValidationError):
        verdicts.model_validate({"verdicts": [{"verdict": "yes", "reason": "r"}]})
    with pytest.raises(ValidationError):
        verdicts.model_validate({"verdicts": [{"verdict": "maybe", "reason": "r"}] * 2})


ALL_SCHEMAS = [
    ("faithfulness", "Verdicts"),
    ("faithfulness", "Truths"),
    ("faithfulness", "Claims"),
    ("answer_relevancy", "Statements"),
    ("answer_relevancy", "Verdicts"),
    ("contextual_precision", "Verdicts"),
    ("contextual_recall", "Verdicts"),
    ("contextual_relevancy", "ContextualRelevancyVerdicts"),
]


def _deepeval_schema(metric: str, name: str) -> type[BaseModel]:
    return getattr(importlib.import_module(f"deepeval.metrics.{metric}.schema"), name)


@pytest.mark.parametrize(("metric", "name"), ALL_SCHEMAS)
def test_every_bounded_schema_has_deepevals_fields_and_strict_types(metric: str, name: str) -> None:
    """Each schema the five metrics ask for: the bounded copy keeps DeepEval's field names
    (its current ones) and refuses what DeepEval's lax model would coerce."""
    theirs = _deepeval_schema(metric, name)
    ours = bounded_schema(theirs, max_items=4, max_chars=50)
    assert list(ours.model_fields) == list(theirs.model_fields)
    (list_field,) = ours.model_fields
    item = typing.get_args(theirs.model_fields[list_field].annotation)[0]
    if item is str:  # claims, truths, statements
        assert ours.model_validate({list_field: ["a"]})
        assert theirs.model_validate({list_field: ["a"]})
        with pytest.raises(ValidationError):
            ours.model_validate({list_field: [5]})
        return
    good = {f: "x" for f in item.model_fields} | {"verdict": "yes"}
    assert to_deepeval(theirs, ours.model_validate({list_field: [good]}))
    for bad in (True, 1, "Yes", "idk", " yes"):  # a boolean, a number, DeepEval 2.9's word …
        with pytest.raises(ValidationError):
            ours.model_validate({list_field: [good | {"verdict": bad}]})
    with pytest.raises(ValidationError):  # a number for a string
        ours.model_validate({list_field: [good | {"reason": 5}]})


def test_strict_types_hold_for_integers_in_any_schema() -> None:
    """An integer field (none of DeepEval's five RAG schemas has one today) takes no boolean
    and no digit string."""

    class Count(BaseModel):
        n: int
        verdict: str

    strict = bounded_schema(Count, max_items=2, max_chars=10)
    assert strict.model_validate({"n": 5, "verdict": "no"}).n == 5
    for bad in (
        {"n": True, "verdict": "no"},
        {"n": "5", "verdict": "no"},
        {"n": 5, "verdict": "true"},
    ):
        with pytest.raises(ValidationError):
            strict.model_validate(bad)
    assert Count.model_validate({"n": "5", "verdict": "x"}).n == 5  # DeepEval's own: lax


def test_reply_is_returned_as_deepevals_own_classes() -> None:
    strict = bounded_schema(PrecisionVerdicts, max_items=4, max_chars=50, n_verdicts=1)
    value = strict.model_validate({"verdicts": [{"verdict": "no", "reason": "r"}]})
    back = to_deepeval(PrecisionVerdicts, value)
    assert type(back) is PrecisionVerdicts
    assert type(back.verdicts[0]).__name__ == "ContextualPrecisionVerdict"
    assert back.verdicts[0].verdict == "no"
    assert type(back.verdicts[0].verdict).__name__ == "Verdict"  # DeepEval 4's enum member


class SchemaRecorder(FakeChat):
    """A fake judge that keeps the JSON schema of every structured call."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.schemas: list[tuple[str, dict[str, Any]]] = []

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        if schema is not None:
            self.schemas.append((schema.__name__, schema.model_json_schema()))
        return super().complete(messages, schema, **options)


def _verdict_bounds(judge: SchemaRecorder) -> tuple[int | None, int | None]:
    (js,) = [js for name, js in judge.schemas if name == "Verdicts"]
    prop = js["properties"]["verdicts"]
    return prop.get("minItems"), prop.get("maxItems")


def test_faithfulness_asks_exactly_one_verdict_per_extracted_claim() -> None:
    judge = SchemaRecorder(
        responses={
            "Truths": {"truths": ["AR-1 is signed by the line manager."]},
            "Claims": {"claims": ["The line manager signs AR-1.", "It is free."]},
            "Verdicts": {"verdicts": [{"verdict": "yes"}, {"verdict": "no"}]},
        }
    )
    (row,) = DeepEvalFaithfulness(judge=judge, max_items=7).evaluate([SAMPLE], [RESPONSE])
    assert row["deepeval.faithfulness"].value == 0.5
    assert _verdict_bounds(judge) == (2, 2)  # from the 2 claims of the previous reply
    claims_js = dict(judge.schemas)["Claims"]
    assert claims_js["properties"]["claims"]["maxItems"] == 7


def test_context_precision_asks_one_verdict_per_context() -> None:
    judge = SchemaRecorder(
        responses={
            "Verdicts": {
                "verdicts": [
                    {"verdict": "yes", "reason": "a"},
                    {"verdict": "no", "reason": "b"},
                    {"verdict": "no", "reason": "c"},
                ]
            }
        }
    )
    (row,) = DeepEvalContextPrecision(judge=judge).evaluate([SAMPLE], [RESPONSE])
    assert row["deepeval.context_precision"].value == 1.0  # relevant at rank 1 only
    assert _verdict_bounds(judge) == (3, 3)


class FailingChat(FakeChat):
    """Every call fails after 40 completion tokens on a 100-token prompt: ``truncated`` when
    ``truncate``, else an unusable reply (``parse_error``)."""

    def __init__(self, truncate: bool) -> None:
        super().__init__()
        self.truncate = truncate

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        self.calls += 1
        error = LLMTruncatedError if self.truncate else LLMParseError
        raise error("unusable", raw='{"claims": ["a", "a"', usage=Usage(100, 40))


def test_failed_judge_calls_count_in_the_token_totals() -> None:
    messages = [{"role": "user", "content": "x"}]
    cut = ask_judge(FailingChat(truncate=True), messages, Claims, prompt_id="t", max_retries=1)
    assert cut.parsed is None and cut.error == "truncated"
    assert cut.calls == 1  # truncation is not re-asked (the same limit would cut it again)
    assert (cut.prompt_tokens, cut.completion_tokens) == (100, 40)
    bad = ask_judge(FailingChat(truncate=False), messages, Claims, prompt_id="t", max_retries=1)
    assert bad.error == "parse_error" and bad.calls == 2
    assert (bad.prompt_tokens, bad.completion_tokens) == (200, 80)
