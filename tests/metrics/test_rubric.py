"""Rubric judges declared in YAML (rag_experiments/metrics/rubric.py): the prompt built from the
entry and versioned by content, values by hand with a scripted fake judge, every NaN edge,
typos refused when the config is composed, and (slow) a YAML-only rubric in a tmp ./conf
overlay through a real run, its traces, compare, another process reading the run and
`rag-exp run --cfg job`.

Values by hand: a 1-3 scale graded 2 → (2 - 1) / (3 - 1) = 0.5, raw 2; binary graded 1 → 1.0.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import mlflow
import pytest

from rag_experiments.config.compose import compose_config
from rag_experiments.errors import ConfigError
from rag_experiments.llm.fake import FakeChat
from rag_experiments.metrics.definitions import DEFINITIONS, register_run_metrics
from rag_experiments.metrics.keys import KEY_METRICS
from rag_experiments.metrics.rubric import RubricJudge, rubric_class
from rag_experiments.qualify.agreement import LABEL_SETS
from rag_experiments.records import RagResponse, Sample

THREE = {1: "invents facts", 2: "mostly grounded", 3: "only from the passages"}
ENTRY = {
    "name": "grounded",
    "criteria": "The answer uses only facts of the passages {not braces}.",
    "steps": ["Find the answer's facts.", "Check each against the passages."],
    "scale": THREE,
    "reads": ["question", "contexts", "answer", "metadata.policy"],
}


def _judge(grade: int) -> FakeChat:
    return FakeChat(responses={"RubricGrade": {"rationale": "Because.", "grade": grade}})


def judge_prompt(metric: RubricJudge, sample: Sample, resp: RagResponse) -> str:
    """The user message the metric asks for one row (a recording fake judge)."""
    seen: list[str] = []

    class Recording(FakeChat):
        def complete(self, messages, schema=None, **options):
            seen.append(messages[-1]["content"])
            return super().complete(messages, schema, **options)

    metric.judge = Recording(responses={"RubricGrade": {"rationale": "", "grade": 1}})
    metric.evaluate([sample], [resp])
    return seen[0]


def _sample(**kw) -> Sample:
    base = {"id": "q1", "user_input": "Who approves?", "metadata": {"policy": "FIN-01"}}
    return Sample(**{**base, **kw})


def _resp(**kw) -> RagResponse:
    base = {"response": "The lead approves.", "retrieved_contexts": ["The lead approves it."]}
    return RagResponse(**{**base, **kw})


def test_the_prompt_is_built_from_the_entry_and_versioned_by_its_content() -> None:
    metric = RubricJudge(judge=_judge(2), **ENTRY)
    prompt = metric.rubric.prompt
    text = prompt.template.format(
        contexts="[1] The lead approves it.",
        question="Who approves?",
        answer="The lead approves.",
        metadata_policy="FIN-01",
    )
    assert text.startswith("Context passages:\n\n[1] The lead approves it.\n\nQuestion: Who")
    assert "Policy: FIN-01\nAnswer: The lead approves.\n\n" in text
    assert "Criteria: The answer uses only facts of the passages {not braces}." in text
    assert "Evaluation steps:\n1. Find the answer's facts.\n2. Check each" in text
    assert "- 1: invents facts\n- 2: mostly grounded\n- 3: only from the passages" in text
    assert text.endswith('JSON: {"rationale": "...", "grade": <1-3>}')
    assert prompt.id.startswith("rubric.grounded-") and len(prompt.version) == 8
    # a changed criterion: another prompt id, another class, another declared source
    other = RubricJudge(**{**ENTRY, "criteria": "The answer cites its source."})
    assert other.rubric.prompt.id != prompt.id and type(other) is not type(metric)
    assert type(RubricJudge(**ENTRY)) is type(metric)  # the same content: the same class
    assert prompt.id in DEFINITIONS["grounded"].description


def test_values_by_hand_the_raw_grade_beside_and_the_rationale() -> None:
    judge = _judge(2)
    metric = RubricJudge(judge=judge, **ENTRY)
    (row,) = metric.evaluate([_sample()], [_resp()])
    assert row["grounded"].value == pytest.approx(0.5) and row["grounded"].reason is None
    assert row["grounded_raw"].value == 2.0
    (audit,) = metric.audit()
    assert audit["rationale"] == ["scores: grounded 2", "Because."]
    assert audit["judgement"]["prompt"] == metric.rubric.prompt.id
    assert judge.calls == 1
    binary = RubricJudge(judge=_judge(1), name="cites", criteria="Cites.", reads=["answer"])
    (row,) = binary.evaluate([_sample()], [_resp()])
    assert (row["cites"].value, row["cites_raw"].value) == (1.0, 1.0)
    assert [s.name for s in binary.specs()] == ["cites", "cites_raw"]
    assert [(s.low, s.high) for s in binary.specs()] == [(0.0, 1.0), (0.0, 1.0)]
    assert [(s.low, s.high) for s in metric.specs()] == [(0.0, 1.0), (1.0, 3.0)]


@pytest.mark.parametrize(
    ("sample", "resp", "reason"),
    [
        ({}, {"error": "timeout"}, "target_error"),
        ({}, {"response": "", "no_response": True}, "no_response"),
        ({}, {"response": "  "}, "empty_answer"),
        ({"metadata": {}}, {}, "no_policy"),
    ],
)
def test_every_edge_is_a_nan_with_its_reason_and_no_judge_call(sample, resp, reason) -> None:
    judge = _judge(3)
    metric = RubricJudge(judge=judge, **ENTRY)
    (row,) = metric.evaluate([_sample(**sample)], [_resp(**resp)])
    assert math.isnan(row["grounded"].value) and row["grounded"].reason == reason
    assert row["grounded_raw"].reason == reason and judge.calls == 0


def test_no_reference_is_nan_and_no_context_is_judged_with_a_note() -> None:
    judge = _judge(1)
    refs = RubricJudge(judge=judge, name="ref", criteria="Agrees.", reads=["reference", "answer"])
    (row,) = refs.evaluate([_sample(reference="")], [_resp()])
    assert row["ref"].reason == "no_reference" and judge.calls == 0
    ctx = RubricJudge(judge=judge, name="ctx", criteria="Grounded.", reads=["contexts", "answer"])
    (row,) = ctx.evaluate([_sample()], [_resp(retrieved_contexts=[])])
    assert row["ctx"].value == 1.0 and judge.calls == 1
    (audit,) = ctx.audit()
    assert "(no passage retrieved)" in judge_prompt(ctx, _sample(), _resp(retrieved_contexts=[]))


def test_a_rubric_declares_itself_into_every_list() -> None:
    RubricJudge(**ENTRY)
    binary = RubricJudge(name="cites", criteria="Cites.", reads=["answer"], threshold=0.5)
    assert "grounded" in KEY_METRICS and "grounded_raw" not in KEY_METRICS
    assert LABEL_SETS["grounded"].labels == ("1", "2", "3")
    assert LABEL_SETS["grounded"].source == "grounded_raw"
    assert LABEL_SETS["cites"].labels == ("fail", "pass")
    assert (
        LABEL_SETS["cites"].to_label(0.4) == "fail" and LABEL_SETS["cites"].to_label(0.5) == "pass"
    )
    probe = type(binary).declaration.probe
    assert (probe.column, probe.threshold, probe.prompt) == ("cites", 0.5, binary.rubric.prompt.id)
    # judge-check and the scorers build it with the judge alone
    rebuilt = type(binary)(judge=_judge(0))
    (row,) = rebuilt.evaluate([_sample()], [_resp()])
    assert row["cites"].value == 0.0
    # judge-check: a probe named as the rubric; every pair graded 1 (pass ≥ 0.5), so the
    # accuracy is the share of faithful pairs
    from rag_experiments.qualify.check import PROBES, JudgeCheck
    from rag_experiments.qualify.pairs import load_pairs

    assert "cites" in PROBES
    pairs = load_pairs()[:6]
    (result,) = JudgeCheck(_judge(1)).run(pairs, ["cites"]).values()
    assert result.agreement.n == 6
    assert result.agreement.accuracy == pytest.approx(sum(p.faithful for p in pairs) / 6)


def test_a_logged_runs_params_declare_the_rubric_again() -> None:
    params = {
        "metrics.suite.g._target_": "rag_experiments.metrics.rubric.RubricJudge",
        "metrics.suite.g.name": "logged_rubric",
        "metrics.suite.g.criteria": "Uses only the passages.",
        "metrics.suite.g.steps": '["Check each fact."]',
        "metrics.suite.g.scale.1": "bad",
        "metrics.suite.g.scale.2": "good",
        "metrics.suite.g.reads": '["contexts", "answer"]',
        "metrics.suite.g.higher_is_better": "False",
        "metrics.suite.g.threshold": "0.5",
        "metrics.suite.g.examples": "None",
        "metrics.suite.g.max_tokens": "256",
    }
    assert "logged_rubric" not in KEY_METRICS
    assert register_run_metrics(params) == []
    assert "logged_rubric" in KEY_METRICS
    assert DEFINITIONS["logged_rubric"].higher_is_better is False
    assert LABEL_SETS["logged_rubric"].labels == ("1", "2")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+metrics.suite.grounded_answer.critera=x", "did you mean "
         "metrics.suite.grounded_answer.criteria?"),
        ("metrics.suite.cites_source.reads=[questoin,answer]", "'questoin' is not a field a "
         "rubric reads: did you mean 'question'?"),
        ("metrics.suite.cites_source.scale=binery", "'binery' is not a scale"),
        ("metrics.suite.cites_source.reads=[question]", "add answer to its fields"),
        ("metrics.suite.cites_source.threshold=2", "metrics.suite.cites_source.threshold: 2 "
         "is not in [0, 1]"),
        ("metrics.suite.cites_source.name=cites-source", "is not a metric name"),
    ],
)  # fmt: skip
def test_typos_and_bad_values_are_refused_when_the_config_is_composed(override, message) -> None:
    with pytest.raises(ConfigError) as caught:
        compose_config("config", ["metrics=rubrics", "judge=fake", override])
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_bad_scale_level_is_refused_with_its_key() -> None:
    with pytest.raises(ConfigError, match=r"grades must be consecutive integers from 0 or 1"):
        rubric_class({**ENTRY, "scale": {1: "a", 3: "b"}})
    with pytest.raises(ConfigError, match=r"scale\.2: give the level a description"):
        rubric_class({**ENTRY, "scale": {1: "a", 2: " "}})


OVERLAY_SUITE = """
# A user's suite, YAML only: one rubric of their own.
defaults:
  - /schema/metrics/metrics@_here_
  - _self_
name: my_rubrics
suite:
  policy_number:
    _target_: rag_experiments.metrics.rubric.RubricJudge
    name: policy_number
    criteria: The answer quotes the policy number of the document it relies on.
    steps: [Find the document the answer relies on., Check the answer quotes its number.]
    scale:
      1: no number
      2: a number of another policy
      3: the right number
      4: the right number and section
    reads: [question, contexts, answer]
    threshold: 0.5
"""


def _run(tmp_path: Path, overlay: Path, grade: int, name: str) -> str:
    out = subprocess.run(
        [
            sys.executable, "-m", "rag_experiments", "run", "llm=fake", "judge=fake",
            "embedder=hash", "metrics=my_rubrics", "max_samples=3", "progress=false",
            f"+judge.responses.RubricGrade={{rationale: graded by hand, grade: {grade}}}",
            f"run_name={name}", f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
            f"paths.cache_dir={tmp_path}/cache",
        ],
        cwd=overlay, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment], f"tags.`mlflow.runName` = '{name}'")
    return run.info.run_id


@pytest.mark.slow
def test_a_yaml_only_rubric_in_a_conf_overlay_runs_end_to_end(tmp_path: Path) -> None:
    from rag_experiments.analysis.compare import compare_tables
    from rag_experiments.analysis.runs import load_specs
    from rag_experiments.tracking.store import RunStore, read_table

    overlay = tmp_path / "project"
    (overlay / "conf" / "metrics").mkdir(parents=True)
    (overlay / "conf" / "metrics" / "my_rubrics.yaml").write_text(
        textwrap.dedent(OVERLAY_SUITE), encoding="utf-8"
    )
    assert not list(overlay.rglob("*.py"))  # no Python file

    # --cfg job prints the prompt built from the entry
    shown = subprocess.run(
        [sys.executable, "-m", "rag_experiments", "run", "metrics=my_rubrics", "--cfg", "job"],
        cwd=overlay, capture_output=True, text=True,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "prompt_preview:" in shown.stdout and "id: rubric.policy_number-" in shown.stdout
    assert "- '- 4: the right number and section'" in shown.stdout

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    run_a = _run(tmp_path, overlay, 3, "rubric-a")  # (3 - 1) / 3 = 0.667
    run_b = _run(tmp_path, overlay, 2, "rubric-b")  # (2 - 1) / 3 = 0.333
    client = mlflow.MlflowClient(uri)
    table_a, table_b = read_table(client, run_a), read_table(client, run_b)
    assert list(table_a["policy_number"]) == pytest.approx([2 / 3] * 3)
    assert list(table_a["policy_number_raw"]) == [3.0] * 3
    assert list(table_b["policy_number"]) == pytest.approx([1 / 3] * 3)
    assert client.get_run(run_a).data.metrics["policy_number"] == pytest.approx(2 / 3)

    # traces: one judge feedback per question, with the judge's rationale
    mlflow.set_tracking_uri(uri)
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    traces = mlflow.search_traces(locations=[experiment], return_type="list")
    of_a = [t for t in traces if t.info.trace_metadata.get("mlflow.sourceRun") == run_a]
    assert len(of_a) == 3
    for trace in of_a:
        (feedback,) = [a for a in trace.info.assessments if a.name == "policy_number"]
        assert feedback.feedback.value == pytest.approx(2 / 3)
        assert feedback.source.source_type == "LLM_JUDGE"
        assert "graded by hand" in (feedback.rationale or "")

    # compare: b - a = 1/3 - 2/3 on each question
    specs = [s for s in load_specs(RunStore(uri), run_a) if s.name == "policy_number"]
    result = compare_tables(table_a, table_b, specs, n_resamples=200)
    (overall,) = [s for s in result.overall() if s.metric == "policy_number"]
    assert overall.n == 3 and overall.diff == pytest.approx(-1 / 3)

    # another process reading the run (as compare/report do) declares the rubric from params
    code = (
        "from rag_experiments.metrics.keys import KEY_METRICS\n"
        "from rag_experiments.analysis.runs import open_run_store\n"
        f"open_run_store({uri!r}).get_run({run_a!r})\n"
        "print('policy_number' in KEY_METRICS)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]
