"""The custom backend's LLM-judged metrics with deterministic fake judges: the worked examples
of the seed documentation, every edge, retries, the judge-call budget and the audit trail."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.base import Completion, Usage
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.parsing import LLMTruncatedError, parse_structured
from rag_experiments.metrics.answer_judge import AnswerJudge
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
from rag_experiments.metrics.audit import collect_audit, to_jsonl
from rag_experiments.metrics.context_precision import ContextPrecision, average_precision
from rag_experiments.metrics.context_recall import ContextRecall
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.keyword_faithfulness import KeywordFaithfulness
from rag_experiments.metrics.refusal import Refusal, is_refusal
from rag_experiments.records import RagResponse, Sample

CONTEXTS = [
    "Accounts are requested with form AR-1.",
    "The Service Desk creates accounts within 2 business days.",
    "Badges are collected at reception.",
    "Passwords expire every 90 days.",
]


def _sample(**kw) -> Sample:
    base = {
        "id": "q1",
        "user_input": "How is an account created?",
        "reference": "The line manager uses form AR-1; the Service Desk needs 2 days.",
    }
    return Sample(**{**base, **kw})


def _resp(**kw) -> RagResponse:
    base = {
        "response": "The manager files form AR-1 and it takes 2 days.",
        "retrieved_contexts": list(CONTEXTS),
    }
    return RagResponse(**{**base, **kw})


def _claims(*contexts: int) -> dict:
    return {"claims": [{"claim": f"claim {i}", "context": c} for i, c in enumerate(contexts)]}


class SequenceJudge:
    """Replies from a list, one per call (the last one repeats); an exception is raised."""

    max_concurrency = 1  # stateful: one call at a time
    slot_affinity = False

    def __init__(self, *replies):
        self.replies = list(replies)
        self.calls = 0
        self.seen: list[list[dict]] = []

    def complete(self, messages, schema=None, **options):
        self.calls += 1
        self.seen.append(list(messages))
        reply = self.replies[min(self.calls - 1, len(self.replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        text = reply if isinstance(reply, str) else json.dumps(reply)
        return Completion(text=text, parsed=parse_structured(text, schema), usage=Usage(10, 5))

    def describe(self):
        return {"provider": "sequence"}


class TableEmbedder:
    """Vectors from a table (unknown texts: a fixed vector); not normalised on purpose."""

    def __init__(self, table, default=(0.0, 0.0, 1.0)):
        self.table = {k: np.asarray(v, dtype=float) for k, v in table.items()}
        self.default = np.asarray(default, dtype=float)

    def embed_query(self, text):
        return self.table.get(text, self.default)


# --- the worked examples -------------------------------------------------------------------


def test_faithfulness_three_of_four_claims_supported():
    judge = FakeChat({"FaithfulnessOutput": _claims(1, 2, 0, 4)})
    metric = Faithfulness(judge=judge)
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["faithfulness"].value == pytest.approx(0.75)
    assert row["faithfulness"].reason is None
    assert judge.calls == 1
    (audit,) = metric.audit()
    assert [c["supported"] for c in audit["claims"]] == [True, True, False, True]
    assert audit["judge_calls"] == 1 and audit["judgement"]["prompt"] == "faithfulness-v1"


def test_faithfulness_counts_a_repeated_claim_once():
    # One supported claim listed five times (case, spacing and punctuation vary) and one
    # unsupported claim (6 = MAX_CLAIMS): 2 distinct claims, 1 supported -> 1/2 (counting
    # copies: 5/6).
    repeated = ["Form AR-1 is needed.", "form AR-1 is needed", "FORM  AR-1 IS NEEDED!"] * 2
    repeated = repeated[:5]
    reply = {
        "claims": [{"claim": c, "context": 1} for c in repeated]
        + [{"claim": "It takes 5 days.", "context": 0}]
    }
    metric = Faithfulness(judge=FakeChat({"FaithfulnessOutput": reply}))
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["faithfulness"].value == pytest.approx(1 / 2)
    (audit,) = metric.audit()
    assert [(c["claim"], c["supported"], c["repeats"]) for c in audit["claims"]] == [
        ("Form AR-1 is needed.", True, 5),
        ("It takes 5 days.", False, 1),
    ]


def test_context_recall_counts_a_repeated_reference_claim_once():
    reply = {
        "claims": [
            {"claim": "The manager uses form AR-1", "context": 1},
            {"claim": "the manager uses form AR-1.", "context": 1},
            {"claim": "The Service Desk needs 2 days", "context": 0},
        ]
    }
    metric = ContextRecall(judge=FakeChat({"FaithfulnessOutput": reply}))
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["context_recall"].value == pytest.approx(1 / 2)  # counting copies: 2/3
    (audit,) = metric.audit()
    assert [c["repeats"] for c in audit["claims"]] == [2, 1]


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [(["yes", "yes", "no", "no"], 1.0), (["no", "no", "yes", "yes"], (1 / 3 + 2 / 4) / 2)],
)
def test_context_precision_average_precision(verdicts, expected):
    judge = FakeChat({"ContextVerdicts": {"verdicts": verdicts}})
    (row,) = ContextPrecision(judge=judge).evaluate([_sample()], [_resp()])
    assert row["context_precision"].value == pytest.approx(expected)
    assert round(row["context_precision"].value, 4) in (1.0, 0.4167)
    assert math.isnan(row["context_utilization"].value)
    assert row["context_utilization"].reason == "has_reference"
    assert judge.calls == 1


def test_average_precision_by_hand():
    assert average_precision([True, False, True]) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision([False, False]) == 0.0
    assert average_precision([]) == 0.0


def test_context_recall_three_of_four_reference_claims():
    judge = FakeChat({"FaithfulnessOutput": _claims(1, 2, 2, 0)})
    (row,) = ContextRecall(judge=judge).evaluate([_sample()], [_resp()])
    assert row["context_recall"].value == pytest.approx(0.75)
    assert judge.calls == 1


# --- the call budget and the audit trail ---------------------------------------------------


SCRIPT = {
    "FaithfulnessOutput": _claims(1, 0),
    "ContextVerdicts": {"verdicts": ["yes", "no", "no", "yes"]},
    "GeneratedQuestions": {"questions": ["a?", "b?", "c?"], "noncommittal": False},
    "AnswerGrades": {"accuracy": 5, "completeness": 3, "relevance": 1, "feedback": "ok"},
}


def test_core_metrics_cost_at_most_four_judge_calls_per_question():
    judge = FakeChat(SCRIPT)
    embedder = TableEmbedder({})
    core = [
        Faithfulness(judge=judge),
        AnswerRelevancy(judge=judge, embedder=embedder),
        ContextPrecision(judge=judge),
        ContextRecall(judge=judge),
    ]
    samples = [_sample(id=f"q{i}") for i in range(5)] + [_sample(id="u", answerable=False)]
    responses = [_resp() for _ in samples]
    for m in core:
        m.evaluate(samples, responses)
    rows, run = collect_audit({m.name: m.audit() for m in core}, samples)
    assert judge.calls == 5 * 4 + 2  # the unanswerable one: faithfulness + relevancy only
    assert run["judge_calls"] == judge.calls
    assert run["judge_calls_per_question_max"] == 4
    assert run["judge_calls_per_question"] == pytest.approx(judge.calls / len(samples))
    assert run["judge_prompt_tokens"] > 0 and run["judge_completion_tokens"] > 0
    assert [r["judge_calls"] for r in rows] == [4] * 5 + [2]
    assert rows[0]["context_precision"]["verdicts"][3] == {"rank": 4, "relevant": True}
    lines = to_jsonl(rows).splitlines()
    assert len(lines) == len(samples) and json.loads(lines[-1])["id"] == "u"


def test_to_jsonl_writes_nan_as_null_and_everything_else_as_json_dumps() -> None:
    nan = float("nan")
    rows = [
        {"id": "a", "score": 0.5, "claims": ("c1", "c2"), "note": "é"},  # no NaN: fast path
        {"id": "b", "score": nan, "nested": {"v": [1.0, nan, (nan,)]}, "big": float("inf")},
    ]
    assert to_jsonl(rows).splitlines() == [
        '{"id": "a", "score": 0.5, "claims": ["c1", "c2"], "note": "é"}',
        '{"id": "b", "score": null, "nested": {"v": [1.0, null, [null]]}, "big": Infinity}',
    ]


def test_prefix_names_the_same_definitions_for_another_backend():
    metric = Faithfulness(judge=FakeChat(SCRIPT), prefix="deepeval.")
    assert [s.name for s in metric.specs()] == ["deepeval.faithfulness"]
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["deepeval.faithfulness"].value == 0.5


def test_metric_without_a_judge_says_how_to_get_one():
    metric = Faithfulness()
    assert [s.name for s in metric.specs()] == ["faithfulness"]
    with pytest.raises(ConfigError, match="needs a judge"):
        metric.evaluate([_sample()], [_resp()])


# --- edges ---------------------------------------------------------------------------------


def test_no_claims_is_nan_not_zero():
    judge = FakeChat({"FaithfulnessOutput": {"claims": []}})
    (row,) = Faithfulness(judge=judge).evaluate([_sample()], [_resp()])
    assert math.isnan(row["faithfulness"].value) and row["faithfulness"].reason == "no_claims"


@pytest.mark.parametrize("contexts", [[], [""], ["  ", "\n"]])
def test_empty_context_scores_zero_flagged_without_a_judge_call(contexts):
    judge = FakeChat(SCRIPT)
    resp = _resp(retrieved_contexts=contexts)
    rows = [
        m.evaluate([_sample()], [resp])[0]
        for m in (
            Faithfulness(judge=judge),
            ContextPrecision(judge=judge),
            ContextRecall(judge=judge),
        )
    ]
    for row, name in zip(
        rows, ("faithfulness", "context_precision", "context_recall"), strict=True
    ):
        assert row[name].value == 0.0 and row[name].reason == "empty_context"
    assert judge.calls == 0


@pytest.mark.parametrize("answer", ["", "   \n"])
def test_empty_answer_relevancy_zero_without_a_judge_call(answer):
    judge = FakeChat(SCRIPT)
    (row,) = AnswerRelevancy(judge=judge, embedder=TableEmbedder({})).evaluate(
        [_sample()], [_resp(response=answer)]
    )
    assert row["answer_relevancy"].value == 0.0
    assert row["answer_relevancy"].reason == "empty_answer"
    assert judge.calls == 0


def test_empty_reference_recall_nan_and_precision_becomes_utilization():
    judge = FakeChat(SCRIPT)
    sample = _sample(reference="")
    (recall,) = ContextRecall(judge=judge).evaluate([sample], [_resp()])
    assert math.isnan(recall["context_recall"].value)
    assert recall["context_recall"].reason == "no_reference"
    assert judge.calls == 0
    metric = ContextPrecision(judge=judge)
    (prec,) = metric.evaluate([sample], [_resp()])
    assert prec["context_precision"].reason == "no_reference"
    assert prec["context_utilization"].value == pytest.approx((1 + 2 / 4) / 2)
    assert metric.audit()[0]["judgement"]["prompt"] == "context_utilization-v1"
    assert judge.calls == 1


def test_verdict_count_mismatch_is_retried_never_misaligned():
    judge = SequenceJudge(
        {"verdicts": ["yes", "no", "yes"]}, {"verdicts": ["no", "no", "yes", "yes"]}
    )
    metric = ContextPrecision(judge=judge, max_retries=1)
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["context_precision"].value == pytest.approx((1 / 3 + 2 / 4) / 2)
    assert judge.calls == 2
    retry = judge.seen[1]
    assert retry[2] == {"role": "assistant", "content": '{"verdicts": ["yes", "no", "yes"]}'}
    assert "invalid" in retry[3]["content"]
    audit = metric.audit()[0]
    assert audit["judge_calls"] == 2 and len(audit["judgement"]["raw"]) == 2


def test_verdict_count_mismatch_every_time_is_a_parse_error():
    judge = SequenceJudge({"verdicts": ["yes", "no", "yes"]})
    (row,) = ContextPrecision(judge=judge, max_retries=2).evaluate([_sample()], [_resp()])
    assert math.isnan(row["context_precision"].value)
    assert row["context_precision"].reason == "parse_error"
    assert judge.calls == 3


@pytest.mark.parametrize(
    "reply",
    [
        {"verdicts": ["yes", "maybe", "no", "no"]},
        {"verdicts": ["Yes", "no", "no", "no"]},
        {"verdicts": [1, 0, 0, 0]},
        "not json at all",
    ],
)
def test_invalid_verdict_value_is_a_parse_error_not_a_score(reply):
    judge = SequenceJudge(reply)
    (row,) = ContextPrecision(judge=judge, max_retries=0).evaluate([_sample()], [_resp()])
    assert math.isnan(row["context_precision"].value)
    assert row["context_precision"].reason == "parse_error"


@pytest.mark.parametrize("context", [5, -1])
def test_context_number_out_of_range_is_a_parse_error(context):
    judge = SequenceJudge(_claims(1, context))
    (row,) = Faithfulness(judge=judge, max_retries=1).evaluate([_sample()], [_resp()])
    assert row["faithfulness"].reason == "parse_error" and judge.calls == 2


def test_refusal_is_left_out_of_faithfulness():
    judge = FakeChat(SCRIPT)
    (row,) = Faithfulness(judge=judge).evaluate([_sample()], [_resp(response="I don't know.")])
    assert math.isnan(row["faithfulness"].value) and row["faithfulness"].reason == "refusal"
    assert judge.calls == 0


@pytest.mark.parametrize(
    ("error", "reason", "calls"),
    [
        (LLMError("slow", reason="timeout"), "timeout", 1),
        (LLMTruncatedError("cut", raw='{"claims": [{"cla'), "truncated", 1),
        (LLMError("no script", reason="parse_error"), "parse_error", 2),
    ],
)
def test_judge_errors_become_nan_with_their_reason(error, reason, calls):
    judge = SequenceJudge(error)
    metric = Faithfulness(judge=judge, max_retries=1)
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert math.isnan(row["faithfulness"].value) and row["faithfulness"].reason == reason
    assert judge.calls == calls
    assert metric.audit()[0]["judgement"]["error"] == reason


def test_target_error_and_unanswerable():
    judge = FakeChat(SCRIPT)
    metrics = [
        Faithfulness(judge=judge),
        ContextPrecision(judge=judge),
        ContextRecall(judge=judge),
        AnswerRelevancy(judge=judge, embedder=TableEmbedder({})),
        AnswerJudge(judge=judge),
        KeywordFaithfulness(),
        Refusal(),
    ]
    failed = RagResponse(error="timeout")
    for m in metrics:
        (row,) = m.evaluate([_sample()], [failed])
        assert all(math.isnan(v.value) and v.reason == "target_error" for v in row.values())
    assert judge.calls == 0
    unanswerable = _sample(answerable=False)
    (prec,) = ContextPrecision(judge=judge).evaluate([unanswerable], [_resp()])
    (rec,) = ContextRecall(judge=judge).evaluate([unanswerable], [_resp()])
    assert prec["context_precision"].reason == rec["context_recall"].reason == "unanswerable"
    assert prec["context_utilization"].reason == "has_reference"  # as on every other row
    (faith,) = Faithfulness(judge=judge).evaluate([unanswerable], [_resp()])
    assert faith["faithfulness"].value == 0.5  # an answer to it must still be grounded


def test_every_value_is_in_range_or_nan_with_a_reason():
    judge = FakeChat(SCRIPT)
    metrics = [
        Faithfulness(judge=judge),
        ContextPrecision(judge=judge),
        ContextRecall(judge=judge),
        AnswerRelevancy(judge=judge, embedder=TableEmbedder({})),
        AnswerJudge(judge=judge),
        KeywordFaithfulness(),
        Refusal(),
    ]
    samples = [
        _sample(id="a"),
        _sample(id="b", reference=""),
        _sample(id="c", answerable=False),
        _sample(id="d"),
        _sample(id="e"),
        _sample(id="f"),
    ]
    responses = [
        _resp(),
        _resp(),
        _resp(response="The documents do not say."),
        _resp(response=""),
        _resp(retrieved_contexts=[]),
        RagResponse(error="timeout"),
    ]
    for m in metrics:
        specs = {s.name: s for s in m.specs()}
        for row in m.evaluate(samples, responses):
            assert set(row) == set(specs)
            for name, v in row.items():
                if v.is_valid:
                    assert specs[name].low <= v.value <= specs[name].high, (name, v)
                else:
                    assert v.reason, name


# --- answer relevancy, answer judge, keyword faithfulness, refusal ---------------------------


def test_answer_relevancy_mean_clipped_cosine():
    question = _sample().user_input
    embedder = TableEmbedder(
        {
            question: [1.0, 0.0, 0.0],
            "a?": [1.0, 0.0, 0.0],
            "b?": [1.0, 1.0, 0.0],
            "c?": [-1.0, 0.0, 0.0],
        }
    )
    judge = FakeChat(SCRIPT)
    metric = AnswerRelevancy(judge=judge, embedder=embedder)
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["answer_relevancy"].value == pytest.approx((1 + 1 / math.sqrt(2) + 0) / 3)
    assert [q["cosine"] for q in metric.audit()[0]["questions"]] == pytest.approx(
        [1.0, 1 / math.sqrt(2), 0.0], abs=1e-6
    )


def test_answer_relevancy_noncommittal_and_refusal_score_zero():
    script = {"GeneratedQuestions": {"questions": ["a?", "b?", "c?"], "noncommittal": True}}
    judge = FakeChat(script)
    metric = AnswerRelevancy(judge=judge, embedder=TableEmbedder({}))
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["answer_relevancy"].value == 0.0 and row["answer_relevancy"].reason == "noncommittal"
    (row,) = metric.evaluate([_sample()], [_resp(response="I do not know.")])
    assert row["answer_relevancy"].value == 0.0 and row["answer_relevancy"].reason == "refusal"
    assert judge.calls == 1


def test_answer_relevancy_wrong_question_count_is_a_parse_error():
    judge = SequenceJudge({"questions": ["a?", "b?"], "noncommittal": False})
    (row,) = AnswerRelevancy(judge=judge, embedder=TableEmbedder({}), max_retries=0).evaluate(
        [_sample()], [_resp()]
    )
    assert row["answer_relevancy"].reason == "parse_error"


def test_answer_judge_raw_and_normalised_with_feedback_in_the_audit():
    metric = AnswerJudge(judge=FakeChat(SCRIPT))
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["answer_judge.accuracy"].value == 1.0 and row["answer_judge.accuracy_raw"].value == 5
    assert row["answer_judge.completeness"].value == 0.5
    assert (
        row["answer_judge.relevance"].value == 0.0 and row["answer_judge.relevance_raw"].value == 1
    )
    assert metric.audit()[0]["feedback"] == "ok"
    raw_spec = {s.name: s for s in metric.specs()}["answer_judge.accuracy_raw"]
    assert (raw_spec.low, raw_spec.high) == (1.0, 5.0)


def test_answer_judge_edges():
    judge = SequenceJudge({"accuracy": 6, "completeness": 3, "relevance": 3})
    (row,) = AnswerJudge(judge=judge, max_retries=0).evaluate([_sample()], [_resp()])
    assert row["answer_judge.accuracy"].reason == "parse_error"
    (row,) = AnswerJudge(judge=judge).evaluate([_sample(reference="")], [_resp()])
    assert row["answer_judge.accuracy"].reason == "no_reference"
    (row,) = AnswerJudge(judge=judge).evaluate([_sample()], [_resp(response=" ")])
    assert row["answer_judge.accuracy"].value == 0.0 and row["answer_judge.accuracy_raw"].value == 1
    assert row["answer_judge.accuracy"].reason == "empty_answer"
    assert judge.calls == 1


def test_keyword_faithfulness_by_hand():
    # content words: manager, files, form, ar, 1, takes, 2, days -> "ar" is 2 letters (dropped),
    # "1"/"2" hold digits (kept); "the", "and", "it" are stop words.
    resp = _resp(response="The manager files form AR-1 and it takes 2 days.")
    (row,) = KeywordFaithfulness().evaluate([_sample()], [resp])
    # in contexts: form, 1, 2, days (manager, files, takes are not)
    assert row["keyword_faithfulness"].value == pytest.approx(4 / 7)
    (row,) = KeywordFaithfulness().evaluate([_sample()], [_resp(retrieved_contexts=[""])])
    assert row["keyword_faithfulness"].value == 0.0
    assert row["keyword_faithfulness"].reason == "empty_context"
    (row,) = KeywordFaithfulness().evaluate([_sample()], [_resp(response="and the it")])
    assert row["keyword_faithfulness"].reason == "no_content_words"


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("I don't know.", True),
        ("I don\u2019t know", True),
        ("The documents do not say: none.", True),
        ("The context does not mention social media.", True),
        ("Sorry, I cannot answer that.", True),
        ("There is not enough information in the passages.", True),
        ("Form AR-1. I don't know who signs it.", False),
        ("Use form AR-1.", False),
        ("", False),
    ],
)
def test_refusal_patterns(text, refused):
    assert is_refusal(text) is refused


def test_refusal_rates_split_by_answerability():
    samples = [
        _sample(id="a"),
        _sample(id="b"),
        _sample(id="u1", answerable=False),
        _sample(id="u2", answerable=False),
    ]
    responses = [_resp(response="I don't know."), _resp(), _resp(response="I don't know."), _resp()]
    rows = Refusal().evaluate(samples, responses)
    assert [r["refusal"].value for r in rows] == [1, 0, 1, 0]
    assert [r["false_refusal_rate"].value for r in rows[:2]] == [1, 0]
    assert rows[2]["false_refusal_rate"].reason == "unanswerable"
    assert [r["correct_refusal_rate"].value for r in rows[2:]] == [1, 0]
    assert rows[0]["correct_refusal_rate"].reason == "answerable"
    with pytest.raises(ConfigError, match="regular expression"):
        Refusal(patterns=["(unclosed"])


# --- question-by-question scoring ----------------------------------------------------------


class RecordingJudge(FakeChat):
    """FakeChat that records the schema of every call, in order (one call at a time)."""

    def __init__(self, responses):
        super().__init__(responses, max_concurrency=1)
        self.order: list[str] = []

    def complete(self, messages, schema=None, **options):
        self.order.append(schema.__name__)
        return super().complete(messages, schema, **options)


def test_interleaved_scoring_gives_the_same_values_with_context_prompts_adjacent():
    from rag_experiments.metrics.scheduler import judge_rows

    samples = [_sample(id="a"), _sample(id="b")]
    responses = [_resp(), _resp()]

    def suite(judge):
        return [
            AnswerRelevancy(judge=judge, embedder=TableEmbedder({})),
            Faithfulness(judge=judge),
            AnswerJudge(judge=judge),
            ContextPrecision(judge=judge),
            ContextRecall(judge=judge),
        ]

    separate = [m.evaluate(samples, responses) for m in suite(FakeChat(SCRIPT))]
    judge = RecordingJudge(SCRIPT)
    metrics = suite(judge)
    together = judge_rows(metrics, samples, responses, progress=False)
    assert [together[id(m)].values for m in metrics] == separate
    # per question: the three prompts that start with the contexts, then the others
    per_question = [
        "FaithfulnessOutput",
        "ContextVerdicts",
        "FaithfulnessOutput",
        "GeneratedQuestions",
        "AnswerGrades",
    ]
    assert judge.order == per_question * 2
    assert len(together[id(metrics[1])].audit) == 2


def test_interleaved_scoring_isolates_a_failing_metric():
    from rag_experiments.metrics.scheduler import judge_rows

    ok, broken = Faithfulness(judge=FakeChat(SCRIPT)), ContextRecall()  # no judge
    out = judge_rows([broken, ok], [_sample()], [_resp()], progress=False)
    assert isinstance(out[id(broken)].error, ConfigError)
    assert out[id(ok)].values[0]["faithfulness"].value == 0.5
