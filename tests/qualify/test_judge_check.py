"""rag-exp judge-check: the labeled set, the agreement statistics, the probes through our own
metric prompts with scripted and oracle judges, the MLflow qualification and its lookup by
later runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from mlflow import MlflowClient
from sklearn.metrics import accuracy_score, balanced_accuracy_score, cohen_kappa_score

from rag_experiments.commands.judge_check import compose_judge_check, run_judge_check
from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.llm.base import Completion, Usage
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.parsing import parse_structured
from rag_experiments.locations import CONF_DIR, PROJECT_ROOT
from rag_experiments.qualify.check import JudgeCheck
from rag_experiments.qualify.pairs import (
    balanced_subset,
    load_faithbench,
    load_halueval,
    load_our_pairs,
    load_pairs,
)
from rag_experiments.qualify.stats import _closed_forms, binary_agreement
from rag_experiments.text.normalize import word_tokens
from rag_experiments.tracking.store import all_tags

ALWAYS_SUPPORTED = {
    "FaithfulnessOutput": {"claims": [{"claim": "The answer.", "context": 1}]},
    "ContextVerdicts": {"verdicts": ["yes"]},
}


class OracleJudge:
    """Knows the labels: supports every claim of a faithful answer, none of a hallucinated
    one; says "yes" to a context only when it is the supporting text of the reference."""

    provider = "oracle"
    max_concurrency = 4
    slot_affinity = False

    def __init__(self, pairs):
        self.faithful = {p.answer for p in pairs if p.faithful}
        self.support = {p.answer: p.relevant_text for p in pairs if p.faithful}

    def complete(self, messages, schema=None, **options):
        prompt = messages[-1]["content"]
        if schema.__name__ == "FaithfulnessOutput":
            answer = re.search(r"\nAnswer: (.*)\n", prompt).group(1)
            reply = {"claims": [{"claim": "c", "context": 1 if answer in self.faithful else 0}]}
        else:
            reference = re.search(r"\nReference answer: (.*)\n", prompt).group(1)
            shown = prompt.split("[1] ", 1)[1].split("\n\nQuestion:", 1)[0]
            reply = {"verdicts": ["yes" if shown == self.support[reference] else "no"]}
        text = json.dumps(reply)
        return Completion(
            text=text, parsed=parse_structured(text, schema), usage=Usage(1, 1), model="oracle"
        )

    def describe(self):
        return {"provider": self.provider, "model": "oracle", "digest": "0"}


# --- the bundled labeled set ------------------------------------------------------------------


def test_bundled_set_is_balanced_and_drawn_from_the_sample_documents():
    pairs = load_our_pairs()
    assert len(pairs) >= 60
    assert sum(p.faithful for p in pairs) == sum(not p.faithful for p in pairs)
    assert len({p.id for p in pairs}) == len(pairs)
    sources = " ".join(
        " ".join(word_tokens(f.read_text(encoding="utf-8")))
        for f in (PROJECT_ROOT / "datasets/sample/source").glob("*.md")
    )
    for p in pairs:
        assert len(p.contexts) >= 2 and p.relevant
        for context in p.contexts:  # every passage is a verbatim piece of a sample document
            assert " ".join(word_tokens(context)) in sources, (p.id, context)
    by_sample = {}
    for p in pairs:  # a faithful and a hallucinated answer against the same contexts
        by_sample.setdefault(p.id.rsplit("-", 1)[0], []).append(p)
    for twins in by_sample.values():
        assert sorted(t.faithful for t in twins) == [False, True]
        assert twins[0].contexts == twins[1].contexts and twins[0].answer != twins[1].answer


def test_balanced_subset_takes_half_of_each_label_and_refuses_too_many():
    pairs = load_pairs()
    sub = balanced_subset(pairs, 21, seed=3)
    assert len(sub) == 21 and sum(p.faithful for p in sub) == 10
    assert balanced_subset(pairs, 21, seed=3) == sub
    with pytest.raises(DatasetError, match="lower n"):
        balanced_subset(pairs, 200)


def test_halueval_and_faithbench_loaders(tmp_path):
    halu = tmp_path / "qa.jsonl"
    halu.write_text(
        json.dumps(
            {
                "knowledge": "Arthur's Magazine was a periodical.First for Women is a magazine.",
                "question": "Which came first?",
                "right_answer": "Arthur's Magazine",
                "hallucinated_answer": "First for Women",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    right, wrong = load_pairs(halu)
    assert right.contexts == (
        "Arthur's Magazine was a periodical.",
        "First for Women is a magazine.",
    )
    assert (right.answer, right.faithful, wrong.answer, wrong.faithful) == (
        "Arthur's Magazine",
        True,
        "First for Women",
        False,
    )
    bench = tmp_path / "fb.csv"
    bench.write_text(
        "source,summary,LLM,worst-label,best-label\n"
        "S1,A1,m,Benign,Consistent\nS2,A2,m,Questionable,Benign\n",
        encoding="utf-8",
    )
    ok, bad = load_pairs(bench)
    assert (ok.contexts, ok.answer, ok.faithful, bad.faithful) == (("S1",), "A1", True, False)
    with pytest.raises(DatasetError, match="does not exist"):
        load_pairs(tmp_path / "missing.jsonl")


def test_real_public_sets_load(shared_real):
    halu = load_halueval(shared_real / "judged/halueval/qa_one-turn_data.jsonl")
    assert len(halu) == 1000 and sum(p.faithful for p in halu) == 500
    bench = load_faithbench(shared_real / "judged/faithbench/FaithBench.csv")
    # worst-label: Consistent 174 + Benign 64 faithful, of 800 (SOURCES.md)
    assert len(bench) == 800 and sum(p.faithful for p in bench) == 238


# --- statistics -------------------------------------------------------------------------------


def test_agreement_of_a_judge_that_always_says_faithful_by_hand():
    labels = [True] * 5 + [False] * 5
    a = binary_agreement(labels, [True] * 10)
    # p_o = 5/10; p_e = P(y=1)·P(p=1) + P(y=0)·P(p=0) = 0.5·1 + 0.5·0 = 0.5 → κ = 0
    # TPR = 5/5, TNR = 0/5 → balanced accuracy 0.5
    assert (a.accuracy, a.balanced_accuracy, a.kappa) == (0.5, 0.5, 0.0)
    assert a.confusion == ((5, 0), (5, 0))
    # p_o = 8/10; P(p=1) = 5/10 → p_e = 0.5 → κ = (0.8 − 0.5) / 0.5 = 0.6
    b = binary_agreement(labels, [True] * 4 + [False] + [True] + [False] * 4)
    assert b.kappa == pytest.approx(0.6) and b.balanced_accuracy == pytest.approx(0.8)
    assert b.kappa_ci[0] <= 0.6 <= b.kappa_ci[1]


def test_a_probe_line_names_why_its_pairs_failed():
    from rag_experiments.qualify.check import AgreementResult

    labels = ("faithful", "hallucinated")
    none = binary_agreement([], [])  # every pair failed: n = 0, every statistic NaN
    failed = AgreementResult("context_relevance", labels, none, 4, {"parse_error": 3, "timeout": 1},
                             1.0, 8, 0.3)  # fmt: skip
    assert failed.format() == (
        "  context_relevance  n=0    acc nan  bal.acc nan [nan, nan]  kappa nan [nan, nan]  "
        "failed 4 (parse_error 3, timeout 1)  calls 8  0.3 s"
    )
    ok = AgreementResult("faithfulness", labels, binary_agreement([True, False], [True, False]),
                         0, {}, 1.0, 2, 1.0)  # fmt: skip
    assert ok.format().endswith("failed 0  calls 2  1.0 s")


def test_bootstrap_closed_forms_equal_sklearn():
    rng = np.random.default_rng(1)
    y = rng.random((30, 25)) < 0.5
    p = rng.random((30, 25)) < 0.6
    got = _closed_forms(y, p)
    for i in range(30):
        assert got["accuracy"][i] == pytest.approx(accuracy_score(y[i], p[i]))
        assert got["balanced_accuracy"][i] == pytest.approx(balanced_accuracy_score(y[i], p[i]))
        assert got["kappa"][i] == pytest.approx(cohen_kappa_score(y[i], p[i]))


# --- probes through our own metric prompts ---------------------------------------------------


def test_scripted_always_supported_judge_has_balanced_accuracy_half_and_kappa_zero():
    pairs = balanced_subset(load_pairs(), 20)
    results = JudgeCheck(FakeChat(ALWAYS_SUPPORTED)).run(
        pairs, ["faithfulness", "context_relevance"]
    )
    faith = results["faithfulness"].to_dict()
    # 10 faithful, 10 hallucinated, every verdict "faithful": as in the hand computation above
    assert (faith["n"], faith["balanced_accuracy"], faith["kappa"]) == (20, 0.5, 0.0)
    assert faith["accuracy"] == 0.5 and faith["judge_calls"] == 20
    assert faith["confusion"] == {
        "label_faithful": {"faithful": 10, "hallucinated": 0},
        "label_hallucinated": {"faithful": 10, "hallucinated": 0},
    }
    ctx = results["context_relevance"].to_dict()  # "yes" to every context
    assert (ctx["n"], ctx["balanced_accuracy"], ctx["kappa"]) == (20, 0.5, 0.0)


def test_oracle_judge_scores_one_and_is_not_position_sensitive():
    pairs = balanced_subset(load_pairs(), 20)
    results = JudgeCheck(OracleJudge(pairs)).run(
        pairs, ["faithfulness", "context_relevance", "position_bias"]
    )
    for probe in ("faithfulness", "context_relevance"):
        r = results[probe].to_dict()
        assert (r["accuracy"], r["balanced_accuracy"], r["kappa"]) == (1.0, 1.0, 1.0), probe
        assert (r["ci_low"], r["ci_high"]) == (1.0, 1.0)
    bias = results["position_bias"].to_dict()
    assert (bias["n"], bias["changed"], bias["share_changed"]) == (20, 0, 0.0)


def test_position_sensitive_judge_changes_the_expected_share():
    """A judge that calls an answer supported only when passage [1] is a supporting one:
    reversing flips the verdict exactly for pairs whose first and last passages differ in
    that respect (counted here from the data)."""
    pairs = balanced_subset(load_pairs(), 20)
    first_supports = {p.answer: 0 in p.relevant for p in pairs}

    class FirstPassageJudge(OracleJudge):
        def complete(self, messages, schema=None, **options):
            prompt = messages[-1]["content"]
            answer = re.search(r"\nAnswer: (.*)\n", prompt).group(1)
            pair = next(p for p in pairs if p.answer == answer)
            shown_first = prompt.split("[1] ", 1)[1].split("\n\n", 1)[0]
            ok = any(shown_first == pair.contexts[i] for i in pair.relevant)
            text = json.dumps({"claims": [{"claim": "c", "context": 1 if ok else 0}]})
            return Completion(
                text=text, parsed=parse_structured(text, schema), usage=Usage(1, 1), model="first"
            )

    expected = sum((0 in p.relevant) != (len(p.contexts) - 1 in p.relevant) for p in pairs)
    assert expected > 0 and first_supports
    bias = JudgeCheck(FirstPassageJudge(pairs)).run(pairs, ["position_bias"])["position_bias"]
    assert (bias.n, bias.changed) == (20, expected)


def test_unknown_probe_and_bad_threshold_are_refused():
    with pytest.raises(ConfigError, match="unknown"):
        JudgeCheck(FakeChat()).run(load_pairs()[:4], ["fairness"])
    with pytest.raises(ConfigError, match="threshold"):
        JudgeCheck(FakeChat(), threshold=1.5)


# --- MLflow qualification and its lookup by later runs ---------------------------------------


def _judge_check_cfg(tmp_path: Path, *overrides: str):
    return compose_judge_check(
        [
            "judge=fake",
            "embedder=hash",
            f"paths.cache_dir={tmp_path}/cache",
            f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
            *overrides,
        ]
    )


def _all_tags(tmp_path: Path, run) -> dict[str, str]:
    """Every tag of ``run`` of :func:`_run`'s store (``judge.qualification.*`` details are
    kept in its ``tags.json``)."""
    return all_tags(MlflowClient(f"sqlite:///{tmp_path}/mlruns.db"), run)


def _run(tmp_path: Path, *overrides: str):
    """A cheap `rag-exp run` with the fake judge on one sample question; its MLflow run."""
    from rag_experiments.job import run_job

    sample = (PROJECT_ROOT / "datasets/sample/eval.jsonl").read_text().splitlines()[0]
    (tmp_path / "one.jsonl").write_text(sample + "\n", encoding="utf-8")
    corpus = tmp_path / "docs"
    corpus.mkdir(exist_ok=True)
    (corpus / "it-access-policy.md").write_text(
        (PROJECT_ROOT / "datasets/sample/source/it-access-policy.md").read_text()
    )
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "dataset=jsonl",
                f"dataset.path={tmp_path / 'one.jsonl'}",
                f"dataset.corpus={corpus}",
                "embedder=hash",
                "llm=fake",
                "judge=fake",
                "chunker=fixed",
                "progress=false",
                "metrics.suite={faithfulness: "
                "{_target_: rag_experiments.metrics.faithfulness.Faithfulness}}",
                f"paths.cache_dir={tmp_path}/cache",
                f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
                "run_name=after",
                *overrides,
            ],
        )
    GlobalHydra.instance().clear()
    run_job(cfg)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    return client.search_runs([exp], order_by=["attributes.start_time DESC"])[0]


@pytest.mark.slow
def test_judge_check_logs_a_qualification_that_a_later_run_carries_and_warns(tmp_path, capsys):
    report, run_id = run_judge_check(
        _judge_check_cfg(tmp_path, "n=10", "judge_check.probes=[faithfulness]")
    )
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    logged = client.get_run(run_id)
    assert client.get_experiment(logged.info.experiment_id).name == "judges"
    # the fake judge's script supports 1 claim of 2 → 0.5 < threshold 1.0: all "hallucinated"
    assert report["faithfulness"]["kappa"] == 0.0
    assert logged.data.metrics["faithfulness.kappa"] == 0.0
    assert logged.data.params["prompt.faithfulness"] == "faithfulness-v1"
    assert logged.data.params["qualified_judge.model"] == "fake-judge"
    capsys.readouterr()
    run = _run(tmp_path)
    out = capsys.readouterr().out
    tags = _all_tags(tmp_path, run)
    assert tags["judge.qualification.run_id"] == run_id
    assert tags["judge.qualification.kappa"] == "0.0000"
    assert tags["judge.qualification.warning"] == "below_min_kappa"
    assert "below judge.min_kappa=0.4" in tags["mlflow.note.content"]
    assert f"judge-check run {run_id}" in out and "WARNING" in out
    with pytest.raises(ConfigError, match="require_qualified=true refuses"):
        _run(tmp_path, "judge.require_qualified=true")
    quiet = _run(tmp_path, "judge.min_kappa=-1")  # 0 ≥ -1: qualified, no warning
    assert "judge.qualification.warning" not in _all_tags(tmp_path, quiet)
    assert _all_tags(tmp_path, quiet)["judge.qualification.kappa"] == "0.0000"


def test_no_qualification_is_printed_for_a_real_judge_only(monkeypatch, capsys):
    from rag_experiments.qualify import registry

    class Tracker:
        uri = "sqlite:///unused.db"
        tags: dict[str, str] = {}

        def set_tags(self, tags):
            self.tags.update(tags)

    monkeypatch.setattr(registry, "find_qualification", lambda uri, identity: None)
    settings = type("S", (), {"min_kappa": 0.4, "require_qualified": False})()
    identity = {"judge.provider": "fake", "judge.model": "fake-judge"}
    tracker = Tracker()
    assert registry.apply_qualification(settings, tracker, identity, scripted=True) is None
    assert capsys.readouterr().out == "" and tracker.tags == {"judge.qualification": "none"}
    identity = {"judge.provider": "embedded", "judge.model": "m.gguf"}
    registry.apply_qualification(settings, tracker, identity)
    assert capsys.readouterr().out.startswith("judge qualification: none for embedded/m.gguf;")


@pytest.mark.slow
def test_a_run_without_qualification_says_so_and_require_qualified_refuses(tmp_path, capsys):
    run = _run(tmp_path)
    assert "judge qualification" not in capsys.readouterr().out  # judge=fake: scripted
    assert run.data.tags["judge.qualification"] == "none"
    with pytest.raises(ConfigError, match="no qualification.*rag-exp judge-check"):
        _run(tmp_path, "judge.require_qualified=true")


@pytest.mark.slow
def test_cli_prints_json_and_rejects_a_bad_key(tmp_path):
    args = [
        sys.executable,
        "-m",
        "rag_experiments",
        "judge-check",
        "judge=fake",
        "embedder=hash",
        "n=6",
        f"paths.cache_dir={tmp_path}/c",
        f"tracking.uri=sqlite:///{tmp_path}/m.db",
        "judge_check.probes=[faithfulness]",
    ]
    done = subprocess.run([*args, "--json"], capture_output=True, text=True, check=True)
    faith = json.loads(done.stdout)["faithfulness"]
    assert {
        "n",
        "accuracy",
        "balanced_accuracy",
        "kappa",
        "ci_low",
        "ci_high",
        "confusion",
        "judge_calls",
        "wall_s",
    } <= set(faith) and faith["n"] == 6
    bad = subprocess.run([*args, "judge_check.tresh=1"], capture_output=True, text=True)
    assert bad.returncode == 1 and "tresh" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.llm
def test_embedded_judge_check_n20(tmp_path):
    """The must-show command with the bundled SmolLM2 judge (minutes on a CPU)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_experiments",
            "judge-check",
            "judge=embedded",
            "n=20",
            "embedder=hash",
            f"paths.cache_dir={tmp_path}/c",
            f"tracking.uri=sqlite:///{tmp_path}/m.db",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    faith = json.loads(done.stdout)["faithfulness"]
    assert faith["n"] + faith["n_failed"] == 20
    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    (run,) = client.search_runs([client.get_experiment_by_name("judges").experiment_id])
    assert all_tags(client, run)["judge.provider"] == "embedded"
