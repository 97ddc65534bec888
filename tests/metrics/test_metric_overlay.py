"""A new judged metric is one class, one prompt and one suite entry, from an overlay folder.

The test writes, into ``tmp_path``, what a user writes: a Python module with one judged metric
class (``Brevity``, its prompt and output model) and ``conf/metrics/brevity_suite.yaml``
naming it. Nothing else of the package is touched; the class declares itself
(:class:`~rag_experiments.metrics.definitions.MetricDeclaration`) and registers when its
module is imported. The metric's values are then found in the run's per-query table and run
metrics, the traces' assessments, the MLflow scorers (:func:`rag_experiments.mlflow_scorers.
rag_scorers`), ``judge-check``'s probes (:mod:`rag_experiments.qualify.check`) and ``compare``
(:func:`rag_experiments.analysis.compare.compare_tables`).

Values by hand: the fake judge is scripted to grade every answer ``score`` (4, then 2 for the
second run); the metric's formula is ``(score - 1) / 4``, so 0.75 and 0.25, and the paired
difference of the two runs is 0.25 - 0.75 = -0.5 on every question.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from rag_experiments import protocols
from rag_experiments.config.compose import compose_config
from rag_experiments.errors import ConfigError
from rag_experiments.locations import CONF_DIR
from rag_experiments.metrics.definitions import declared_metrics

MODULE = "brevity_overlay_metric"

METRIC_SOURCE = '''
"""Answer brevity graded 1-5 by the judge, normalised as (s - 1) / 4 (a user's metric)."""

from rag_experiments.llm.parsing import StructuredOutput
from rag_experiments.metrics.definitions import JudgeProbe, MetricDeclaration, MetricDefinition
from rag_experiments.metrics.judge import JudgedMetric
from rag_experiments.metrics.prompts.base import JudgePrompt, format_contexts
from rag_experiments.records import MetricValue

PROMPT = JudgePrompt(
    name="brevity",
    version="v1",
    template=(
        "Contexts:\\n{contexts}\\n\\nQuestion: {question}\\nAnswer: {answer}\\n\\n"
        'Grade how briefly the Answer answers, 1 to 5. JSON: {{"score": <1-5>}}'
    ),
)


class BrevityGrade(StructuredOutput):
    score: int


class Brevity(JudgedMetric):
    name = "brevity"
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "brevity", True, 0.0, 1.0, "judge's brevity grade, (s - 1) / 4",
                "a user's rubric", key=200,
            ),
        ),
        scorer=True,
        probe=JudgeProbe("brevity", ("faithful", "hallucinated"), PROMPT.id, threshold=0.5),
    )

    def _score(self, sample, resp):
        if resp.error is not None or not resp.response.strip():
            return self._nan_all("no_response")
        fields = {
            "contexts": format_contexts(list(resp.retrieved_contexts)),
            "question": sample.user_input,
            "answer": resp.response.strip(),
        }
        judgement, record = self._ask(PROMPT, fields, BrevityGrade)
        if judgement.parsed is None:
            return {"brevity": MetricValue.nan(judgement.error or "judge_error")}, record
        record["scores"] = {"brevity": judgement.parsed.score}
        return {"brevity": MetricValue((judgement.parsed.score - 1) / 4)}, record
'''

SUITE_YAML = f"""
# A user's suite: keyword coverage and their own judged metric.
defaults:
  - /schema/metrics/metrics@_here_
  - _self_
name: brevity_suite
suite:
  keyword_coverage:
    _target_: rag_experiments.metrics.keyword_coverage.KeywordCoverage
  brevity:
    _target_: {MODULE}.Brevity
    max_tokens: 32
"""


@pytest.fixture
def overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The overlay folder (module on ``sys.path``, ``conf/`` for Hydra's search path); the
    metric registry and ``sys.modules`` are restored afterwards, so no other test sees it."""
    folder = tmp_path / "overlay"
    (folder / "conf" / "metrics").mkdir(parents=True)
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(METRIC_SOURCE), encoding="utf-8")
    (folder / "conf" / "metrics" / "brevity_suite.yaml").write_text(SUITE_YAML, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    declared_metrics()  # the built-ins registered first: the restored registry keeps them
    monkeypatch.setattr(protocols, "_METRIC_CLASSES", list(protocols._METRIC_CLASSES))
    yield folder
    sys.modules.pop(MODULE, None)


def _compose(tmp_path: Path, overlay: Path, *overrides: str) -> DictConfig:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(
                config_name="config",
                overrides=[
                    f"hydra.searchpath=[file://{overlay / 'conf'}]",
                    f"paths.cache_dir={tmp_path}/cache",
                    f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
                    "progress=false",
                    *overrides,
                ],
            )
    finally:
        GlobalHydra.instance().clear()


def _run(tmp_path: Path, overlay: Path, score: int, name: str) -> str:
    """Run the overlay suite on 3 questions with the fake judge grading ``score``; its run id."""
    from rag_experiments.job import run_job

    cfg = _compose(
        tmp_path,
        overlay,
        "llm=fake",
        "judge=fake",
        "embedder=hash",
        "metrics=brevity_suite",
        "max_samples=3",
        f"+judge.responses.BrevityGrade={{score: {score}}}",
        f"run_name={name}",
    )
    run_job(cfg)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment], f"tags.`mlflow.runName` = '{name}'")
    return run.info.run_id


@pytest.mark.slow
def test_a_metric_from_an_overlay_folder_reaches_every_list(tmp_path: Path, overlay: Path) -> None:
    from rag_experiments.analysis.compare import compare_tables
    from rag_experiments.analysis.runs import load_specs
    from rag_experiments.llm.fake import FakeChat
    from rag_experiments.metrics.definitions import DEFINITIONS
    from rag_experiments.metrics.keys import KEY_METRICS
    from rag_experiments.mlflow_scorers import rag_scorers
    from rag_experiments.qualify.check import PROBES, PROMPT_IDS, JudgeCheck
    from rag_experiments.qualify.pairs import load_pairs
    from rag_experiments.tracking.store import RunStore, read_table

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    run_a = _run(tmp_path, overlay, 4, "brevity-a")
    run_b = _run(tmp_path, overlay, 2, "brevity-b")
    client = mlflow.MlflowClient(uri)

    # The run: every question graded 4 → (4 - 1) / 4 = 0.75; the run value is their mean.
    table_a, table_b = read_table(client, run_a), read_table(client, run_b)
    assert len(table_a) == 3 and list(table_a["brevity"]) == [0.75] * 3
    assert list(table_b["brevity"]) == [0.25] * 3
    assert client.get_run(run_a).data.metrics["brevity"] == pytest.approx(0.75)
    # Its declaration is in the derived lists: a definition, and a key metric after the others.
    assert DEFINITIONS["brevity"].description == "judge's brevity grade, (s - 1) / 4"
    assert list(KEY_METRICS)[-1] == "brevity"

    # The traces: one feedback named `brevity` per question, from the judge.
    mlflow.set_tracking_uri(uri)
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    traces = mlflow.search_traces(locations=[experiment], return_type="list")
    of_a = [t for t in traces if t.info.trace_metadata.get("mlflow.sourceRun") == run_a]
    assert len(of_a) == 3
    for trace in of_a:
        (brevity,) = [a for a in trace.info.assessments if a.name == "brevity"]
        assert brevity.feedback.value == pytest.approx(0.75)
        assert brevity.source.source_type == "LLM_JUDGE"

    # compare: b - a = 0.25 - 0.75 on each of the 3 questions.
    specs = [s for s in load_specs(RunStore(uri), run_a) if s.name == "brevity"]
    assert specs and specs[0].low == 0.0 and specs[0].high == 1.0
    result = compare_tables(table_a, table_b, specs, n_resamples=200)
    (overall,) = [s for s in result.overall() if s.metric == "brevity"]
    assert overall.n == 3 and overall.diff == pytest.approx(-0.5)

    # The MLflow scorers: the declared scorer metrics with one judge (no embedder: answer
    # relevancy, which requires one, is left out), `brevity` among them, scoring 0.75.
    judge = FakeChat(responses={"BrevityGrade": {"score": 4}})
    scorers = {s.name: s for s in rag_scorers(judge)}
    assert set(scorers) == {"faithfulness", "context_precision", "context_recall", "brevity"}
    (feedback,) = scorers["brevity"](
        inputs={"question": "Who approves it?"},
        outputs={"response": "The lead.", "retrieved_contexts": ["The lead approves it."]},
        expectations={},
        trace=None,
    )
    assert feedback.name == "brevity" and feedback.value == pytest.approx(0.75)

    # judge-check: a probe named as the metric, with its prompt id; every pair's verdict is
    # 0.75 ≥ 0.5 (positive), so the accuracy is the share of faithful pairs.
    assert "brevity" in PROBES and PROMPT_IDS["brevity"] == "brevity-v1"
    pairs = load_pairs()[:6]
    (result_probe,) = JudgeCheck(judge).run(pairs, ["brevity"]).values()
    assert set(result_probe.verdicts.values()) == {True}
    share = sum(p.faithful for p in pairs) / len(pairs)
    assert result_probe.agreement.n == 6
    assert result_probe.agreement.accuracy == pytest.approx(share)
    assert result_probe.labels == ("faithful", "hallucinated")

    # Another process reading the run (as `rag-exp compare`/`report` do, from the folder that
    # holds the overlay's conf/): the run's params name the class, so reading the run imports
    # it and its declaration joins the registry there too. `-I`: the folder is not on the
    # path by itself; add_user_code_path (what every rag-exp command does) puts it there.
    code = (
        "from rag_experiments.locations import add_user_code_path\n"
        "from rag_experiments.metrics.keys import KEY_METRICS\n"
        "before = 'brevity' in KEY_METRICS\n"
        "add_user_code_path()\n"
        "from rag_experiments.analysis.runs import open_run_store\n"
        f"open_run_store({uri!r}).get_run({run_a!r})\n"
        "print(before, list(KEY_METRICS)[-1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd=overlay, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "brevity"]


def test_a_misspelled_metric_key_is_refused_at_compose_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'faithfulness'") as caught:
        compose_config(
            "config", ["llm=fake", "judge=fake", "+metrics.suite.faithfulnes.max_tokens=64"]
        )
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"did you mean metrics\.suite\.faithfulness\.max_tokens"):
        compose_config(
            "config", ["llm=fake", "judge=fake", "+metrics.suite.faithfulness.max_tokenz=64"]
        )


def test_an_override_of_an_entry_or_parameter_the_suite_lacks_says_what_to_write() -> None:
    with pytest.raises(ConfigError) as caught:
        compose_config("config", ["metrics.suite.faithfulnes.max_tokens=64"])
    assert str(caught.value).startswith(
        "metrics.suite.faithfulnes is not an entry of the suite: did you mean 'faithfulness'"
    )
    with pytest.raises(ConfigError) as caught:
        compose_config("config", ["metrics.suite.faithfulness.refusal_patterns=[nope]"])
    assert str(caught.value).startswith(
        "metrics.suite.faithfulness.refusal_patterns is a parameter of "
        "rag_experiments.metrics.faithfulness.Faithfulness the suite does not write: set it "
        "with +metrics.suite.faithfulness.refusal_patterns=…"
    )
    with pytest.raises(ConfigError) as caught:  # the judge is the run's, not the suite's
        compose_config("config", ["metrics.suite.faithfulness.judge=x"])
    assert str(caught.value).startswith(
        "metrics.suite.faithfulness.judge is given by the run (the metric requires it): do not "
        "set it. config metrics.suite.faithfulness.judge=x:"
    )
    with pytest.raises(ConfigError) as caught:
        compose_config("config", ["metrics.suite.faithfulness.max_tokenz=1"])
    assert "did you mean metrics.suite.faithfulness.max_tokens? config " in str(caught.value)


def test_a_misspelled_parameter_in_an_overlay_suite_is_refused_at_compose(
    tmp_path: Path, overlay: Path
) -> None:
    from rag_experiments.config.keys import check_keys

    yaml = overlay / "conf" / "metrics" / "brevity_suite.yaml"
    yaml.write_text(SUITE_YAML.replace("max_tokens: 32", "max_tokenz: 32"), encoding="utf-8")
    cfg = _compose(tmp_path, overlay, "metrics=brevity_suite")
    with pytest.raises(ConfigError) as caught:
        check_keys(cfg)
    assert str(caught.value).startswith(
        f"metrics.suite.brevity.max_tokenz is not a parameter of {MODULE}.Brevity: did you mean "
        "metrics.suite.brevity.max_tokens?"
    )


def test_the_folder_of_the_users_conf_goes_on_the_python_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_experiments.locations import add_user_code_path

    monkeypatch.setattr(sys, "path", list(sys.path))
    assert add_user_code_path(tmp_path) is None  # no conf/ here: nothing added
    assert str(tmp_path.resolve()) not in sys.path
    (tmp_path / "conf").mkdir()
    assert add_user_code_path(tmp_path) == tmp_path.resolve()
    assert sys.path[-1] == str(tmp_path.resolve())  # after installed packages, never before
    add_user_code_path(tmp_path)
    assert sys.path.count(str(tmp_path.resolve())) == 1
