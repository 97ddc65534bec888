"""Judge replies are parsed strictly: the reply's last JSON object is graded (and the audit says
which one when there were several), and grades, verdicts and counts have strict types in every
output model of the custom backend and of the generator."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from rag_experiments.generate.prompts import AnswerCheck, QAPair, UnanswerableQuestion
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.parsing import (
    LLMParseError,
    LLMTruncatedError,
    json_objects,
    parse_reply,
    parse_structured,
)
from rag_experiments.metrics.answer_judge import AnswerJudge
from rag_experiments.metrics.prompts import (
    answer_judge,
    answer_relevancy,
    claim_check,
    context_precision,
    rubric,
)
from rag_experiments.metrics.prompts import faithfulness as faith
from rag_experiments.records import RagResponse, Sample

ECHO_THEN_OWN = """Here is the format you asked for:
```json
{"accuracy": 5, "completeness": 5, "relevance": 5, "feedback": "Perfect answer."}
```
And my grading of this answer:
```json
{"accuracy": 2, "completeness": 2, "relevance": 3, "feedback": "It misses form {AR-1}."}
```"""

BOOLEANS = '{"accuracy": true, "completeness": true, "relevance": true}'

SAMPLE = Sample(
    id="q1",
    user_input="How are accounts requested?",
    reference="With form AR-1, signed by the manager.",
)
RESPONSE = RagResponse(response="By email to the service desk.", retrieved_contexts=["c"])


def _judge(reply: str, max_retries: int = 1) -> tuple[dict[str, Any], dict[str, Any], FakeChat]:
    chat = FakeChat(responses={"AnswerGrades": reply})
    metric = AnswerJudge(judge=chat, max_retries=max_retries)
    values = metric.evaluate([SAMPLE], [RESPONSE])[0]
    return values, metric.audit()[0], chat


def test_answer_judge_grades_the_models_own_block_not_the_echoed_example() -> None:
    values, audit, _ = _judge(ECHO_THEN_OWN)
    raw = {
        c: values[f"answer_judge.{c}_raw"].value for c in ("accuracy", "completeness", "relevance")
    }
    assert raw == {"accuracy": 2.0, "completeness": 2.0, "relevance": 3.0}
    assert values["answer_judge.accuracy"].value == pytest.approx((2 - 1) / 4)
    assert values["answer_judge.relevance"].value == pytest.approx((3 - 1) / 4)
    assert audit["judgement"]["picked"] == "picked candidate 2 of 2"
    assert audit["feedback"] == "It misses form {AR-1}."


def test_answer_judge_booleans_for_grades_are_a_parse_error() -> None:
    values, audit, chat = _judge(BOOLEANS)
    for column, value in values.items():
        assert math.isnan(value.value) and value.reason == "parse_error", column
    assert chat.calls == 2  # asked again once with the error, then given up
    assert "accuracy" in audit["judgement"]["error_message"]
    assert "picked" not in audit["judgement"]


def test_a_single_object_has_no_pick_note() -> None:
    _, audit, _ = _judge('{"accuracy": 4, "completeness": 3, "relevance": 5, "feedback": "ok"}')
    assert audit["scores"] == {"accuracy": 4, "completeness": 3, "relevance": 5}
    assert "picked" not in audit["judgement"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the model's own object does not validate: never fall back to the echoed example
        (
            '{"accuracy": 5, "completeness": 5, "relevance": 5}\n' + BOOLEANS,
            "last of 2 JSON objects",
        ),
        # its own object is not JSON
        ('{"accuracy": 5, "completeness": 5, "relevance": 5}\nMine: {accuracy: 2}', "not JSON"),
        # its own object never closes
        (
            '{"accuracy": 5, "completeness": 5, "relevance": 5}\nMine: {"accuracy": 2, ',
            "never closed",
        ),
        ("I cannot grade this.", "no JSON object"),
    ],
)
def test_the_last_object_must_be_complete_and_valid(text: str, message: str) -> None:
    with pytest.raises(LLMParseError, match=message) as info:
        parse_structured(text, answer_judge.AnswerGrades)
    assert info.value.reason == "parse_error" and info.value.raw == text


def test_an_unfinished_last_object_cut_by_the_token_limit_is_truncated() -> None:
    text = '{"accuracy": 5, "completeness": 5, "relevance": 5}\n{"accuracy": 2, "compl'
    with pytest.raises(LLMTruncatedError):
        parse_structured(text, answer_judge.AnswerGrades, finish_reason="length")


def test_objects_are_found_around_prose_braces_and_braces_in_strings() -> None:
    text = 'Rubric {see below}. {"a": "x}{", "b": [1, {"c": 2}]} then {"a": "y\\"}"}'
    spans, unclosed = json_objects(text)
    assert [text[s:e] for s, e in spans] == [
        "{see below}",
        '{"a": "x}{", "b": [1, {"c": 2}]}',
        '{"a": "y\\"}"}',
    ]
    assert unclosed is None

    class A(BaseModel):
        a: str

    parsed = parse_reply(text, A)
    assert parsed.value.a == 'y"}' and (parsed.candidate, parsed.candidates) == (2, 2)
    assert parsed.note == "picked candidate 2 of 2"  # the prose braces are no candidate


def _refused(model: type[BaseModel], data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(data)


def test_every_custom_judge_schema_refuses_loose_types() -> None:
    grades = {"accuracy": 4, "completeness": 3, "relevance": 5, "feedback": "ok"}
    assert answer_judge.AnswerGrades.model_validate(grades).accuracy == 4
    for bad in (True, "4", 4.0):
        _refused(answer_judge.AnswerGrades, {**grades, "accuracy": bad})

    claims = faith.output_model(3)  # faithfulness; context recall uses output_model(n, 1)
    good = {"claims": [{"claim": "A fact.", "context": 1}]}
    assert claims.model_validate(good).claims[0].context == 1
    for schema in (claims, faith.output_model(3, 1)):
        for bad in (True, False, "1", 1.0):
            _refused(schema, {"claims": [{"claim": "A fact.", "context": bad}]})
        _refused(schema, {"claims": [{"claim": 7, "context": 1}]})

    questions = answer_relevancy.output_model(2)
    good = {"questions": ["Who?", "When?"], "noncommittal": False}
    assert questions.model_validate(good).noncommittal is False
    for bad in ("false", 0, "no"):
        _refused(questions, {**good, "noncommittal": bad})

    verdicts = context_precision.output_model(2)
    assert verdicts.model_validate({"verdicts": ["yes", "no"]}).verdicts == ["yes", "no"]
    for bad in (True, 1, "YES"):
        _refused(verdicts, {"verdicts": ["yes", bad]})


def test_generator_schemas_refuse_loose_types() -> None:
    assert AnswerCheck.model_validate({"answered": True}).answered is True
    for bad in ("true", 1, "yes"):
        _refused(AnswerCheck, {"answered": bad})
    _refused(QAPair, {"question": 5, "answer": "x"})
    _refused(UnanswerableQuestion, {"question": ["a list"]})


def test_fake_judge_script_is_strictly_valid() -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from rag_experiments.locations import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["judge=fake"])
    GlobalHydra.instance().clear()
    scripted = OmegaConf.to_container(cfg.judge.responses)
    assert isinstance(scripted, dict)
    schemas = {
        "FaithfulnessOutput": faith.output_model(5),
        "ContextVerdicts": context_precision.output_model(5),
        "GeneratedQuestions": answer_relevancy.output_model(3),
        "AnswerGrades": answer_judge.AnswerGrades,
        "ClaimList": claim_check.ClaimList,
        "ClaimSupport": claim_check.support_model(2, 5),
        "RubricGrade": rubric.output_model(1, 5),
    }
    chat = FakeChat(responses=scripted)
    for name, schema in schemas.items():
        assert set(scripted) == set(schemas)
        assert isinstance(
            chat.complete([{"role": "user", "content": "x"}], schema).parsed, schema
        ), name
