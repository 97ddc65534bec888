"""The DeepEval backend (``metrics=deepeval``) with a deterministic fake judge: DeepEval's own
formulas and edges, parity with the custom backend where the definitions agree, the
documented difference where they do not, per-row errors and timeouts, the judge audit, and
no network."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import Completion, Message
from rag_experiments.llm.fake import FakeChat
from rag_experiments.metrics.aggregate import aggregate
from rag_experiments.metrics.audit import collect_audit
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.deepeval_backend import (
    DeepEvalAnswerRelevancy,
    DeepEvalContextPrecision,
    DeepEvalContextRecall,
    DeepEvalContextRelevancy,
    DeepEvalFaithfulness,
)
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.records import RagResponse, Sample

CONTEXTS = [
    "The form AR-1 is signed by the line manager.",
    "Accounts expire after 90 days.",
    "Passwords have 12 characters.",
]
SAMPLE = Sample(
    id="q1",
    user_input="How is an account requested?",
    reference="The line manager signs form AR-1.",
    question_type="procedural",
)
RESPONSE = RagResponse(
    response="The line manager signs AR-1. It takes a day. It is free.", retrieved_contexts=CONTEXTS
)


def _verdicts(*words: str) -> dict[str, Any]:
    return {"verdicts": [{"verdict": w, "reason": f"scripted {w}"} for w in words]}


def _faithfulness_judge(claims: int, *verdicts: str) -> FakeChat:
    return FakeChat(
        responses={
            "Truths": {"truths": ["AR-1 is signed by the line manager."]},
            "Claims": {"claims": [f"claim {i}" for i in range(claims)]},
            "Verdicts": _verdicts(*verdicts),
        }
    )


def _one(metric: Any, sample: Sample = SAMPLE, resp: RagResponse = RESPONSE):
    (row,) = metric.evaluate([sample], [resp])
    (value,) = row.values()
    return value


# --- DeepEval's formulas and edges, pinned ---------------------------------------------------
def test_faithfulness_counts_borderline_as_faithful_and_penalize_option_does_not() -> None:
    judge = _faithfulness_judge(3, "yes", "borderline", "no")
    assert _one(DeepEvalFaithfulness(judge=judge)).value == pytest.approx(2 / 3)
    assert judge.calls == 3  # truths, claims, verdicts (include_reason off)
    penalized = DeepEvalFaithfulness(
        judge=_faithfulness_judge(3, "yes", "borderline", "no"), penalize_ambiguous_claims=True
    )
    assert _one(penalized).value == pytest.approx(1 / 3)
    strict = DeepEvalFaithfulness(
        judge=_faithfulness_judge(3, "yes", "borderline", "no"), strict_mode=True
    )
    assert _one(strict).value == 0.0  # strict: threshold 1, 2/3 < 1 → 0


def test_include_reason_costs_one_more_call_and_is_audited() -> None:
    judge = _faithfulness_judge(2, "yes", "no")
    judge.responses["FaithfulnessScoreReason"] = {"reason": "One claim is contradicted."}
    metric = DeepEvalFaithfulness(judge=judge, include_reason=True)
    assert _one(metric).value == 0.5
    assert judge.calls == 4
    assert metric.audit()[0]["reason"] == "One claim is contradicted."


def test_no_claims_is_one_in_deepeval_and_nan_in_custom() -> None:
    judge = FakeChat(
        responses={
            "Truths": {"truths": ["x"]},
            "Claims": {"claims": []},
            "FaithfulnessOutput": {"claims": []},
        }
    )
    value = _one(DeepEvalFaithfulness(judge=judge))
    assert (value.value, value.reason) == (1.0, None)
    assert judge.calls == 2  # no verdict call without claims
    custom = _one(Faithfulness(judge=judge))
    assert math.isnan(custom.value) and custom.reason == "no_claims"


def test_answer_relevancy_statements_and_no_statements() -> None:
    judge = FakeChat(
        responses={
            "Statements": {"statements": ["a", "b", "c", "d"]},
            "Verdicts": _verdicts("yes", "borderline", "no", "yes"),
        }
    )
    assert _one(DeepEvalAnswerRelevancy(judge=judge)).value == 0.75  # borderline counts as relevant
    empty = FakeChat(responses={"Statements": {"statements": []}})
    assert _one(DeepEvalAnswerRelevancy(judge=empty)).value == 1.0  # DeepEval: none → 1
    assert empty.calls == 1


def test_context_recall_and_relevancy_edges() -> None:
    recall = FakeChat(responses={"Verdicts": _verdicts("yes", "no")})
    assert _one(DeepEvalContextRecall(judge=recall)).value == 0.5
    none = FakeChat(responses={"Verdicts": {"verdicts": []}})
    assert _one(DeepEvalContextRecall(judge=none)).value == 0.0  # DeepEval: no sentence → 0
    rel = FakeChat(
        responses={
            "ContextualRelevancyVerdicts": {
                "verdicts": [
                    {"statement": "s1", "verdict": "yes"},
                    {"statement": "s2", "verdict": "no"},
                ]
            }
        }
    )
    assert _one(DeepEvalContextRelevancy(judge=rel)).value == 0.5  # 3 contexts × (1 of 2)
    assert rel.calls == 3  # one call per context
    no_ctx = FakeChat()
    value = _one(
        DeepEvalContextRelevancy(judge=no_ctx),
        resp=RagResponse(response="x", retrieved_contexts=[]),
    )
    assert (value.value, value.reason, no_ctx.calls) == (0.0, "empty_context", 0)  # our guard


# --- parity with the custom backend ----------------------------------------------------------
def test_faithfulness_parity_and_the_documented_difference() -> None:
    """Claims A (stated in context 1), B (stated in context 2), C (contradicted): both backends
    give 2/3. Replace B by an unverifiable claim (no context states or contradicts it): custom
    says context 0 (unsupported) → 1/3; DeepEval says "borderline" (faithful) → 2/3, and 1/3
    with penalize_ambiguous_claims."""
    agree_custom = FakeChat(
        responses={
            "FaithfulnessOutput": {
                "claims": [
                    {"claim": "A", "context": 1},
                    {"claim": "B", "context": 2},
                    {"claim": "C", "context": 0},
                ]
            }
        }
    )
    custom = _one(Faithfulness(judge=agree_custom)).value
    ours = _one(DeepEvalFaithfulness(judge=_faithfulness_judge(3, "yes", "yes", "no"))).value
    assert custom == pytest.approx(ours) == pytest.approx(2 / 3)

    differ_custom = FakeChat(
        responses={
            "FaithfulnessOutput": {
                "claims": [
                    {"claim": "A", "context": 1},
                    {"claim": "B?", "context": 0},
                    {"claim": "C", "context": 0},
                ]
            }
        }
    )
    assert _one(Faithfulness(judge=differ_custom)).value == pytest.approx(1 / 3)
    verdicts = ("yes", "borderline", "no")
    assert _one(
        DeepEvalFaithfulness(judge=_faithfulness_judge(3, *verdicts))
    ).value == pytest.approx(2 / 3)
    assert _one(
        DeepEvalFaithfulness(
            judge=_faithfulness_judge(3, *verdicts), penalize_ambiguous_claims=True
        )
    ).value == pytest.approx(1 / 3)


def test_context_precision_parity() -> None:
    """Verdicts yes, no, yes over 3 contexts: AP = (1/1 + 2/3) / 2 in both backends."""
    (custom_row,) = ContextPrecision(
        judge=FakeChat(responses={"ContextVerdicts": {"verdicts": ["yes", "no", "yes"]}})
    ).evaluate([SAMPLE], [RESPONSE])
    custom = custom_row["context_precision"]
    ours = _one(
        DeepEvalContextPrecision(
            judge=FakeChat(responses={"Verdicts": _verdicts("yes", "no", "yes")})
        )
    )
    assert ours.value == pytest.approx(custom.value) == pytest.approx((1 + 2 / 3) / 2)


# --- per-row errors: NaN with a reason, never 0 ----------------------------------------------
def test_row_errors_are_nan_with_reasons() -> None:
    no_ref = Sample(id="q2", user_input="Who?", reference="")
    value = _one(DeepEvalContextRecall(judge=FakeChat()), sample=no_ref)
    assert math.isnan(value.value) and value.reason == "no_reference"  # as the custom metric
    unans = Sample(id="q3", user_input="Who?", reference="x", answerable=False)
    assert _one(DeepEvalContextPrecision(judge=FakeChat()), sample=unans).reason == "unanswerable"
    failed = RagResponse(error="timeout")
    assert _one(DeepEvalFaithfulness(judge=FakeChat()), resp=failed).reason == "target_error"
    # unscripted schema: the judge's output never validates → parse_error after the retry
    judge = FakeChat(responses={"Truths": {"truths": []}})
    metric = DeepEvalFaithfulness(judge=judge, max_retries=1)
    value = _one(metric)
    assert math.isnan(value.value) and value.reason == "parse_error"
    assert judge.calls == 3 and metric.audit()[0]["judge_calls"] == 3  # truths + claims × 2
    # 2 verdicts for 3 contexts: DeepEval would use them misaligned → parse_error
    short = FakeChat(responses={"Verdicts": _verdicts("yes", "no")})
    assert _one(DeepEvalContextPrecision(judge=short)).reason == "parse_error"
    mismatch = _faithfulness_judge(3, "yes")
    assert _one(DeepEvalFaithfulness(judge=mismatch)).reason == "parse_error"


def test_structured_output_never_falls_back_to_string_parsing() -> None:
    """The adapter returns the schema instance; DeepEval's free-text path (taken on a
    TypeError) is never used: a judge raising TypeError is a NaN ``judge_error``."""

    class TypeErrorChat(FakeChat):
        def complete(
            self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
        ) -> Completion:
            self.calls += 1
            raise TypeError("boom")

    judge = TypeErrorChat()
    value = _one(DeepEvalAnswerRelevancy(judge=judge))
    assert value.reason == "judge_error" and judge.calls == 1


def test_config_checks() -> None:
    with pytest.raises(ConfigError, match="timeout_s"):
        DeepEvalFaithfulness(timeout_s=0)
    with pytest.raises(ConfigError, match="threshold"):
        DeepEvalContextRecall(threshold=1.5)
    with pytest.raises(ConfigError, match="truths_extraction_limit"):
        DeepEvalFaithfulness(truths_extraction_limit=0)
    with pytest.raises(ConfigError, match="needs a judge"):
        DeepEvalFaithfulness().evaluate([SAMPLE], [RESPONSE])


# --- timeouts --------------------------------------------------------------------------------
class SlowOnQuestion(FakeChat):
    """Sleeps ``delay_s`` on calls whose prompt mentions ``SLOW``."""

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        if "SLOW" in messages[-1]["content"]:
            time.sleep(0.6)
        return super().complete(messages, schema, **options)


def test_timeout_rows_are_nan_and_the_rest_is_averaged() -> None:
    judge = SlowOnQuestion(
        responses={"Statements": {"statements": ["a", "b"]}, "Verdicts": _verdicts("yes", "no")}
    )
    samples = [
        Sample(id=f"q{i}", user_input=q, question_type="t")
        for i, q in enumerate(["Fast one?", "SLOW one?", "Fast two?"])
    ]
    responses = [RagResponse(response="SLOW answer" if i == 1 else "An answer.") for i in range(3)]
    metric = DeepEvalAnswerRelevancy(judge=judge, timeout_s=0.2)
    started = time.perf_counter()
    rows = metric.evaluate(samples, responses)
    assert time.perf_counter() - started < 1.5
    values = [r["deepeval.answer_relevancy"] for r in rows]
    assert [v.reason for v in values] == [None, "timeout", None]
    assert math.isnan(values[1].value)
    (agg,) = [
        a for a in aggregate(["deepeval.answer_relevancy"], rows, ["t"] * 3) if a.group == "all"
    ]
    assert (agg.mean, agg.n_valid, agg.n_nan) == (0.5, 2, 1)
    # the abandoned thread finishes its one call, then its cancelled adapter refuses the next
    time.sleep(0.8)
    assert judge.calls == 2 + 1 + 2
    assert metric.audit()[1]["error"] == "timeout"
    assert not [t for t in threading.enumerate() if t.name.startswith("deepeval-")]


# --- audit: judge calls per question as for the custom backend -------------------------------
def test_judge_calls_per_question_are_collected_like_the_custom_backend() -> None:
    samples = [SAMPLE, SAMPLE.model_copy(update={"id": "q2"})]
    responses = [RESPONSE, RagResponse(error="timeout")]
    faith = DeepEvalFaithfulness(judge=_faithfulness_judge(3, "yes", "yes", "no"))
    recall = DeepEvalContextRecall(judge=FakeChat(responses={"Verdicts": _verdicts("yes")}))
    for m in (faith, recall):
        m.evaluate(samples, responses)
    rows, run = collect_audit({m.name: m.audit() for m in (faith, recall)}, samples)
    assert [r["judge_calls"] for r in rows] == [4, 0]
    assert rows[0]["deepeval.faithfulness"]["claims"] == ["claim 0", "claim 1", "claim 2"]
    assert [j["prompt"] for j in rows[0]["deepeval.faithfulness"]["judgements"]] == [
        "deepeval.faithfulness.Truths",
        "deepeval.faithfulness.Claims",
        "deepeval.faithfulness.Verdicts",
    ]
    assert run["judge_calls"] == 4 and run["judge_calls_per_question"] == 2.0
    assert run["judge_calls_per_question_max"] == 4.0
    json.dumps(rows)  # JSON-ready


def test_specs_are_prefixed() -> None:
    names = [
        m().specs()[0].name
        for m in (
            DeepEvalFaithfulness,
            DeepEvalAnswerRelevancy,
            DeepEvalContextPrecision,
            DeepEvalContextRecall,
            DeepEvalContextRelevancy,
        )
    ]
    assert names == [
        "deepeval.faithfulness",
        "deepeval.answer_relevancy",
        "deepeval.context_precision",
        "deepeval.context_recall",
        "deepeval.context_relevancy",
    ]


# --- no network ------------------------------------------------------------------------------
NO_NETWORK = textwrap.dedent(
    """
    import socket
    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(repr(args[1:] if len(args) > 1 else args)[:80])
        raise OSError("offline guard")
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.getaddrinfo = refuse
    socket.create_connection = refuse

    import rag_experiments  # sets the telemetry switches before deepeval is imported
    import deepeval, deepeval.telemetry as tel
    from rag_experiments.llm.fake import FakeChat
    from rag_experiments.metrics.deepeval_backend import DeepEvalFaithfulness
    from rag_experiments.records import RagResponse, Sample
    judge = FakeChat(responses={"Truths": {"truths": ["t"]}, "Claims": {"claims": ["c"]},
                                "Verdicts": {"verdicts": [{"verdict": "yes"}]}})
    (row,) = DeepEvalFaithfulness(judge=judge, include_reason=False).evaluate(
        [Sample(id="q", user_input="q?")], [RagResponse(response="a", retrieved_contexts=["t"])])
    try:  # DeepEval 2.x started Sentry; 4.x no longer depends on sentry-sdk
        import sentry_sdk
        sentry = sentry_sdk.Hub.current.client is not None
    except ImportError:
        sentry = False
    print(json.dumps({"attempts": attempts, "value": row["deepeval.faithfulness"].value,
                      "opt_out": tel.telemetry_opt_out(),
                      "posthog": hasattr(tel, "posthog"), "sentry": sentry}))
    """
)


@pytest.mark.slow
def test_no_network_at_import_or_in_measure(tmp_path) -> None:
    code = "import json\n" + NO_NETWORK
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {
        "attempts": [],
        "value": 1.0,
        "opt_out": True,
        "posthog": False,
        "sentry": False,
    }


# --- metrics=both: one run, responses generated once, both backends side by side ---------------
def test_metrics_both_runs_both_backends_on_the_same_responses(compose_cfg) -> None:
    from rag_experiments.build import build
    from rag_experiments.runner import evaluate

    v5 = ",".join(["{verdict:yes,reason:r}"] * 3 + ["{verdict:no,reason:r}"] * 2)
    cfg = compose_cfg(
        "metrics=both",
        "judge=fake",
        "llm=fake",
        "embedder=hash",
        "max_samples=3",
        "+judge.responses.Truths={truths:[t]}",
        "+judge.responses.Claims={claims:[a,b,c,d,e]}",
        "+judge.responses.Statements={statements:[a,b,c,d,e]}",
        f"+judge.responses.Verdicts={{verdicts:[{v5}]}}",
        "+judge.responses.ContextualRelevancyVerdicts={verdicts:[{statement:s,verdict:yes}]}",
    )
    exp = build(cfg)
    judged = [m for m in exp.metrics if getattr(m, "judge", None) is not None]
    assert len({id(m.judge) for m in judged}) == 1  # one judge, built once, shared
    result = evaluate(exp.dataset, exp.target, exp.metrics, progress=False)
    rows = result.values
    assert len(rows) == 3
    for row in rows:
        assert row["deepeval.faithfulness"].value == pytest.approx(0.6)  # 3 of 5 not "no"
        assert row["deepeval.context_relevancy"].value == 1.0
        assert row["faithfulness"].value == pytest.approx(0.5)  # fake.yaml: claims on [1], none
    assert "deepeval.faithfulness" in {s.name for s in result.specs}
    assert result.run_values["judge_calls_per_question"] > 0
    audit_row = result.audit[0]
    assert {"faithfulness", "deepeval.faithfulness"} <= set(audit_row)


def test_runs_on_deepeval_4() -> None:
    """The dependency range (``deepeval>=4.3,<5``) is what is installed and tested."""
    from importlib.metadata import version

    assert version("deepeval").split(".")[0] == "4"


def test_a_recorded_row_without_response_is_nan_no_response_for_answer_metrics() -> None:
    """``target=recorded`` with no answer: faithfulness and answer relevancy make no judge call
    and are NaN ``no_response``; context precision still judges the contexts."""
    missing = RagResponse(retrieved_contexts=CONTEXTS, no_response=True)
    for metric_cls in (DeepEvalFaithfulness, DeepEvalAnswerRelevancy):
        judge = FakeChat()
        value = _one(metric_cls(judge=judge), resp=missing)
        assert math.isnan(value.value) and value.reason == "no_response"
        assert judge.calls == 0
    precision = FakeChat(responses={"Verdicts": _verdicts("no", "yes", "no")})
    assert _one(DeepEvalContextPrecision(judge=precision), resp=missing).value == 0.5  # 1/2 at k=2


def test_the_measure_thread_carries_the_judge_repeat_and_no_lane() -> None:
    """DeepEval's measure() runs in its own thread: the judge repeat entered by the scheduler
    (the job's RepeatScope) follows into it, so repeat r's calls get r's seed and cache key;
    the scheduling lane does not (as before: DeepEval's calls never ran on one)."""
    from rag_experiments.llm.base import LANE
    from rag_experiments.metrics.deepeval_backend.base import _measure_with_timeout
    from rag_experiments.metrics.repeats import JudgeRepeats

    repeats = JudgeRepeats(2, "seed", base_seed=10)
    seen: dict[str, Any] = {}

    class Probe:
        def measure(self, case: Any, _show_indicator: bool = False) -> None:
            seen["repeat"], seen["lane"] = repeats.scope.current(), LANE.get()

    token = LANE.set(3)
    try:
        with repeats.entered(1):
            assert _measure_with_timeout(Probe(), None, 5.0) is None
    finally:
        LANE.reset(token)
    assert seen["repeat"].index == 1 and dict(seen["repeat"].options) == {"seed": 11}
    assert seen["lane"] is None
    assert _measure_with_timeout(Probe(), None, 5.0) is None  # outside a repeat: none
    assert seen["repeat"] is None


# --- our guards before DeepEval ----------------------------------------------------------------
def test_guards_give_the_custom_backends_values_and_reasons_without_a_judge_call() -> None:
    """DeepEval alone scores these edges as perfect (faithfulness and context recall 1.0 on no
    context, precision 1.0 on [""]: DeepEval #2248); each DeepEval metric gives instead what
    the custom metric of the same definition gives, and calls no judge."""
    from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
    from rag_experiments.metrics.context_recall import ContextRecall

    no_context = RagResponse(response="The line manager signs AR-1.", retrieved_contexts=[])
    blank_context = RagResponse(response="The line manager signs AR-1.", retrieved_contexts=[""])
    empty_answer = RagResponse(response="  ", retrieved_contexts=CONTEXTS)
    no_reference = Sample(id="q4", user_input="How is an account requested?", reference=" ")
    cases = [
        (DeepEvalFaithfulness, Faithfulness, SAMPLE, no_context, (0.0, "empty_context")),
        (DeepEvalFaithfulness, Faithfulness, SAMPLE, empty_answer, (math.nan, "no_claims")),
        (DeepEvalContextRecall, ContextRecall, SAMPLE, no_context, (0.0, "empty_context")),
        (DeepEvalContextRecall, ContextRecall, no_reference, RESPONSE, (math.nan, "no_reference")),
        (DeepEvalContextPrecision, ContextPrecision, SAMPLE, blank_context, (0.0, "empty_context")),
        (DeepEvalAnswerRelevancy, AnswerRelevancy, SAMPLE, empty_answer, (0.0, "empty_answer")),
    ]
    for ours, custom, sample, resp, (value, reason) in cases:
        judge = FakeChat()
        got = _one(ours(judge=judge), sample=sample, resp=resp)
        (custom_row,) = custom(judge=FakeChat()).evaluate([sample], [resp])
        expected = custom_row[ours.definition]
        assert got.reason == reason == expected.reason, (ours.__name__, reason)
        assert got.value == pytest.approx(value, nan_ok=True), ours.__name__
        assert expected.value == pytest.approx(value, nan_ok=True), custom.__name__
        assert judge.calls == 0, ours.__name__
