"""The composition root (rag_experiments.build): parts are wired by what they declare on their
protocol (a metric's ``requires`` and ``depth``, a target's ``assembled``, a chat model's
``caveat`` and ``check_settings``), never by class names or probing."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from rag_experiments.build import (
    build,
    build_metric,
    is_assembled,
    part_class,
    retriever_depth,
    run_caveat,
)
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.errors import ConfigError, SettingMissingError
from rag_experiments.llm.base import ChatModelBase
from rag_experiments.llm.embedded import SMALL_MODEL_NOTE
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.ollama import OllamaChat
from rag_experiments.llm.openai_compat import OpenAICompatChat
from rag_experiments.metrics.keyword_coverage import KeywordCoverage
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.protocols import MetricBase


class RecordingParts:
    """Stands in for SharedParts: hands out one judge and one embedder and records what was
    asked for."""

    def __init__(self) -> None:
        self.judge = FakeChat()
        self.embedder = HashEmbedder()
        self.asked: list[str] = []

    def get(self, name: str) -> Any:
        self.asked.append(name)
        return {"judge": self.judge, "embedder": self.embedder}[name]


def _node(target: str, **values: Any) -> Any:
    return OmegaConf.create({"_target_": f"rag_experiments.{target}", **values})


def test_a_metric_gets_exactly_the_shared_parts_it_requires():
    parts = RecordingParts()
    judged = build_metric(_node("metrics.faithfulness.Faithfulness"), parts)
    assert parts.asked == ["judge"] and judged.judge is parts.judge

    parts = RecordingParts()
    both = build_metric(_node("metrics.answer_relevancy.AnswerRelevancy"), parts)
    assert sorted(parts.asked) == ["embedder", "judge"]
    assert both.judge is parts.judge and both.embedder is parts.embedder

    parts = RecordingParts()  # requires nothing: built from its node alone
    plain = build_metric(_node("metrics.keyword_coverage.KeywordCoverage"), parts)
    assert parts.asked == [] and isinstance(plain, KeywordCoverage)


def test_a_class_that_declares_nothing_is_refused_with_the_base_to_subclass():
    with pytest.raises(ConfigError, match=r"subclass rag_experiments\.protocols\.MetricBase"):
        build_metric(OmegaConf.create({"_target_": "collections.OrderedDict"}), RecordingParts())
    with pytest.raises(ConfigError, match="has no _target_"):
        part_class(OmegaConf.create({"top_k": 3}), MetricBase)


def test_retriever_depth_is_the_deepest_declared_depth_or_top_k():
    deep = RetrievalMetrics(cutoffs=[1, 20])  # depth 20
    shallow = RetrievalMetrics(cutoffs=[3])  # depth 3
    keywords = KeywordCoverage()  # depth 0 (MetricBase's default)
    assert (deep.depth, shallow.depth, keywords.depth) == (20, 3, 0)
    assert retriever_depth([deep, shallow, keywords], top_k=5) == 20
    assert retriever_depth([shallow, keywords], top_k=5) == 5
    assert retriever_depth([deep], top_k=30) == 30
    assert retriever_depth([], top_k=4) == 4


def test_the_built_baseline_retrieves_as_deep_as_its_metrics_need(compose_cfg):
    fast = ("embedder=hash", "metrics=retrieval", "llm=fake")
    exp = build(compose_cfg(*fast, "metrics.suite.retrieval.cutoffs=[1,3,20]"))
    assert (exp.target.retriever.top_k, exp.target.retriever.depth) == (5, 20)
    exp = build(compose_cfg(*fast, "metrics.suite.retrieval.cutoffs=[2]", "retriever.top_k=4"))
    assert exp.target.retriever.depth == 4
    exp = build(compose_cfg(*fast, "retriever.depth=7"))  # a set depth is kept
    assert exp.target.retriever.depth == 7


def test_targets_and_chat_models_are_told_apart_by_what_their_classes_declare(compose_cfg):
    assert is_assembled(compose_cfg("target=baseline").target)
    assert not is_assembled(compose_cfg("target=http", "target.url=http://x/ask").target)
    embedded = _node("llm.embedded.EmbeddedChat")
    fake = _node("llm.fake.FakeChat")
    assert run_caveat({"generator": fake, "judge": embedded}) == SMALL_MODEL_NOTE.format(
        what="Judgements", fix="judge=ollama/openai"
    )
    assert run_caveat({"generator": fake}) == ""


def test_a_providers_check_settings_names_the_blank_field():
    with pytest.raises(SettingMissingError, match=r"no judge model name .*\(e\.g\. llama3\.1:8b\)"):
        OllamaChat.check_settings({"model": " ", "base_url": "http://h"}, "judge")
    with pytest.raises(SettingMissingError, match=r"\(as the server lists it\)"):
        OpenAICompatChat.check_settings({"model": "", "base_url": "http://h"}, "generator")
    with pytest.raises(SettingMissingError, match="no base URL is set for the judge model 'm'"):
        OllamaChat.check_settings({"model": "m", "base_url": ""}, "judge")
    OllamaChat.check_settings({"model": "m", "base_url": "http://h"}, "judge")  # complete
    FakeChat.check_settings({}, "judge")  # nothing to fill in


def test_the_prompt_budget_is_the_window_minus_the_completion_limit():
    class Windowed(ChatModelBase):
        context_window = 100
        max_tokens = 30

    assert Windowed().prompt_budget() == 70  # 100 - 30
    assert Windowed().prompt_budget(max_tokens=60) == 40  # 100 - 60
    assert Windowed().prompt_budget(max_tokens=120) == 0  # never negative
    assert FakeChat().prompt_budget() is None  # no window known


def test_two_metrics_producing_one_column_are_refused_before_any_work(compose_cfg, tmp_path):
    """The clash is found when the suite is built, before the dataset loads (here it does not
    exist) and before any question is answered; the fix the message names builds."""
    again = "+metrics.suite.again={_target_:rag_experiments.metrics.faithfulness.Faithfulness}"
    fast = ("embedder=hash", "metrics=custom", "llm=fake", "judge=fake", again)
    with pytest.raises(ConfigError) as info:
        build(compose_cfg(*fast, "dataset.path=/nonexistent/x"))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "metrics.suite: faithfulness and again both produce the column 'faithfulness'"
    )
    assert "+metrics.suite.again.prefix=again." in message

    fixed = build(compose_cfg(*fast, "+metrics.suite.again.prefix=again.",
                              f"paths.chroma_dir={tmp_path}/c"))  # fmt: skip
    columns = [s.name for m in fixed.metrics for s in m.specs()]
    assert "faithfulness" in columns and "again.faithfulness" in columns
    assert len(columns) == len(set(columns))
    plain = build(compose_cfg("embedder=hash", "metrics=both", "llm=fake", "judge=fake",
                              f"paths.chroma_dir={tmp_path}/c"))  # fmt: skip
    assert len(plain.metrics) > 1  # a shipped suite of two backends has no clash


def test_the_judge_is_built_with_the_jobs_repeats_and_session(compose_cfg, tmp_path):
    """build() owns the job's model session and judge repeats: the judge's cached model reads
    the repeats' scope, and the session's identity tags name the judge (no module state)."""
    cfg = compose_cfg("embedder=hash", "metrics=custom", "llm=fake", "judge=fake",
                      "judge.repeats=2", f"paths.chroma_dir={tmp_path}/c")  # fmt: skip
    first, second = build(cfg), build(cfg)
    judge = first.checks["judge"]
    assert judge.repeats is first.judge_repeats.scope
    assert first.judge_repeats.repeats == 2
    assert first.session is not second.session
    assert first.session.identity_by_role()["judge.provider"] == "fake"
    assert second.checks["judge"].meter is not judge.meter  # two jobs count apart


def test_the_judge_qualification_settings_are_read_once_from_the_judge_node(compose_cfg):
    from rag_experiments.build import qualify_settings
    from rag_experiments.qualify.registry import DEFAULT_MIN_KAPPA, QualifySettings

    assert qualify_settings(compose_cfg("judge=fake")) == QualifySettings(DEFAULT_MIN_KAPPA, False)
    strict = compose_cfg("judge=fake", "judge.min_kappa=0.6", "judge.require_qualified=true")
    assert qualify_settings(strict) == QualifySettings(min_kappa=0.6, require_qualified=True)
    assert qualify_settings({}) == QualifySettings(0.4, False)  # no judge node: the defaults
