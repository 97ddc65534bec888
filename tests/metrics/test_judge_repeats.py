"""Judge stability (issue 30, part 2): ``judge.repeats=N`` judges every (row, metric) N times;
the value is the mean, ``<m>.judge_sd`` the pooled within-row sample SD, ``<m>.flip_rate`` the
share of rows whose verdict (value >= 0.5) differs between repeats, ``<m>.sd`` each row's SD.
The fake judge's noisy rows (``noisy_marker``) flip a coin seeded by the call's seed, so the
expected numbers are computed here from ``random.Random(seed)`` by hand."""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig

from rag_experiments.build import build_judge_repeats
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import schema_json
from rag_experiments.llm.cache import CachedChat, ResponseCache, request_key
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.repeats import JudgeRepeats, combine_row
from rag_experiments.records import MetricValue, RagResponse, Sample
from rag_experiments.runner import evaluate

MARKER = "NOISY"
NOISY_IDS = {"q1", "q4"}
CONTEXTS = ["Accounts are requested with form AR-1.", "Passwords expire every 90 days."]
SUPPORTED = {"claims": [{"claim": "a", "context": 1}, {"claim": "b", "context": 2}]}  # 1.0
UNSUPPORTED = {"claims": [{"claim": "a", "context": 0}, {"claim": "b", "context": 0}]}  # 0.0


class CacheableFakeChat(FakeChat):
    """The fake judge, cached like a real model (FakeChat itself opts out of the cache); counts
    the calls that reach it."""

    cacheable = True
    model_calls = 0

    def complete(self, messages, schema=None, **options):  # type: ignore[no-untyped-def]
        CacheableFakeChat.model_calls += 1
        return super().complete(messages, schema, **options)


class ScriptedTarget:
    """Answers every question from the same two contexts; noisy questions carry the marker."""

    max_concurrency = 1

    def prepare(self, dataset: EvalDataset) -> None:
        pass

    def answer(self, sample: Sample) -> RagResponse:
        return RagResponse(response=f"Answer to {sample.user_input}", retrieved_contexts=CONTEXTS)

    def describe(self) -> dict[str, str]:
        return {"target": "scripted"}


def _dataset(n: int = 6) -> EvalDataset:
    samples = [
        Sample(
            id=f"q{i}",
            user_input=f"How is account {i} created?{' ' + MARKER if f'q{i}' in NOISY_IDS else ''}",
            reference="With form AR-1.",
        )
        for i in range(n)
    ]
    return EvalDataset("noisy", samples, [])


def _judge(cache: ResponseCache | None, max_concurrency: int = 4) -> CachedChat:
    inner = CacheableFakeChat(
        responses={"FaithfulnessOutput": SUPPORTED},
        noisy_marker=MARKER,
        noisy_responses={"FaithfulnessOutput": UNSUPPORTED},
        max_concurrency=max_concurrency,
    )
    return CachedChat(inner, UsageMeter("judge"), cache)


def _run(judge: CachedChat, repeats: JudgeRepeats | None) -> Any:
    if repeats is not None:  # the judge gets the repeats' scope, as build.build builds it
        judge = CachedChat(judge.inner, judge.meter, judge.cache, repeats=repeats.scope)
    return evaluate(
        _dataset(), ScriptedTarget(), [Faithfulness(judge=judge)], progress=False,
        judge_repeats=repeats,
    )  # fmt: skip


def _expected_values(n_repeats: int) -> list[float]:
    """A noisy row's faithfulness per repeat, by hand: repeat r's call has seed r (base 0;
    repeat 0 sends none, the fake's default 0); the fake answers UNSUPPORTED (0.0) when
    ``random.Random(seed).random() < 0.5``, else SUPPORTED (1.0)."""
    return [0.0 if random.Random(r).random() < 0.5 else 1.0 for r in range(n_repeats)]


def _sample_sd(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def test_three_seeded_repeats_give_the_hand_computed_flip_rate_and_sd(tmp_path: Path) -> None:
    noisy = _expected_values(3)
    assert len(set(noisy)) == 2  # the chosen seeds do flip (else the test would show nothing)
    result = _run(_judge(ResponseCache(tmp_path / "c.db")), JudgeRepeats(3, "seed"))

    rows = {r["id"]: r for r in result.rows()}
    for qid, row in rows.items():
        expected = noisy if qid in NOISY_IDS else [1.0, 1.0, 1.0]
        assert row["faithfulness"] == pytest.approx(sum(expected) / 3)
        assert row["faithfulness.sd"] == pytest.approx(_sample_sd(expected))
    n = len(rows)
    assert result.run_values["faithfulness.flip_rate"] == pytest.approx(len(NOISY_IDS) / n)
    # pooled within-row SD (Bland & Altman 1996): root of the mean of the rows' sample
    # variances; the stable rows have variance 0
    noisy_mean = sum(noisy) / 3
    noisy_var = sum((x - noisy_mean) ** 2 for x in noisy) / 2
    assert result.run_values["faithfulness.judge_sd"] == pytest.approx(
        math.sqrt(len(NOISY_IDS) * noisy_var / n)
    )
    assert result.run_values["judge_calls"] == 3 * n  # every repeat is a call
    # the audit keeps every repeat with its index; the rationale says the value is a mean
    record = next(a for a in result.audit if a["id"] == "q1")["faithfulness"]
    assert record["repeat"] == 0 and [r["repeat"] for r in record["repeats"]] == [1, 2]
    assert record["rationale"][0].startswith("mean of 3 judge repeats (judge.vary=seed)")


def test_a_second_identical_run_is_served_from_the_cache(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.db")
    first = _run(_judge(cache), JudgeRepeats(3, "seed"))
    assert len(cache) == 3 * 6  # one entry per (row, repeat): the repeats are stored apart
    CacheableFakeChat.model_calls = 0
    second = _run(_judge(cache), JudgeRepeats(3, "seed"))
    assert CacheableFakeChat.model_calls == 0
    assert second.rows() == first.rows()
    assert second.run_values["faithfulness.judge_sd"] == first.run_values["faithfulness.judge_sd"]
    assert second.run_values["judge_prompt_tokens"] == 0  # nothing was sent


def test_repeat_zero_keeps_the_old_cache_key_and_later_repeats_get_their_own(
    tmp_path: Path,
) -> None:
    # a cache filled by a run without repeats serves repeat 0 of a run with repeats
    cache = ResponseCache(tmp_path / "c.db")
    _run(_judge(cache), None)
    CacheableFakeChat.model_calls = 0
    _run(_judge(cache), JudgeRepeats(2, "seed"))
    assert CacheableFakeChat.model_calls == 6  # repeat 1 only
    # the key of repeat 0 is the formula of every earlier run (no repeat field)
    messages = [{"role": "user", "content": "hi"}]
    doc = {"identity": {"m": "x"}, "messages": messages, "schema": None, "options": {}}
    old = hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    assert request_key({"m": "x"}, messages, None, {}) == old
    assert request_key({"m": "x"}, messages, None, {}, repeat=0) == old
    assert request_key({"m": "x"}, messages, None, {}, repeat=1) != old
    assert schema_json  # the key's schema part is None here


@pytest.mark.parametrize("concurrency", [1, 4])
def test_repeats_give_the_same_values_at_any_concurrency(concurrency: int) -> None:
    one = _run(_judge(None, max_concurrency=1), JudgeRepeats(3, "seed"))
    other = _run(_judge(None, max_concurrency=concurrency), JudgeRepeats(3, "seed"))
    assert one.rows() == other.rows() and one.run_values == other.run_values


def test_one_repeat_adds_no_column_and_no_metric() -> None:
    plain = _run(_judge(None), None)
    one = _run(_judge(None), JudgeRepeats(1, "seed"))
    assert plain.rows() == one.rows() and plain.run_values == one.run_values
    assert not any(k.endswith(".sd") for k in one.rows()[0])
    assert not any(k.endswith((".judge_sd", ".flip_rate")) for k in one.metrics())
    assert plain.audit == one.audit and "repeat" not in one.audit[0]["faithfulness"]


def test_combine_row_mean_sample_sd_and_flips_by_hand() -> None:
    values, sd, flipped = combine_row(
        [
            {"a": MetricValue(0.6), "b": MetricValue(0.4), "c": MetricValue.nan("timeout")},
            {"a": MetricValue(0.9), "b": MetricValue(0.6), "c": MetricValue.nan("parse_error")},
        ]
    )
    assert values["a"].value == pytest.approx(0.75) and sd["a"] == pytest.approx(0.3 / math.sqrt(2))
    assert flipped["a"] is False and flipped["b"] is True  # 0.6/0.9 both pass; 0.4/0.6 flip
    assert math.isnan(values["c"].value) and values["c"].reason == "timeout"  # repeat 0's reason
    assert math.isnan(sd["c"]) and flipped["c"] is None
    # a raw 1-5 grade's verdict is the upper half of its range (>= 3): 2 and 4 flip, 3 and 5 not
    grades = [
        {"g": MetricValue(2.0), "h": MetricValue(3.0)},
        {"g": MetricValue(4.0), "h": MetricValue(5.0)},
    ]
    _, _, flips = combine_row(grades, {"g": 3.0, "h": 3.0})
    assert flips == {"g": True, "h": False}


def test_what_each_vary_choice_changes() -> None:
    sample = Sample(id="q7", user_input="q?", reference="r")
    resp = RagResponse(response="a", retrieved_contexts=list("ABCDE"), retrieved_ids=list("abcde"))
    vary = ("seed", "temperature", "context_order")
    seed, temp, order = (JudgeRepeats(3, v, 0.9, base_seed=5) for v in vary)
    assert seed.call(0) is None and seed.call(2).options == {"seed": 7}
    assert temp.call(1).options == {"temperature": 0.9, "seed": 6}
    assert order.call(1).options == {} and order.call(1).index == 1
    assert order.view(0, sample, resp) is resp and seed.view(1, sample, resp) is resp
    shuffled = order.view(1, sample, resp)
    perm = list(range(5))
    random.Random("5:q7:1").shuffle(perm)
    assert shuffled.retrieved_contexts == ["ABCDE"[i] for i in perm]
    assert shuffled.retrieved_ids == ["abcde"[i] for i in perm]  # ids follow their contexts


def test_context_order_repeats_show_other_prompts() -> None:
    judge = FakeChat(responses={"FaithfulnessOutput": SUPPORTED})
    repeats = JudgeRepeats(2, "context_order")
    cached = CachedChat(judge, UsageMeter("j"), repeats=repeats.scope)
    result = evaluate(
        _dataset(3), ScriptedTarget(), [Faithfulness(judge=cached)], progress=False,
        judge_repeats=repeats,
    )  # fmt: skip
    assert judge.calls == 6
    assert result.run_values["faithfulness.flip_rate"] == 0.0  # the scripted judge is stable


@pytest.mark.parametrize(
    "override", ["judge.repeats=0", "judge.vary=prompt", "judge.vary_temperature=-1"]
)
def test_bad_repeat_settings_are_refused_from_the_config(
    compose_cfg: Callable[..., DictConfig], override: str
) -> None:
    cfg = compose_cfg("judge=fake", override)
    with pytest.raises(ConfigError, match="judge"):
        build_judge_repeats(cfg)


def test_the_config_builds_the_repeats(compose_cfg: Callable[..., DictConfig]) -> None:
    assert build_judge_repeats(compose_cfg("judge=fake")) == JudgeRepeats()
    cfg = compose_cfg("judge=openai", "judge.repeats=3", "judge.vary=temperature", "judge.seed=4")
    assert build_judge_repeats(cfg) == JudgeRepeats(3, "temperature", 0.7, base_seed=4)


def test_a_judge_sees_only_the_repeats_it_was_built_with(tmp_path: Path) -> None:
    """The repeat state is owned: a judge built with another job's scope (or none) makes the
    plain call, so two jobs in one process never see each other's repeats."""
    repeats, other = JudgeRepeats(2, "seed"), JudgeRepeats(2, "seed")
    inner = CacheableFakeChat(responses={"FaithfulnessOutput": SUPPORTED})
    mine = CachedChat(inner, UsageMeter("judge"), ResponseCache(tmp_path / "c.db"),
                      repeats=repeats.scope)  # fmt: skip
    theirs = CachedChat(inner, UsageMeter("judge"), mine.cache, repeats=other.scope)
    messages = [{"role": "user", "content": "hi"}]
    with repeats.entered(1):
        assert repeats.scope.current() is not None and other.scope.current() is None
        mine.complete(messages)
        theirs.complete(messages)
    ident = inner.describe()
    repeat_one = request_key(ident, messages, None, {"seed": 1}, repeat=1)  # mine, in repeat 1
    plain = request_key(ident, messages, None, {})  # theirs: the plain call's key
    assert mine.cache.get(repeat_one) is not None and mine.cache.get(plain) is not None
    assert len(mine.cache) == 2  # repeat 1's key (seed 1) and the plain key, nothing else
    assert repeats.scope.current() is None  # left on exit
