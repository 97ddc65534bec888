"""``rag-exp compare <run_a> <run_b>``: the paired comparison of two logged runs
(:mod:`rag_experiments.analysis.compare`), printed, written as files (CSV, JSON, HTML, PNG plots
of :mod:`rag_experiments.analysis.plots`) and logged as a new MLflow run."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rag_experiments.analysis.compare import compare_runs
from rag_experiments.analysis.paired import Comparison
from rag_experiments.analysis.plots import write_compare_report
from rag_experiments.analysis.runs import artifact_location, open_run_store
from rag_experiments.common.cliargs import add_tracking_uri, parse_store_command
from rag_experiments.config.stats_defaults import N_RESAMPLES
from rag_experiments.errors import RagExpError
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.record import TAGS


def log_comparison(
    result: Comparison, tracking_uri: str, out_dir: Path, *, forced: bool = False
) -> str:
    """Write the comparison's files to ``out_dir`` and log them as a new MLflow run.

    The run goes to run a's experiment, named ``compare-<a8>-vs-<b8>``, with tags
    ``compare.run_a`` / ``compare.run_b`` / ``compare.forced`` and metrics
    ``<metric>.diff`` / ``.ci_low`` / ``.ci_high`` / ``.p_value`` / ``.p_holm`` / ``.n``; its
    artifacts are ``compare.csv`` (every group and metric), ``flipped.csv``,
    ``compare.json`` (the ``--json`` output), ``compare.html`` (self-contained) and the PNG
    plots ``diff_ci.png`` and ``scatter.png``.

    Returns:
        The new run's id.

    Raises:
        TrackingError: The store cannot be written.
    """
    store = open_run_store(tracking_uri)
    experiment = store.get_run(result.run_a).experiment_name
    write_compare_report(result, out_dir)
    tracker = MlflowTracker(
        tracking_uri,
        experiment,
        run_name=f"compare-{result.run_a[:8]}-vs-{result.run_b[:8]}",
        log_table=False,
    )
    params = {
        "compare": {
            "run_a": result.run_a,
            "run_b": result.run_b,
            "seed": result.seed,
            "n_resamples": result.n_resamples,
            "force": forced,
        }
    }
    tags = {
        TAGS.compare_run_a: result.run_a,
        TAGS.compare_run_b: result.run_b,
        TAGS.compare_forced: str(forced).lower(),
        TAGS.dataset_digest: str(result.dataset_digest.get("a")),
    }
    with tracker.start_run(params=params, config_yaml=json.dumps(params), tags=tags) as run_id:
        values: dict[str, float] = {}
        for s in result.overall():
            for key in ("diff", "ci_low", "ci_high", "p_value", "p_holm", "n"):
                values[f"{s.metric}.{key}"] = float(getattr(s, key))
        tracker.log_metrics(values)
        store.log_artifacts(run_id, out_dir)
    return run_id


def compare_command(argv: list[str]) -> int:
    """``rag-exp compare <run_a> <run_b> [--json] [--metrics …] [--force] …``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp compare",
        description="Paired comparison of two runs over the questions both answered: per metric "
        "the mean difference b - a, its 95% paired bootstrap CI, a paired permutation test "
        "p-value, Holm-adjusted p across metrics, the same per question type, and the questions "
        "that flipped. Logged as a new MLflow run (CSV, HTML report, PNG plots).",
    )
    parser.add_argument("run_a", help="baseline run id")
    parser.add_argument("run_b", help="changed run id (diff = b - a)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    parser.add_argument(
        "--all",
        action="store_true",
        dest="all_metrics",
        help="list every metric in the printed table (default: the key metrics first, the "
        "others summarised in one line)",
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help="canonical names or patterns to compare (e.g. 'nDCG@*' MRR@10)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="compare runs of different datasets (their common sample ids)",
    )
    parser.add_argument(
        "--threshold",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="pass threshold of a metric for flipped questions (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of bootstrap and test (0)")
    parser.add_argument(
        "--n-resamples",
        type=int,
        default=N_RESAMPLES,
        help=f"bootstrap resamples and sign patterns ({N_RESAMPLES})",
    )
    add_tracking_uri(parser)
    parser.add_argument("--out", default=None, help="also keep the report files in this folder")
    parser.add_argument(
        "--no-log", action="store_true", help="log no MLflow run (files only with --out)"
    )
    opts = parse_store_command(parser, argv)
    store = open_run_store(opts.tracking_uri)
    run_a, run_b = store.resolve_run_id(opts.run_a), store.resolve_run_id(opts.run_b)
    result = compare_runs(
        run_a,
        run_b,
        tracking_uri=opts.tracking_uri,
        force=opts.force,
        metrics=opts.metrics,
        thresholds=_parse_thresholds(opts.threshold),
        seed=opts.seed,
        n_resamples=opts.n_resamples,
    )
    run_id = None
    with tempfile.TemporaryDirectory(prefix="rag-exp-compare-") as tmp:
        out = Path(opts.out) if opts.out else Path(tmp)
        if not opts.no_log:
            run_id = log_comparison(result, opts.tracking_uri, out, forced=opts.force)
        elif opts.out:
            write_compare_report(result, out)
    if opts.json:
        print(
            json.dumps(
                {**result.to_json(), "comparison_run_id": run_id}, indent=2, ensure_ascii=False
            )
        )
    else:
        print(result.format(all_metrics=opts.all_metrics))
        for label, ref in (("a", run_a), ("b", run_b)):
            print(f"{label} = {ref} {store.get_run(ref).name or ''}".rstrip())
        if opts.out:
            print(f"report: {Path(opts.out).resolve() / 'compare.html'}")
        if run_id:
            html = artifact_location(store, run_id, "compare.html")
            print(f"logged as MLflow run {run_id}; report: {html}")
    return 0


def _parse_thresholds(items: Sequence[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = float(value)
        except ValueError:
            raise RagExpError(
                f"--threshold {item!r} is not NAME=VALUE (e.g. nDCG@10=0.7)"
            ) from None
    return out
