"""``rag-exp compare``: runs written with the tracker from known per-question values, compared
against numbers computed here by hand, by exhaustive enumeration, or by scipy directly."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path

import mlflow
import numpy as np
import pytest
from scipy import stats

from rag_experiments.analysis.compare import compare_runs, compare_tables, holm, paired_test
from rag_experiments.analysis.paired import Threshold
from rag_experiments.analysis.runs import MetricInfo
from rag_experiments.cli import main
from rag_experiments.commands.compare import log_comparison
from rag_experiments.errors import DatasetError
from rag_experiments.tracking.mlflow_tracker import MlflowTracker

N = 60
TYPES = ("procedural", "multi_hop")
SPECS = {
    "nDCG@10": MetricInfo("nDCG@10"),
    "faithfulness": MetricInfo("faithfulness"),
    "Hit@5": MetricInfo("Hit@5"),
    "refusal": MetricInfo("refusal", False),
}
N_RESAMPLES = 999  # fewer than scipy's default keeps the tests fast; same value on both sides

rng = np.random.default_rng(7)
BASE = rng.uniform(0.0, 0.6, N)
NOISE = rng.uniform(-0.15, 0.15, N // 2)
SYMMETRIC = np.concatenate([NOISE, -NOISE])  # mean exactly 0 up to rounding: "no shift"
FAITH_A = rng.uniform(0.2, 0.8, N)
# Hit@5: s003 and s011 gained (0 -> 1), s007 lost (1 -> 0); everything else the same
HIT_A = np.array([1.0 if i % 2 else 0.0 for i in range(N)])
HIT_B = HIT_A.copy()
HIT_B[[3, 11]], HIT_B[7] = 1.0, 0.0
HIT_A[[3, 11]] = 0.0
VALUES = {
    "a": {"nDCG@10": BASE, "faithfulness": FAITH_A, "Hit@5": HIT_A, "refusal": np.zeros(N)},
    "b": {
        "nDCG@10": BASE + 0.2 + SYMMETRIC,
        "faithfulness": FAITH_A + SYMMETRIC,
        "Hit@5": HIT_B,
        "refusal": np.where(np.arange(N) == 5, 1.0, 0.0),
    },
}


def _ids() -> list[str]:
    return [f"s{i:03d}" for i in range(N)]


def _log_run(
    uri: str, values: dict[str, np.ndarray], digest: str = "d1", ids: Sequence[str] | None = None
) -> str:
    """A run as ``rag-exp run`` logs it: per-query table, metric specs, means, dataset digest."""
    ids = list(ids or _ids())
    tracker = MlflowTracker(uri, "compare-test", log_table=False)
    rows = []
    for i, sid in enumerate(ids):
        row = {"id": sid, "question_type": TYPES[i % 2], "user_input": f"question {sid}?"}
        for name, col in values.items():
            row[name] = float(col[i])
            row[f"{name}.reason"] = None
        rows.append(row)
    with tracker.start_run(params={"seed": 0}, config_yaml="seed: 0\n", tags={}) as run_id:
        tracker.log_dataset("demo", digest, "demo", [{"id": s} for s in ids])
        tracker.log_table(rows)
        tracker.log_dict(
            {
                n: {
                    "higher_is_better": SPECS[n].higher_is_better,
                    "range": [0.0, 1.0],
                    "description": "",
                }
                for n in values
            },
            "metric_specs.json",
        )
        tracker.log_metrics({n: float(np.mean(v)) for n, v in values.items()})
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One sqlite store for the module (creating one costs seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('store')}/mlruns.db"


@pytest.fixture(scope="module")
def runs(store: str) -> tuple[str, str, str]:
    return store, _log_run(store, VALUES["a"]), _log_run(store, VALUES["b"])


def _scipy_p(a: np.ndarray, b: np.ndarray, seed: int = 0) -> float:
    res = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(y - x, axis=axis),
        permutation_type="samples",
        vectorized=True,
        n_resamples=N_RESAMPLES,
        rng=seed,
    )
    return float(res.pvalue)


def test_holm_matches_hand_values() -> None:
    # sorted: 0.005*4 = 0.02; 0.01*3 = 0.03; 0.03*2 = 0.06; 0.04*1 = 0.04 -> max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = holm([0.2, math.nan, 0.6])  # NaN left out of m = 2
    assert out[0] == pytest.approx(0.4) and math.isnan(out[1]) and out[2] == pytest.approx(0.6)
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1


def test_sign_flip_p_equals_exhaustive_enumeration() -> None:
    a = np.zeros(8)
    b = np.array([0.3, 0.1, 0.25, -0.05, 0.4, 0.2, -0.1, 0.15])
    d = b - a
    observed = abs(d.mean())
    # all 2^8 = 256 sign patterns (<= n_resamples, so scipy enumerates them exactly)
    hits = sum(
        abs(np.mean(d * np.array(s))) >= observed - 1e-12
        for s in itertools.product((1.0, -1.0), repeat=8)
    )
    _, _, _, p = paired_test(a, b, seed=0, n_resamples=N_RESAMPLES)
    assert p == pytest.approx(hits / 256)


def test_diff_ci_p_and_flips_from_logged_runs(runs: tuple[str, str, str]) -> None:
    uri, run_a, run_b = runs
    result = compare_runs(run_a, run_b, tracking_uri=uri, n_resamples=N_RESAMPLES)
    overall = {s.metric: s for s in result.overall()}
    assert set(overall) == set(SPECS) and result.n_common == N

    client = mlflow.MlflowClient(uri)
    means = {k: client.get_run(r).data.metrics for k, r in (("a", run_a), ("b", run_b))}
    for name in SPECS:
        a, b = VALUES["a"][name], VALUES["b"][name]
        s = overall[name]
        assert s.n == N
        assert s.diff == np.mean(b) - np.mean(a)  # exactly
        key = name.replace("@", "_at_")  # the logged metric's key
        assert s.diff == means["b"][key] - means["a"][key]
        assert s.p_value == _scipy_p(a, b)  # same data, seed, resamples
    assert overall["nDCG@10"].diff == pytest.approx(0.2)
    assert overall["nDCG@10"].ci_low > 0  # the injected +0.2 shift
    assert overall["nDCG@10"].verdict == "better"
    assert overall["faithfulness"].ci_low < 0 < overall["faithfulness"].ci_high  # no shift
    assert overall["faithfulness"].verdict == ""
    assert overall["refusal"].diff == pytest.approx(1 / N)
    assert [s.p_holm for s in result.overall()] == holm([s.p_value for s in result.overall()])

    # per question type: the same statistics over that type's questions only
    by_type = {(s.group, s.metric): s for s in result.stats if s.group != "all"}
    odd = np.arange(N) % 2 == 1  # multi_hop
    a, b = VALUES["a"]["nDCG@10"][odd], VALUES["b"]["nDCG@10"][odd]
    cell = by_type["multi_hop", "nDCG@10"]
    assert cell.n == N // 2 and cell.diff == np.mean(b) - np.mean(a)
    assert cell.p_value == _scipy_p(a, b)

    # flips: Hit@5 (t = 0.5) by construction; refusal is lower-is-better: s005 lost;
    # faithfulness passes at 0.8
    flips = {(f.metric, f.id, f.change) for f in result.flips}
    assert {f for f in flips if f[0] == "Hit@5"} == {
        ("Hit@5", "s003", "gained"),
        ("Hit@5", "s011", "gained"),
        ("Hit@5", "s007", "lost"),
    }
    assert {f for f in flips if f[0] == "refusal"} == {("refusal", "s005", "lost")}
    fa, fb = VALUES["a"]["faithfulness"], VALUES["b"]["faithfulness"]
    expected = {
        (f"s{i:03d}", "gained" if fb[i] >= 0.8 else "lost")
        for i in range(N)
        if (fa[i] >= 0.8) != (fb[i] >= 0.8)
    }
    assert {(f[1], f[2]) for f in flips if f[0] == "faithfulness"} == expected
    s003 = next(f for f in result.flips if f.id == "s003" and f.metric == "Hit@5")
    assert (s003.user_input, s003.question_type, s003.a, s003.b) == (
        "question s003?",
        "multi_hop",
        0.0,
        1.0,
    )


def test_compare_is_logged_as_a_run_with_report_files(
    runs: tuple[str, str, str], tmp_path: Path
) -> None:
    uri, run_a, run_b = runs
    result = compare_runs(
        run_a, run_b, tracking_uri=uri, metrics=["nDCG@*", "Hit@5"], n_resamples=N_RESAMPLES
    )
    assert [s.metric for s in result.overall()] == ["nDCG@10", "Hit@5"]
    run_id = log_comparison(result, uri, tmp_path / "out")
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.tags["compare.run_a"] == run_a and run.data.tags["compare.run_b"] == run_b
    assert run.data.metrics["nDCG_at_10.diff"] == result.overall()[0].diff
    names = {a.path for a in client.list_artifacts(run_id)}
    assert {
        "compare.csv",
        "flipped.csv",
        "compare.json",
        "compare.html",
        "diff_ci.png",
        "scatter.png",
    } <= names
    page = (tmp_path / "out" / "compare.html").read_text()
    assert page.count('src="data:image/png;base64,') == 2 and "question s003?" in page


def test_cli_json_uses_canonical_names(runs: tuple[str, str, str], capsys) -> None:
    uri, run_a, run_b = runs
    code = main(
        [
            "compare",
            run_a,
            run_b,
            "--json",
            "--tracking-uri",
            uri,
            "--no-log",
            "--n-resamples",
            str(N_RESAMPLES),
            "--threshold",
            "nDCG@10=0.7",
        ]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["metrics"]) == set(SPECS)
    assert set(out["metrics"]["nDCG@10"]) >= {"diff", "ci_low", "ci_high", "p_value", "p_holm", "n"}
    assert out["metrics"]["nDCG@10"]["diff"] == np.mean(VALUES["b"]["nDCG@10"]) - np.mean(BASE)
    assert set(out["by_type"]) == set(TYPES)
    assert out["thresholds"]["nDCG@10"] == {"value": 0.7, "inclusive": True}
    assert {f["id"] for f in out["flipped"] if f["metric"] == "Hit@5"} == {"s003", "s007", "s011"}


def test_different_datasets_are_refused_unless_forced(store: str, capsys) -> None:
    uri = store
    run_a = _log_run(uri, VALUES["a"])
    half = {k: v[: N // 2] for k, v in VALUES["b"].items()}
    run_b = _log_run(uri, half, digest="d2", ids=_ids()[: N // 2])
    with pytest.raises(DatasetError, match="different datasets .* --force"):
        compare_runs(run_a, run_b, tracking_uri=uri)
    assert main(["compare", run_a, run_b, "--tracking-uri", uri, "--no-log"]) == 1
    assert "--force" in capsys.readouterr().err  # one line, no traceback
    forced = compare_runs(run_a, run_b, tracking_uri=uri, force=True, n_resamples=N_RESAMPLES)
    assert forced.n_common == N // 2 and {s.n for s in forced.overall()} == {N // 2}
    with pytest.raises(DatasetError, match="match no metric"):
        compare_runs(run_a, run_b, tracking_uri=uri, force=True, metrics=["MAP@*"])


def test_nan_values_leave_the_pair_out_and_thresholds_follow_the_metric_kind() -> None:
    import pandas as pd

    a = pd.DataFrame(
        {
            "id": ["q1", "q2", "q3"],
            "P@10": [0.1, 0.0, math.nan],
            "answer_judge.accuracy_raw": [2.0, 3.0, 4.0],
        }
    )
    b = pd.DataFrame(
        {
            "id": ["q3", "q2", "q1"],
            "P@10": [0.2, 0.1, 0.0],
            "answer_judge.accuracy_raw": [4.0, 2.0, 3.0],
        }
    )
    specs = [MetricInfo("P@10"), MetricInfo("answer_judge.accuracy_raw", True, 1.0, 5.0)]
    result = compare_tables(a, b, specs, n_resamples=N_RESAMPLES)
    p10 = result.overall()[0]
    assert p10.n == 2 and p10.diff == pytest.approx((0.1 + 0.0) / 2 - (0.1 + 0.0) / 2)
    assert result.thresholds["P@10"] == Threshold(0.0, inclusive=False)
    assert result.thresholds["answer_judge.accuracy_raw"] == Threshold(3.0)
    flips = {(f.metric, f.id, f.change) for f in result.flips}
    assert flips == {
        ("P@10", "q1", "lost"),
        ("P@10", "q2", "gained"),
        ("answer_judge.accuracy_raw", "q1", "gained"),
        ("answer_judge.accuracy_raw", "q2", "lost"),
    }


def _sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided sign-flip p: share of the 2^n sign patterns whose |mean| is at least the
    observed one (Good 2000, §3.1), by enumeration."""
    observed = abs(d.mean())
    patterns = list(itertools.product((1.0, -1.0), repeat=d.size))
    hits = sum(abs(np.mean(d * np.array(s))) >= observed - 1e-12 for s in patterns)
    return hits / len(patterns)


def test_paired_test_is_defined_for_zero_one_and_two_pairs() -> None:
    # no pair: nothing to say
    assert all(math.isnan(v) for v in paired_test([], []))
    # one pair: the difference; no interval; the exact sign-flip test of one pair, p = 1
    diff, low, high, p = paired_test([0.2], [0.7], n_resamples=N_RESAMPLES)
    assert diff == pytest.approx(0.5) and math.isnan(low) and math.isnan(high)
    assert p == 1.0 == _sign_flip_p(np.array([0.5]))
    # two pairs: exact (4 patterns); the CI spans the two differences (bootstrap means of
    # {0.1, 0.5} are 0.1, 0.3 or 0.5, the extremes each with probability 1/4 > 2.5 %)
    diff, low, high, p = paired_test([0.0, 0.0], [0.1, 0.5], n_resamples=N_RESAMPLES)
    assert diff == pytest.approx(0.3) and (low, high) == pytest.approx((0.1, 0.5))
    assert p == pytest.approx(_sign_flip_p(np.array([0.1, 0.5])))  # 2/4
    # a run against its own rerun: every difference 0
    diff, low, high, p = paired_test([0.4, 1.0], [0.4, 1.0], n_resamples=N_RESAMPLES)
    assert (diff, low, high, p) == (0.0, 0.0, 0.0, 1.0)


def test_groups_of_one_question_give_too_few_pairs_not_an_error() -> None:
    """8 questions as `make run` evaluates them: one per type, so every per-type group has a
    single pair (today's scipy call raised "each sample in `data` must contain two or more
    observations"); one metric is NaN on all but one question."""
    import pandas as pd

    from rag_experiments.analysis.paired import TOO_FEW_PAIRS

    ids = [f"q{i}" for i in range(8)]
    types = [f"type{i}" for i in range(8)]
    a_vals = np.linspace(0.1, 0.8, 8)
    rare = [0.5] + [math.nan] * 7
    a = pd.DataFrame({"id": ids, "question_type": types, "nDCG@10": a_vals, "refusal": rare})
    b = a.assign(**{"nDCG@10": a_vals + 0.05})
    specs = [MetricInfo("nDCG@10"), MetricInfo("refusal", False)]
    result = compare_tables(a, b, specs, n_resamples=N_RESAMPLES)
    overall = {s.metric: s for s in result.overall()}
    assert overall["nDCG@10"].n == 8 and overall["nDCG@10"].reason == ""
    d = b["nDCG@10"].to_numpy() - a_vals
    assert overall["nDCG@10"].p_value == pytest.approx(_sign_flip_p(d))  # 2/256
    assert overall["refusal"].n == 1 and overall["refusal"].reason == TOO_FEW_PAIRS
    assert overall["refusal"].p_value == 1.0 and math.isnan(overall["refusal"].ci_low)
    cells = [s for s in result.stats if s.group != "all"]
    assert len(cells) == 16 and {s.reason for s in cells} == {TOO_FEW_PAIRS}
    empty = [s for s in cells if s.metric == "refusal" and s.n == 0]
    assert len(empty) == 7 and all(math.isnan(s.diff) and math.isnan(s.p_value) for s in empty)
    assert all(s.diff == pytest.approx(0.05) for s in cells if s.metric == "nDCG@10")
    text = result.format(all_metrics=True)  # refusal is not a key metric: listed with --all
    assert "refusal" in text and "nDCG@10" in text
    (row,) = [line for line in text.splitlines() if line.lstrip().startswith("refusal ")]
    # one pair: a diff (0) and p (1) but no CI; the row says why instead of a bare nan
    assert row.split()[1:5] == ["1", "0.5000", "0.5000", "+0.0000"]
    assert row.endswith(
        "[+nan, +nan]  1.0000  1.0000  too_few_pairs (n < 2: questions with a value in both runs)"
    )
    assert result.to_json()["by_type"]["type3"]["refusal"]["reason"] == TOO_FEW_PAIRS


def test_compare_of_one_question_per_type_writes_its_report(tmp_path: Path) -> None:
    """The report files (CSV, JSON, plots with NaN intervals) are written for tiny groups."""
    import pandas as pd

    from rag_experiments.analysis.plots import write_compare_report

    a = pd.DataFrame({"id": ["q1", "q2"], "question_type": ["x", "y"], "Hit@5": [0.0, 1.0]})
    b = a.assign(**{"Hit@5": [1.0, 1.0]})
    result = compare_tables(a, b, [MetricInfo("Hit@5")], n_resamples=N_RESAMPLES)
    files = write_compare_report(result, tmp_path)
    rows = pd.read_csv(files["compare.csv"])
    assert list(rows["reason"].fillna("")) == ["", "too_few_pairs", "too_few_pairs"]
    assert json.loads(files["compare.json"].read_text())["by_type"]["x"]["Hit@5"]["ci_low"] is None


def _small_comparison():
    import pandas as pd

    ids = [f"q{i}" for i in range(6)]
    a = pd.DataFrame(
        {
            "id": ids,
            "user_input": [f"question {i}" for i in range(6)],
            "Hit@1": [0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
            "faithfulness": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
            "nDCG@10": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
            "P@3": [0.0, 1 / 3, 0.0, 1 / 3, 0.0, 1 / 3],
        }
    )
    b = a.copy()
    b["Hit@1"] = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    b["nDCG@10"] = a["nDCG@10"] + 0.1
    specs = [MetricInfo(n) for n in ("Hit@1", "faithfulness", "nDCG@10", "P@3")]
    return compare_tables(a, b, specs, n_resamples=N_RESAMPLES)


def test_printed_comparison_shows_key_metrics_first_and_summarises_the_rest() -> None:
    result = _small_comparison()
    text = result.format()
    rows = [line.split()[0] for line in text.splitlines()[2:] if not line.startswith("  +")]
    assert rows[:2] == ["nDCG@10", "faithfulness"]  # KEY_METRICS order, not the run's
    assert "Hit@1" not in text.split("flipped")[0] and "P@3 " not in text
    assert "  + 2 other metrics: 2 no decision (--all lists them" in text
    assert "flipped questions on 1 other metrics (3 flips" in text  # Hit@1: 2 gained, 1 lost
    every = result.format(all_metrics=True)
    assert "  Hit@1 " in every and "  P@3 " in every and "other metrics" not in every


def test_compare_page_folds_everything_but_the_key_metrics(tmp_path: Path) -> None:
    from rag_experiments.analysis.plots import write_compare_report

    result = _small_comparison()
    result.run_a, result.run_b = "a" * 32, "b" * 32
    page = write_compare_report(result, tmp_path)["compare.html"].read_text(encoding="utf-8")
    folded = "".join(part.split("</details>")[0] for part in page.split("<details>")[1:])
    visible = "".join(part.split("</details>")[-1] for part in page.split("<details>"))
    assert '<td class="l">nDCG@10</td>' in visible
    for other in ("Hit@1", "P@3"):
        assert f'<td class="l">{other}</td>' in folded and f">{other}</td>" not in visible


def test_run_notes_such_as_the_small_model_caveat_are_printed_under_the_comparison(
    store: str,
) -> None:
    caveat = "Answers come from the embedded SmolLM2-135M model: not trustworthy for decisions."
    run_a, run_b = _log_run(store, VALUES["a"]), _log_run(store, VALUES["b"])
    client = mlflow.MlflowClient(store)

    plain = compare_runs(run_a, run_b, tracking_uri=store, n_resamples=N_RESAMPLES)
    assert plain.notes == {} and "NOTE" not in plain.format()

    client.set_tag(run_b, "mlflow.note.content", caveat)
    one = compare_runs(run_a, run_b, tracking_uri=store, n_resamples=N_RESAMPLES)
    assert one.notes == {"b": caveat} and one.to_json()["notes"] == {"b": caveat}
    assert one.format().splitlines()[-1] == f"  NOTE (run b): {caveat}"

    client.set_tag(run_a, "mlflow.note.content", caveat)
    both = compare_runs(run_a, run_b, tracking_uri=store, n_resamples=N_RESAMPLES)
    assert both.format().splitlines()[-1] == f"  NOTE (runs a and b): {caveat}"
