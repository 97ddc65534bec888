"""``rag-exp gate`` / ``promote`` on runs whose per-question values are set by hand in a sqlite
store: each verdict checked against the rule computed here (means, the paired statistics of
``analysis.compare``, the judge-noise formula by hand), the exit codes, the JUnit XML parsed
and its structure checked, the result logged on the candidate run."""

from __future__ import annotations

import itertools
import json
import math
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from rag_experiments.analysis.compare import compare_tables
from rag_experiments.analysis.gate import (
    FAIL,
    PASS,
    UNDECIDED,
    evaluate_tables,
    gate_runs,
    judge_noise_of_diff,
    noninferiority_p,
    parse_settings,
)
from rag_experiments.analysis.runs import MetricInfo
from rag_experiments.cli import main
from rag_experiments.errors import ConfigError
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.store import read_table

N = 40
N_RESAMPLES = 999
TYPES = ("lookup", "multi_hop")
# "lo" is declared lower-is-better and "hi" higher-is-better: same numbers, opposite verdicts
DIRECTION = {"hi": True, "lo": False, "flat": True, "judged": True}

rng = np.random.default_rng(3)
BASE = rng.uniform(0.3, 0.9, N)
NOISE = rng.uniform(-0.02, 0.02, N // 2)
SYMMETRIC = np.concatenate([NOISE, -NOISE])
UP = BASE + 0.2 + SYMMETRIC  # every question +0.2 ± 0.02
JUDGED_B = BASE + np.where(np.arange(N) % 2 == 0, -0.03, -0.01)  # a mean drop of 0.02


def _ids(n: int = N) -> list[str]:
    return [f"q{i:03d}" for i in range(n)]


def _log_run(
    uri: str,
    values: dict[str, np.ndarray],
    *,
    digest: str = "d1",
    ids: Sequence[str] | None = None,
    metrics: dict[str, float] | None = None,
    params: dict[str, str] | None = None,
) -> str:
    """A run as ``rag-exp run`` logs it: per-query table, metric specs, dataset digest."""
    ids = list(ids or _ids())
    tracker = MlflowTracker(uri, "gate-test", log_table=False)
    rows = []
    for i, sid in enumerate(ids):
        row = {"id": sid, "question_type": TYPES[i % 2], "user_input": f"question {sid}?"}
        row.update({name: float(col[i]) for name, col in values.items()})
        rows.append(row)
    with tracker.start_run(params=params or {"seed": 0}, config_yaml="", tags={}) as run_id:
        tracker.log_dataset("demo", digest, "demo", [{"id": s} for s in ids])
        tracker.log_table(rows)
        tracker.log_dict(
            {
                n: {"higher_is_better": DIRECTION[n], "range": [0.0, 2.0], "description": ""}
                for n in values
            },
            "metric_specs.json",
        )
        tracker.log_metrics(
            {**{n: float(np.mean(v)) for n, v in values.items()}, **(metrics or {})}
        )
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('gate')}/mlruns.db"


@pytest.fixture(scope="module")
def runs(store: str) -> dict[str, str]:
    """baseline; candidate (hi and lo up 0.2, flat unchanged); a copy of the baseline; a run
    of another dataset; two judged runs that log their judge's noise."""
    flat = rng.uniform(0.4, 0.6, N)
    noise_metrics = {"judged.judge_sd": 0.3}
    return {
        "base": _log_run(store, {"hi": BASE, "lo": BASE, "flat": flat}),
        "cand": _log_run(store, {"hi": UP, "lo": UP, "flat": flat}),
        "same": _log_run(store, {"hi": BASE, "lo": BASE, "flat": flat}),
        "other": _log_run(store, {"hi": BASE, "lo": BASE, "flat": flat}, digest="d2"),
        "jb": _log_run(
            store, {"judged": BASE}, metrics=noise_metrics, params={"judge": {"repeats": 3}}
        ),
        "jc": _log_run(
            store, {"judged": JUDGED_B}, metrics=noise_metrics, params={"judge": {"repeats": 3}}
        ),
    }


def _settings(rules: dict, **kw: object):
    return parse_settings({"rules": rules, "n_resamples": N_RESAMPLES, **kw})


def test_direction_comes_from_the_declaration_not_the_name(store: str, runs: dict) -> None:
    settings = _settings({"hi": {"max_drop": 0.05}, "lo": {"max_drop": 0.05}})
    result = gate_runs(store, runs["cand"], runs["base"], settings)
    verdict = {r.metric: r for r in result.results}
    # the same +0.2 shift: better for the higher-is-better metric, worse for the other
    assert verdict["hi"].status == PASS and verdict["lo"].status == FAIL
    # the numbers are the paired statistics of analysis.compare, Holm over the two metrics
    client = mlflow.MlflowClient(store)
    cmp = compare_tables(
        read_table(client, runs["base"]),
        read_table(client, runs["cand"]),
        [MetricInfo("hi", True, 0, 2), MetricInfo("lo", False, 0, 2)],
        n_resamples=N_RESAMPLES,
    )
    lo = next(s for s in cmp.overall() if s.metric == "lo")
    assert verdict["lo"].diff == pytest.approx(np.mean(UP) - np.mean(BASE))
    assert verdict["lo"].ci_low == lo.ci_low
    # non-inferiority p of lo: every w_i − 0.05 = 0.15 ± 0.02 > 0, so only the identity sign
    # pattern reaches the observed mean: p = 1/(1 + 999); hi's shifted values are all < 0
    # (p = 1); Holm over the two: 2 · 0.001
    assert verdict["lo"].p_holm == pytest.approx(2 / (1 + N_RESAMPLES))
    assert lo.ci_low > 0.05  # the whole CI of the worsening lies beyond the margin
    assert "whole CI" in verdict["lo"].message and "lower is better" in verdict["lo"].message
    assert result.exit_code == 1
    assert "FAIL" in result.lines()[1] and "lo max_drop 0.05 [all]" in result.lines()[1]


def test_a_drop_within_the_margin_passes(store: str, runs: dict) -> None:
    # lo worsens by 0.2: fails at margin 0.1, passes at margin 0.3 (CI high ≈ 0.21 < 0.3)
    fail = gate_runs(store, runs["cand"], runs["base"], _settings({"lo": {"max_drop": 0.1}}))
    ok = gate_runs(store, runs["cand"], runs["base"], _settings({"lo": {"max_drop": 0.3}}))
    assert fail.status == FAIL and ok.status == PASS and ok.exit_code == 0
    typed = gate_runs(
        store, runs["cand"], runs["base"], _settings({"lo": {"max_drop": 0.1, "by_type": True}})
    )
    assert [r.group for r in typed.results] == ["all", *TYPES]
    for k, t in enumerate(TYPES):  # per type: the paired difference of that type's rows
        r = typed.results[k + 1]
        assert r.group == t
        assert r.n == N // 2 and r.diff == pytest.approx(np.mean(UP[k::2] - BASE[k::2]))
        assert r.status == FAIL


def test_min_and_max_on_the_candidate_mean_and_by_type(store: str, runs: dict) -> None:
    mean = float(np.mean(UP))
    settings = _settings({
        "hi": {"min": mean - 1e-9, "by_type": True},
        "flat": {"max": 0.3},
    })  # fmt: skip
    result = gate_runs(store, runs["cand"], None, settings)
    lines = {(r.metric, r.kind, r.group): r for r in result.results}
    assert lines[("hi", "min", "all")].status == PASS
    assert lines[("hi", "min", "all")].candidate == pytest.approx(mean)
    for k, t in enumerate(TYPES):  # per type: the mean of that type's rows
        typed = float(np.mean(UP[k::2]))
        assert lines[("hi", "min", t)].candidate == pytest.approx(typed)
        assert lines[("hi", "min", t)].status == (PASS if typed >= mean - 1e-9 else FAIL)
    assert lines[("flat", "max", "all")].status == FAIL  # mean ≈ 0.5 > 0.3
    assert result.exit_code == 1


def test_judge_noise_keeps_a_small_drop_from_failing(store: str, runs: dict) -> None:
    settings = _settings({"judged": {"max_drop": 0.0}})
    # the same tables without the judge's noise known: a drop of 0.02 past a zero margin: fail
    client = mlflow.MlflowClient(store)
    tables = [read_table(client, runs[k]) for k in ("jc", "jb")]
    (plain,) = evaluate_tables(*tables, [MetricInfo("judged", True, 0, 2)], settings)
    assert plain.status == FAIL and math.isnan(plain.judge_noise)
    noisy = gate_runs(store, runs["jc"], runs["jb"], settings).results[0]
    # 1.96 * sqrt(0.3²/(40·3) + 0.3²/(40·3)) = 1.96 * 0.3 * sqrt(2/120) = 0.0759
    by_hand = 1.959963984540054 * 0.3 * math.sqrt(2 / 120)
    assert judge_noise_of_diff(N, 0.3, 3, 0.3, 3) == pytest.approx(by_hand)
    assert noisy.judge_noise == pytest.approx(by_hand)
    assert noisy.diff == pytest.approx(-0.02)
    assert noisy.status == PASS and "within the judge noise ±0.0759" in noisy.message


def test_undecided_runs(store: str, runs: dict) -> None:
    settings = _settings({"hi": {"max_drop": 0.05}, "missing": {"min": 0.5}})
    other = gate_runs(store, runs["cand"], runs["other"], settings)
    assert other.status == UNDECIDED and other.exit_code == 2
    assert "different questions" in other.problem
    assert [(r.metric, r.kind, r.limit, r.group, r.status, r.message) for r in other.results] == [
        ("hi", "max_drop", 0.05, "all", UNDECIDED, other.problem),
        ("missing", "min", 0.5, "all", UNDECIDED, other.problem),
    ]
    same = gate_runs(store, runs["cand"], runs["base"], settings)
    missing = next(r for r in same.results if r.metric == "missing")
    assert missing.status == UNDECIDED
    assert missing.message.startswith("metric missing is missing from the candidate run; it has ")
    few = gate_runs(
        store, runs["cand"], runs["base"], _settings({"hi": {"max_drop": 0.1}}, min_pairs=41)
    )
    assert few.results[0].status == UNDECIDED and "only 40 paired rows" in few.results[0].message


def test_rules_are_checked() -> None:
    with pytest.raises(ConfigError, match="unknown key rules.hi.maxdrop; did you mean 'max_drop'"):
        parse_settings({"rules": {"hi": {"maxdrop": 0.1}}})
    with pytest.raises(ConfigError, match="no rules"):
        parse_settings({"rules": {}})
    with pytest.raises(ConfigError, match="alpha"):
        parse_settings({"rules": {"hi": {"min": 0.1}}, "alpha": 1.5})


def test_cli_exit_codes_junit_markdown_and_logged_result(
    store: str, runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(
        f"n_resamples: {N_RESAMPLES}\nrules:\n  hi: {{max_drop: 0.05}}\n  lo: {{max_drop: 0.05}}\n"
    )
    junit, md = tmp_path / "junit.xml", tmp_path / "summary.md"
    base = ["--config", str(cfg), "--tracking-uri", store]
    argv = ["gate", runs["cand"], "--baseline", runs["base"], *base]
    assert main([*argv, "--junit", str(junit), "--markdown", str(md)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PASS") and "hi max_drop" in out[0]
    assert out[1].startswith("FAIL") and "lo max_drop 0.05 [all]" in out[1]
    assert out[2].startswith("gate FAIL")
    # JUnit: testsuites > testsuite with counts > one testcase per rule, a failure in the failed
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("2", "1", "0")
    assert [c.get("name") for c in cases] == ["hi max_drop 0.05 [all]", "lo max_drop 0.05 [all]"]
    assert cases[0].find("failure") is None and cases[1].find("failure") is not None
    assert "lower is better" in cases[1].find("failure").get("message")
    assert "| ❌ fail | `lo` |" in md.read_text()
    run = mlflow.MlflowClient(store).get_run(runs["cand"])
    assert run.data.tags["gate.result"] == "fail"
    assert run.data.tags["gate.baseline"] == runs["base"]
    assert run.data.tags["gate.failed"] == "lo max_drop 0.05 [all]"
    logged = {a.path for a in mlflow.MlflowClient(store).list_artifacts(runs["cand"], "gate")}
    assert logged == {"gate/junit.xml", "gate/summary.md", "gate/gate.json"}
    # the baseline against a copy of itself: pass; against another dataset: undecided
    assert main(["gate", runs["same"], "--baseline", runs["base"], *base]) == 0
    assert (
        main(["gate", runs["other"], "--baseline", runs["base"], *base, "--junit", str(junit)]) == 2
    )
    errors = ET.parse(junit).getroot().find("testsuite").findall("testcase/error")
    assert len(errors) == 2 and "different questions" in errors[0].get("message")
    capsys.readouterr()


def test_promote_sets_an_alias_the_gate_resolves(
    store: str, runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = ["--tracking-uri", store]
    assert main(["promote", runs["base"], "--alias", "production", *uri]) == 0
    exp = mlflow.MlflowClient(store).get_experiment_by_name("gate-test")
    assert exp.tags["rag_exp.alias.production"] == runs["base"]
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(f"n_resamples: {N_RESAMPLES}\nrules: {{lo: {{max_drop: 0.05}}}}\n")
    argv = ["gate", runs["cand"], "--config", str(cfg), "--no-log", "--json", *uri]
    assert main([*argv, "--baseline", "production"]) == 1
    printed = capsys.readouterr().out
    data = json.loads(printed[printed.index("{") :])
    assert data["baseline"] == runs["base"] and data["baseline_ref"] == "production"
    assert main([*argv, "--baseline", "staging"]) == 2  # unknown alias: one error line, the fix
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert captured.out == "" and line.startswith("rag-exp gate: error: baseline 'staging'")
    assert "aliases: production" in line and "rag-exp promote <run id> --alias staging" in line


def test_promote_exits_2_on_a_wrong_input_and_sets_nothing(
    store: str, runs: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown run or a bad alias name is an input error: exit 2 (as gate's), one line,
    and the experiment gets no alias tag."""
    uri = ["--tracking-uri", store]
    assert main(["promote", "f" * 32, "--alias", "ghost", *uri]) == 2
    assert main(["promote", runs["base"], "--alias", "bad alias!", *uri]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(x.startswith("rag-exp promote: error: ") for x in lines)
    assert "'bad alias!': use letters, digits" in lines[1]
    tags = mlflow.MlflowClient(store).get_experiment_by_name("gate-test").tags
    assert "rag_exp.alias.ghost" not in tags and "rag_exp.alias.bad alias!" not in tags


def test_gate_group_composes_and_its_rules_parse(compose_cfg) -> None:
    from omegaconf import OmegaConf

    from rag_experiments.job import gate_settings

    assert compose_cfg().gate is None  # no gate unless asked
    cfg = compose_cfg("gate=default", "gate.baseline=production", "gate.alpha=0.1")
    settings = gate_settings(cfg, in_sweep=False)
    assert settings.alpha == 0.1 and cfg.gate.baseline == "production"
    rules = OmegaConf.to_container(cfg.gate.rules)
    assert {r.metric: r.max_drop for r in settings.rules} == {
        m: r["max_drop"] for m, r in rules.items()
    }
    with pytest.raises(ConfigError, match="gate.baseline is not set"):
        gate_settings(compose_cfg("gate=default"), in_sweep=False)
    with pytest.raises(ConfigError, match="sweep"):
        gate_settings(cfg, in_sweep=True)


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["-m", "gate=default", "retriever.top_k=1,2"], True),  # every job's gate
        (["--multirun", "+gate=default", "gate.baseline=production"], True),
        (["-m", "gate=null,default"], True),  # the gate swept
        (["-m", "gate.baseline=a,b"], True),  # a gate key swept
        (["hydra.mode=MULTIRUN", "gate=default"], True),
        (["-m", "gate=null", "retriever.top_k=1,2"], False),  # no gate
        (["-m", "~gate", "retriever.top_k=1,2"], False),
        (["-m", "gateway.url=x", "retriever.top_k=1,2"], False),  # another key
        (["gate=default", "gate.baseline=production"], False),  # one run: gated at its end
        (["-m", "gate=[unclosed"], False),  # Hydra's own error, later
    ],
)
def test_a_sweep_with_a_gate_is_refused_from_its_arguments(args: list[str], refused: bool) -> None:
    from rag_experiments.app import refuse_gated_sweep
    from rag_experiments.errors import UsageError
    from rag_experiments.job import GATE_IN_SWEEP

    if refused:
        with pytest.raises(UsageError) as error:
            refuse_gated_sweep(args)
        assert str(error.value) == GATE_IN_SWEEP and error.value.exit_code == 2
    else:
        refuse_gated_sweep(args)


def test_noninferiority_p_is_the_exact_sign_flip_p_of_the_shifted_differences() -> None:
    # 5 pairs: 2⁵ = 32 sign patterns ≤ n_resamples, so the test is exact; enumerate them here
    w = np.array([0.10, -0.02, 0.07, 0.03, 0.12])
    x = w - 0.05
    means = [np.mean(np.array(signs) * x) for signs in itertools.product((1, -1), repeat=5)]
    by_hand = sum(m >= np.mean(x) - 1e-12 for m in means) / 32
    assert noninferiority_p(w, 0.05, n_resamples=9999) == pytest.approx(by_hand)
    assert math.isnan(noninferiority_p([0.3], 0.05))  # one pair: no test


def test_a_worsening_at_the_margin_fails_about_alpha_of_the_time() -> None:
    # The reviewer's simulation, small: true worsening exactly at the margin (H0's boundary),
    # symmetric noise; the old rule ("p of d != 0 < alpha and observed w > margin") failed about
    # half such candidates, the non-inferiority test about alpha = 0.05 (binomial SD of the
    # rate over 300 draws: 0.0126), and a worsening inside the margin less often.
    sim = np.random.default_rng(11)
    margin, n, draws = 0.05, 40, 300
    at = [noninferiority_p(margin + sim.normal(0, 0.2, n), margin, seed=k, n_resamples=199)
          for k in range(draws)]  # fmt: skip
    inside = [noninferiority_p(0.04 + sim.normal(0, 0.2, n), margin, seed=k, n_resamples=199)
              for k in range(draws)]  # fmt: skip
    rate_at = np.mean(np.array(at) < 0.05)
    rate_inside = np.mean(np.array(inside) < 0.05)
    assert 0.01 <= rate_at <= 0.05 + 3 * 0.0126
    assert rate_inside <= rate_at
    far = [noninferiority_p(0.2 + sim.normal(0, 0.2, n), margin, seed=k, n_resamples=199)
           for k in range(50)]  # fmt: skip
    assert np.mean(np.array(far) < 0.05) > 0.9  # a worsening 3× the margin is caught


def test_bounds_do_not_need_the_metric_in_the_baseline() -> None:
    ids = _ids()
    cand = pd.DataFrame({"id": ids, "m": UP})
    base = pd.DataFrame({"id": ids, "other": BASE})
    settings = _settings({"m": {"min": 0.5, "max_drop": 0.1}})
    bound, drop = evaluate_tables(cand, base, [MetricInfo("m", True, 0, 2)], settings)
    assert bound.kind == "min" and bound.status == PASS
    assert bound.candidate == pytest.approx(float(np.mean(UP)))  # > 0.5: BASE ≥ 0.3, +0.2
    assert drop.status == UNDECIDED
    assert drop.message.startswith("metric m is missing from the baseline run; it has ")


@pytest.mark.parametrize("key", ["alpha", "min_pairs", "seed", "n_resamples"])
def test_a_non_number_setting_is_a_config_error_naming_the_key(key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}='abc': input should be a valid"):
        parse_settings({"rules": {"m": {"min": 0.5}}, key: "abc"})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "nan"])
@pytest.mark.parametrize("key", ["min", "max", "max_drop"])
def test_a_non_finite_limit_is_refused(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=f"rules.m.{key}=.*(finite|valid number)"):
        parse_settings({"rules": {"m": {key: value}}})


def test_gate_metrics_and_baseline_are_checked_before_work(store: str, runs: dict) -> None:
    from rag_experiments.analysis.gate import check_baseline, check_rule_metrics

    specs = [MetricInfo("nDCG@10"), MetricInfo("MRR"), MetricInfo("Hit@10")]
    settings = _settings({"nDCG@1O": {"max_drop": 0.02}})  # letter O for zero
    with pytest.raises(ConfigError, match="did you mean 'nDCG@10'"):
        check_rule_metrics(settings, specs)
    check_rule_metrics(_settings({"MRR": {"min": 0.1}}), specs)  # no error
    edges = _settings({"MRR": {"min": 1.0}, "Hit@10": {"max": 0.0}})
    check_rule_metrics(edges, specs)  # the range's own ends can be met: no error
    with pytest.raises(ConfigError, match=r"rules.MRR.min=1.01 is outside the metric's range"):
        check_rule_metrics(_settings({"MRR": {"min": 1.01}}), specs)
    check_baseline(store, "gate-test", runs["base"])  # a run id: no error
    with pytest.raises(ConfigError, match="neither an alias of experiment 'gate-test'"):
        check_baseline(store, "gate-test", "prodution")


@pytest.mark.slow  # builds the parts of a run (~6 s)
def test_run_refuses_an_unknown_gate_metric_or_baseline_before_a_run_opens(
    compose_cfg, tmp_path: Path
) -> None:
    from rag_experiments.job import run_job

    small = ["llm=fake", "embedder=hash", "metrics=retrieval"]
    cfg = compose_cfg(*small, "gate=default", "gate.baseline=production")
    cfg.gate.rules = {"ndcg@10": {"max_drop": 0.02}}
    with pytest.raises(ConfigError, match="rules.ndcg@10 .*did you mean 'nDCG@10'"):
        run_job(cfg)
    cfg.gate.rules = {"nDCG@10": {"min": 1.2}}
    with pytest.raises(ConfigError, match=r"nDCG@10.min=1.2 is outside .* range \[0, 1\]"):
        run_job(cfg)
    cfg.gate.rules = {"nDCG@10": {"max_drop": 0.02}}
    with pytest.raises(ConfigError, match="gate.baseline='production' is neither an alias"):
        run_job(cfg)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    exp = client.get_experiment_by_name("rag-experiments")
    assert exp is None or client.search_runs([exp.experiment_id]) == []  # no run was opened


def test_the_p_shown_everywhere_is_the_holm_noninferiority_p_the_rule_decides_on(
    store: str, runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # hi rises by 0.2: every shifted worsening −0.2 − 0.05 < 0, so only the identity sign
    # pattern is as extreme: the one-sided p of "worsening > 0.05" is 1 (Holm: min(1, 2·1)),
    # while compare's two-sided p of "no difference" is 2/(1 + 999) (the identity and the
    # all-flipped pattern; Holm: 4/1000). lo falls by 0.2: its non-inferiority p is 1/1000,
    # Holm 2/1000.
    settings = _settings({"hi": {"max_drop": 0.05}, "lo": {"max_drop": 0.05}})
    decided = {r.metric: r for r in gate_runs(store, runs["cand"], runs["base"], settings).results}
    assert decided["hi"].p_holm == pytest.approx(1.0)
    assert decided["lo"].p_holm == pytest.approx(2 / (1 + N_RESAMPLES))
    client = mlflow.MlflowClient(store)
    two_sided = {
        s.metric: s.p_holm
        for s in compare_tables(
            read_table(client, runs["base"]),
            read_table(client, runs["cand"]),
            [MetricInfo("hi", True, 0, 2), MetricInfo("lo", False, 0, 2)],
            n_resamples=N_RESAMPLES,
        ).overall()
    }
    assert two_sided["hi"] == pytest.approx(4 / (1 + N_RESAMPLES))  # not what the rule uses
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(
        f"n_resamples: {N_RESAMPLES}\nrules:\n  hi: {{max_drop: 0.05}}\n  lo: {{max_drop: 0.05}}\n"
    )
    junit, md = tmp_path / "junit.xml", tmp_path / "summary.md"
    argv = ["gate", runs["cand"], "--baseline", runs["base"], "--config", str(cfg)]
    argv += ["--tracking-uri", store, "--junit", str(junit), "--markdown", str(md)]
    assert main(argv) == 1
    out = capsys.readouterr().out.splitlines()
    assert "p(worsening > 0.05) Holm 1," in out[0]  # the console line of hi
    assert "p(worsening > 0.05) Holm 0.002," in out[1]
    assert "Holm-adjusted non-inferiority p 0.002 < alpha 0.05" in out[1]
    rows = {line.split("`")[1]: line.split(" | ") for line in md.read_text().splitlines()
            if line.startswith("| ") and "`" in line}  # fmt: skip
    assert rows["hi"][9] == "1.0000" and rows["lo"][9] == "0.0020"  # the "p (Holm)" column
    failure = ET.parse(junit).getroot().find("testsuite/testcase/failure")
    assert "p(worsening > 0.05) Holm 0.002," in failure.get("message")
    logged = json.loads(
        Path(client.download_artifacts(runs["cand"], "gate/gate.json", str(tmp_path))).read_text()
    )
    assert {r["metric"]: r["p_holm"] for r in logged["rules"]} == pytest.approx(
        {"hi": decided["hi"].p_holm, "lo": decided["lo"].p_holm}
    )


def test_a_baseline_that_is_the_candidate_is_warned_about_and_still_decided(
    store: str, runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = ["--tracking-uri", store]
    assert main(["promote", runs["same"], "--alias", "self", *uri]) == 0
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(f"n_resamples: {N_RESAMPLES}\nrules: {{hi: {{max_drop: 0.05}}}}\n")
    argv = ["gate", runs["same"], "--baseline", "self", "--config", str(cfg), "--no-log", *uri]
    assert main(argv) == 0  # every difference 0: no worsening beyond the margin
    captured = capsys.readouterr()
    (warning,) = [x for x in captured.err.splitlines() if x.startswith("warning:")]
    assert "the candidate is the baseline" in warning and runs["same"] in warning
    assert captured.out.splitlines()[-1].startswith("gate PASS")
    assert main([*argv[:3], runs["base"], *argv[4:]]) == 0
    assert "the candidate is the baseline" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "phrase"),
    [
        (None, "no such file and no such preset"),
        ("rules: [a, b\n", "not valid YAML"),
        ("rules:\n  hi: {max_dorp: 0.02}\n", "unknown key rules.hi.max_dorp; did you mean"),
        ("rules:\n  hi: {max_drop: -0.02}\n", "rules.hi.max_drop=-0.02: input should be greater"),
        ("alpah: 0.1\nrules:\n  hi: {max_drop: 0.02}\n", "unknown key alpah; did you mean 'alpha'"),
        ("rules:\n  hi: {max_drop: true}\n", "rules.hi.max_drop=True: input should be a valid num"),
        ("rules:\n  hi: {min: 0.1, by_type: 'yes'}\n", "rules.hi.by_type='yes': input should"),
        ("rules:\n  hi: {min: 2, max: -1}\n", "rules.hi: min 2 > max -1: no mean can pass"),
    ],
)
def test_a_wrong_gate_input_exits_2_not_1(
    store: str,
    runs: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: str | None,
    phrase: str,
) -> None:
    cfg = tmp_path / "gate.yaml"
    if config is not None:
        cfg.write_text(config)
    argv = ["gate", runs["cand"], "--baseline", runs["base"], "--config", str(cfg)]
    assert main([*argv, "--no-log", "--tracking-uri", store]) == 2  # 1 would read as a fail
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("rag-exp gate: error: ") and phrase in line
    if config is not None:  # the line names the file
        assert str(cfg) in line


def test_gate_last_without_a_finished_run_or_store_exits_2_and_creates_nothing(
    store: str, runs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    argv = ["gate", "last", "--experiment", "no-such-experiment", "--tracking-uri", store]
    assert main(argv) == 2
    assert "has no finished run" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # an empty folder: the default sqlite:///mlruns.db is not here
    assert main(["gate", "last", "--baseline", "production"]) == 2
    assert main(["promote", "last"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("no MLflow store here" in x for x in err)
    assert "pass --tracking-uri" in err[0] and str(tmp_path / "mlruns.db") in err[0]
    assert not (tmp_path / "mlruns.db").exists()


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["gate", "0" * 32, "--baseline", "production"], 2),
        (["gate", "last"], 2),
        (["promote", "last"], 2),
        (["compare", "a" * 32, "b" * 32], 1),
    ],
    ids=["gate-id", "gate-last", "promote-last", "compare"],
)
def test_a_dead_tracking_server_fails_a_read_command_in_seconds(
    argv: list[str], code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.mlflow_server import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    assert main([*argv, "--tracking-uri", dead]) == code
    assert time.monotonic() - started < 10.0  # a refused connection: two tries, 1 s apart
    (line,) = capsys.readouterr().err.splitlines()
    assert f"the MLflow tracking server {dead} cannot be reached" in line
    assert "--tracking-uri" in line and "not found" not in line


def test_config_takes_a_preset_name_or_a_path(
    store: str, runs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag_experiments.commands.gate import GATE_PRESETS, gate_file, read_gate_file

    assert gate_file("retrieval") == gate_file("retrieval.yaml") == GATE_PRESETS / "retrieval.yaml"
    own = tmp_path / "retrieval"  # a path is a path even when a preset has its stem
    own.write_text("rules: {hi: {min: 0.1}}\n")
    assert gate_file(str(own)) == own
    raw = read_gate_file("retrieval")  # the Hydra defaults list is not a setting
    assert raw == {"rules": {"nDCG@10": {"max_drop": 0.02}, "Hit@5": {"max_drop": 0.02}}}
    assert parse_settings(raw).rules[1].metric == "Hit@5"
    argv = ["gate", runs["cand"], "--baseline", runs["base"], "--tracking-uri", store]
    assert main([*argv, "--no-log", "--config", "nosuch"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--config nosuch: no such file and no such preset" in line
    assert "(default, retrieval)" in line


def test_config_prefers_an_existing_file_then_the_users_overlay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rag_experiments.commands.gate import GATE_PRESETS, gate_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "retrieval.yaml").write_text("rules: {hi: {min: 0.1}}\n")
    assert gate_file("retrieval.yaml") == Path("retrieval.yaml")  # the user's own file
    assert gate_file("retrieval") == GATE_PRESETS / "retrieval.yaml"  # no such file: preset
    (tmp_path / "conf" / "gate").mkdir(parents=True)
    (tmp_path / "conf" / "gate" / "mine.yaml").write_text("rules: {hi: {min: 0.1}}\n")
    assert gate_file("mine") == (tmp_path / "conf" / "gate" / "mine.yaml").resolve()


def test_gate_retrieval_group_composes_and_is_validated(compose_cfg) -> None:
    from rag_experiments.job import gate_settings

    settings = gate_settings(compose_cfg("gate=retrieval", "gate.baseline=b"), in_sweep=False)
    assert [(r.metric, r.max_drop) for r in settings.rules] == [("nDCG@10", 0.02), ("Hit@5", 0.02)]
    # `gate=` of rag-exp run goes through the same strict schema as --config
    with pytest.raises(ConfigError, match=r"gate: rules.MRR.max_drop=True: input should be"):
        gate_settings(
            compose_cfg("gate=retrieval", "gate.baseline=b", "+gate.rules.MRR.max_drop=true"),
            in_sweep=False,
        )
    with pytest.raises(ConfigError, match=r"gate: rules.MRR: min 0.9 > max 0.1"):
        gate_settings(
            compose_cfg("gate=retrieval", "gate.baseline=b", "+gate.rules.MRR.min=0.9",
                        "+gate.rules.MRR.max=0.1"),
            in_sweep=False,
        )  # fmt: skip


def test_a_missing_metric_lists_eight_names_closest_first() -> None:
    # difflib ratios against "ndcg@10": ndcg@20 12/14, ndcg@5 10/13, hit@5 2/12 (the "@"),
    # the zq*/zz* names share no character (0: alphabetical)
    others = [f"{p}{c}" for p in ("zq", "zz") for c in "qrstuvwxyz"]
    names = ["Hit@5", "nDCG@5", "nDCG@20", *others]
    cand = pd.DataFrame({"id": _ids(), **{n: BASE for n in names}})
    infos = [MetricInfo(n, True, 0, 1) for n in names]
    (r,) = evaluate_tables(cand, None, infos, _settings({"nDCG@10": {"min": 0.5}}))
    assert r.status == UNDECIDED
    assert r.message == (
        "metric nDCG@10 is missing from the candidate run; it has nDCG@20, nDCG@5, Hit@5, "
        "zqq, zqr, zqs, zqt, zqu, … (15 more)"
    )


def _ended_run(uri: str, status: str, tags: dict[str, str] | None = None) -> str:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("gate-test").experiment_id
    run = client.create_run(exp, tags=tags or {})
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_a_sweep_parent_or_failed_run_is_refused_with_the_reason(
    store: str, runs: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = _ended_run(store, "FINISHED", {"sweep.dir": "multirun/x"})
    failed = _ended_run(store, "FAILED")
    uri = ["--tracking-uri", store, "--no-log"]
    assert main(["gate", parent, "--baseline", runs["base"], *uri]) == 2
    assert main(["gate", runs["cand"], "--baseline", failed, *uri]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    first, second = captured.err.splitlines()
    assert first == (
        f"rag-exp gate: error: run {parent} is a sweep parent and has no per-query results; "
        "gate one of its child runs (rag-exp report <parent> lists them)"
    )
    assert f"run {failed} is FAILED, not FINISHED" in second and "dataset digest" not in second
    # the library's gate (pytest plugin, end of a run) says the same as its undecided reason
    settings = _settings({"hi": {"max_drop": 0.05}})
    assert gate_runs(store, runs["cand"], failed, settings).problem.startswith(
        f"run {failed} is FAILED"
    )


def test_the_digest_message_names_each_run_beside_its_digest(store: str, runs: dict) -> None:
    result = gate_runs(store, runs["cand"], runs["other"], _settings({"hi": {"max_drop": 0.05}}))
    assert (  # cand was logged with digest d1, other with d2
        f"dataset digest of candidate {runs['cand']}: d1 vs baseline {runs['other']}: d2"
        in result.problem
    )


def test_an_unknown_run_is_one_error_line(store: str, runs: dict, capsys) -> None:
    uri = ["--tracking-uri", store, "--no-log"]
    assert main(["gate", runs["cand"], "--baseline", "nosuch", *uri]) == 2
    assert main(["gate", "f" * 32, "--baseline", runs["base"], *uri]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no UNDECIDED line per rule, no summary
    first, second = captured.err.splitlines()
    assert first.startswith("rag-exp gate: error: baseline 'nosuch' is neither an alias")
    assert second.startswith(f"rag-exp gate: error: run '{'f' * 32}' not found")


@pytest.mark.parametrize("alias", ["last", "LAST"])
def test_promote_refuses_a_reserved_alias(
    store: str, runs: dict, alias: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["promote", runs["base"], "--alias", alias, "--tracking-uri", store]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"rag-exp promote: error: alias {alias!r} is reserved")
    tags = mlflow.MlflowClient(store).get_experiment_by_name("gate-test").tags
    assert f"rag_exp.alias.{alias}" not in tags


def test_the_run_config_and_a_gate_file_get_the_same_defaults(compose_cfg) -> None:
    """`gate=` of rag-exp run (GateConf) and a `--config` file that names only rules read their
    defaults from one place: the settings both produce are equal, field by field."""
    from rag_experiments.analysis.gate import GateSettings
    from rag_experiments.job import gate_settings

    from_run = gate_settings(compose_cfg("gate=retrieval", "gate.baseline=b"), in_sweep=False)
    rules = {r.metric: {"max_drop": r.max_drop} for r in from_run.rules}
    from_file = parse_settings({"rules": rules})
    assert from_run == from_file
    assert (from_file.alpha, from_file.min_pairs, from_file.seed, from_file.n_resamples) == (
        0.05, 5, 0, 9999,
    )  # fmt: skip
    assert from_file == GateSettings(from_file.rules)


@pytest.mark.parametrize(
    ("rule", "phrase"), [("{min: 2.5}", "min=2.5"), ("{max: -0.1}", "max=-0.1")]
)
def test_a_bound_outside_the_metrics_range_exits_2(
    store: str,
    runs: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rule: str,
    phrase: str,
) -> None:
    """hi is declared on [0, 2] (_log_run): a min above 2 or a max below 0 could never pass; a
    wrong input (exit 2, one line), not a failed rule (exit 1)."""
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(f"rules:\n  hi: {rule}\n")
    argv = ["gate", runs["cand"], "--baseline", runs["base"], "--config", str(cfg)]
    assert main([*argv, "--no-log", "--tracking-uri", store]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"rules.hi.{phrase} is outside the metric's range [0, 2]: no mean can pass" in line


def test_no_module_of_the_gate_imports_mlflow() -> None:
    """Every MLflow call of the gate sits in analysis/gate/store_io.py: the other modules of the
    package (and ``rag-exp gate``'s command module) import no ``mlflow`` module, read from
    their syntax trees."""
    import ast

    import rag_experiments.analysis.gate as gate_pkg
    import rag_experiments.commands.gate as gate_command

    def imports_mlflow(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            if any(name == "mlflow" or name.startswith("mlflow.") for name in names):
                return True
        return False

    folder = Path(gate_pkg.__file__).parent
    found = {p.name for p in folder.glob("*.py") if imports_mlflow(p)}
    assert found == set()  # store_io reads through tracking.store.RunStore
    assert not imports_mlflow(Path(gate_command.__file__))


def test_promote_refuses_a_run_that_is_not_finished(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A killed run stays RUNNING in the store; promoting it set an alias that made every
    later ``gate --baseline`` exit 2. Refused (exit 2, one line saying how to finish it)."""
    client = mlflow.MlflowClient(store)
    exp_id = client.create_experiment("killed")
    running = client.create_run(exp_id).info.run_id  # never terminated: RUNNING
    failed = client.create_run(exp_id, tags={"error": "timeout"}).info.run_id
    client.set_terminated(failed, "FAILED")
    uri = ["--tracking-uri", store]
    assert main(["promote", running, "--alias", "production", *uri]) == 2
    assert main(["promote", failed, "--alias", "production", *uri]) == 2
    err = capsys.readouterr().err.splitlines()
    first, second = [x for x in err if x.startswith("rag-exp promote")]
    assert first.startswith(f"rag-exp promote: error: run {running} is RUNNING (no error")
    assert f"resume={running}" in first and "rag-exp promote last" in first
    assert f"run {failed} is FAILED (timeout), not FINISHED" in second
    assert "rag_exp.alias.production" not in client.get_experiment(exp_id).tags
    client.set_terminated(running, "FINISHED")
    assert main(["promote", running, "--alias", "production", *uri]) == 0
