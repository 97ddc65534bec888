"""Prediction-powered vs labels-only estimates of faithfulness on HaluEval (``calibration.labels``).

HaluEval's one-turn QA file (``../shared/real/judged/halueval/qa_one-turn_data.jsonl``, MIT;
see ``../shared/real/SOURCES.md``) holds 500 HotpotQA questions, each with its ``knowledge``
passage, a right answer and a hallucinated one. Each question gets one of its two answers
(the right one with probability ``--p-right``, seeded), recorded as the system's answer with the
knowledge as its only context; its human value is 1 for the right answer, 0 for the
hallucinated one (HaluEval's labels come from how the pairs were built, not from graders). The
truth is the mean of all 500 values.

A ``rag-exp run`` (``target=recorded``, ``judge=fake`` by default, ``embedder=hash``) scores
every row with two automatic judges of faithfulness: ``faithfulness`` (the LLM judge; the fake
one answers the same verdicts to every row, so it says nothing about the row) and
``keyword_faithfulness`` (share of the answer's content words found in the context; no model).
``--n-labels`` rows, drawn at random, are given as ``calibration.labels``; the run logs and
prints ``<metric>.ppi`` with its 95 % CI beside the labels-only one.

Then, on the run's per-row values, ``--draws`` fresh random label sets of each size in
``--sizes`` show the coverage of the truth and the mean CI width of each estimator (PPI,
PPI++ with power tuning, labels only), and the judge-only mean with its bias.

Usage (nothing is written into the repository; the data stay where they are)::

    .venv/bin/python bench/ppi_halueval.py
        [--data ../shared/real/judged/halueval/qa_one-turn_data.jsonl]
        [--n-labels 50] [--judge fake|embedded] [--limit 500] [--draws 500]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

from rag_experiments.locations import CONF_DIR, PROJECT_ROOT

DEFAULT_DATA = PROJECT_ROOT.parent / "shared/real/judged/halueval/qa_one-turn_data.jsonl"
METRICS = ("faithfulness", "keyword_faithfulness")


def build_rows(data: Path, p_right: float, seed: int, limit: int) -> tuple[list[dict], dict]:
    """Dataset rows (our JSONL with ``recorded``) and the human value of each id."""
    rng = random.Random(seed)
    rows, truth = [], {}
    records = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line]
    for i, rec in enumerate(records[:limit]):
        right = rng.random() < p_right
        sid = f"halu-{i:03d}"
        rows.append({
            "id": sid, "user_input": rec["question"], "reference": rec["right_answer"],
            "recorded": {
                "response": rec["right_answer"] if right else rec["hallucinated_answer"],
                "retrieved_contexts": [rec["knowledge"]],
            },
        })  # fmt: skip
        truth[sid] = 1.0 if right else 0.0
    return rows, truth


def run(tmp: Path, rows: list[dict], labels: list[dict], judge: str) -> tuple[str, str]:
    """``rag-exp run`` of the rows with the labels; returns (tracking uri, run id)."""
    from hydra import compose, initialize_config_dir
    from mlflow import MlflowClient

    from rag_experiments.config import register
    from rag_experiments.job import run_job

    register()
    (tmp / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (tmp / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels), "utf-8")
    uri = f"sqlite:///{tmp}/mlruns.db"
    suite = {
        "faithfulness": {"_target_": "rag_experiments.metrics.faithfulness.Faithfulness"},
        "keyword_faithfulness": {
            "_target_": "rag_experiments.metrics.keyword_faithfulness.KeywordFaithfulness"
        },
    }
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "dataset=jsonl", f"dataset.path={tmp / 'eval.jsonl'}", "target=recorded",
                "llm=fake", f"judge={judge}", "embedder=hash", "progress=false",
                f"calibration.labels={tmp / 'labels.jsonl'}", f"paths.cache_dir={tmp}/cache",
                f"tracking.uri={uri}", "run_name=ppi-halueval",
            ],
        )  # fmt: skip
        cfg.metrics.suite = suite  # only the two judges of faithfulness (an override merges)
        run_job(cfg)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    return uri, client.search_runs([exp])[0].info.run_id


def _fmt(est: float, low: float, high: float) -> str:
    return f"{est:.3f} [{low:.3f}, {high:.3f}] w={high - low:.3f}"


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print it."""
    from rag_experiments.metrics.calibration import (
        classical_mean_ci,
        power_tuned_lambda,
        ppi_mean_ci,
    )
    from rag_experiments.tracking.store import open_store, read_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--n-labels", type=int, default=50)
    ap.add_argument("--p-right", type=float, default=0.7)
    ap.add_argument("--judge", default="fake", choices=["fake", "embedded"])
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--sizes", default="25,50,100,200")
    ap.add_argument("--seed", type=int, default=0)
    opts = ap.parse_args(argv)
    if not opts.data.is_file():
        print(f"{opts.data} is absent (../shared/real); pass --data", file=sys.stderr)
        return 2
    rows, truth = build_rows(opts.data, opts.p_right, opts.seed, opts.limit)
    labeled = random.Random(opts.seed + 1).sample(sorted(truth), opts.n_labels)
    labels = [{"id": i, "metric": m, "value": truth[i]} for i in labeled for m in METRICS]
    with tempfile.TemporaryDirectory() as tmp:
        uri, run_id = run(Path(tmp), rows, labels, opts.judge)
        client = open_store(uri)
        logged = client.get_run(run_id).data.metrics
        table = read_table(client, run_id)
    print(f"\nHaluEval one-turn QA, {len(rows)} questions, judge={opts.judge}, seed {opts.seed}")
    print(f"truth (mean of all {len(truth)} human values): {np.mean(list(truth.values())):.3f}")
    rng = np.random.default_rng(opts.seed)
    for m in METRICS:
        ok = table[m].notna()
        ids = table.loc[ok, "id"].tolist()
        f = table.loc[ok, m].to_numpy(dtype=float)
        y = np.array([truth[i] for i in ids])
        true_mean = float(y.mean())
        print(f"\n{m}: {len(ids)} rows with a value ({int((~ok).sum())} NaN, left out)")
        print(f"  truth over them           {true_mean:.3f}")
        print(f"  judge-only mean           {f.mean():.3f} (bias {f.mean() - true_mean:+.3f})")
        corr = f"{np.corrcoef(f, y)[0, 1]:.3f}" if f.std() > 0 else "n/a (the judge is constant)"
        print(f"  corr(judge, human)        {corr}")
        get = lambda k, m=m: logged.get(f"{m}.{k}", math.nan)  # noqa: E731
        print(f"  the run (n={int(get('ppi_n_labels'))} labels, logged):")
        print(
            f"    PPI                     {_fmt(get('ppi'), get('ppi_ci_low'), get('ppi_ci_high'))}"
        )
        print(
            "    labels only             "
            f"{_fmt(get('labels_mean'), get('labels_ci_low'), get('labels_ci_high'))}"
        )
        print(f"  {opts.draws} random label sets per size: coverage of the truth, mean CI width")
        print(f"    {'n':>5}  {'PPI':>15}  {'PPI++':>15}  {'labels only':>15}  width PPI++/labels")
        for n in (int(s) for s in opts.sizes.split(",")):
            if n >= len(ids) - 1:
                continue
            idx = np.argsort(rng.random((opts.draws, len(ids))), axis=1)
            lab, unl = idx[:, :n], idx[:, n:]
            yl, fl, fu = y[lab], f[lab], f[unl]
            results = {
                "ppi": ppi_mean_ci(yl, fl, fu),
                "ppi++": ppi_mean_ci(yl, fl, fu, lam=power_tuned_lambda(yl, fl, fu)),
                "labels": classical_mean_ci(yl),
            }
            cells, widths = [], {}
            for name, (_, low, high) in results.items():
                cover = np.mean((low <= true_mean) & (true_mean <= high))
                widths[name] = float(np.mean(high - low))
                cells.append(f"{cover:6.1%} w={widths[name]:.3f}")
            ratio = widths["ppi++"] / widths["labels"]
            print(f"    {n:>5}  {cells[0]:>15}  {cells[1]:>15}  {cells[2]:>15}  {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
