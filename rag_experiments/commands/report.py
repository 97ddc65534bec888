"""``rag-exp report <parent_run_id | experiment>``: the sweep report
(:mod:`rag_experiments.analysis.report`) written as files and logged to the sweep's parent run."""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

from rag_experiments.analysis.report import (
    build_report,
    log_report,
    resolve_parent,
    write_sweep_report,
)
from rag_experiments.analysis.runs import artifact_location, open_run_store
from rag_experiments.common.cliargs import add_tracking_uri, parse_store_command
from rag_experiments.tracking.record import ARTIFACTS


def report_command(argv: list[str]) -> int:
    """``rag-exp report <parent_run_id | experiment name> [--metrics …] [--out DIR] …``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp report",
        description="Sweep report logged to the sweep's parent run (artifacts report/): a "
        "table of every child (swept parameters, key metrics with CI, judge calls, latency), "
        "the best configuration per metric, each key metric against each swept parameter with "
        "CI bands, and quality-vs-cost Pareto fronts. HTML + PNG + CSV, readable offline.",
    )
    parser.add_argument(
        "sweep", help="the sweep's parent run id, or an experiment name (its latest sweep)"
    )
    parser.add_argument(
        "--metrics",
        nargs="+",
        metavar="NAME",
        help="key metrics (default: nDCG@10, MRR@10, … those the runs have)",
    )
    add_tracking_uri(parser)
    parser.add_argument("--out", default=None, help="also keep the report files in this folder")
    parser.add_argument("--no-log", action="store_true", help="write files only (needs --out)")
    opts = parse_store_command(parser, argv)
    if opts.no_log and not opts.out:
        parser.error("--no-log needs --out")
    store = open_run_store(opts.tracking_uri)
    report = build_report(store, resolve_parent(store, opts.sweep), opts.metrics)
    with tempfile.TemporaryDirectory(prefix="rag-exp-report-") as tmp:
        out = Path(opts.out) if opts.out else Path(tmp)
        files = write_sweep_report(report, out)
        if not opts.no_log:
            log_report(store, report, out)
    parent = report.parent.run_id
    print(
        f"sweep {parent}: {len(report.children)} children, swept "
        f"{', '.join(report.swept) or 'nothing'}"
    )
    done = report.finished()
    shown = [m for m in report.key if any(math.isfinite(c.mean[m]) for c in done)]
    for child in done:
        values = "  ".join(f"{m} {child.mean[m]:.4f}" for m in shown)
        print(f"  {child.label}: {values}")
    for row in report.best:
        if row["metric"] in report.key:
            tie = f"tie of {row['n_tied']}: " if row["n_tied"] > 1 else ""
            print(
                f"  best {row['metric']:<20} {row['best']:.4f} "
                f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]  {tie}{row['config']}"
            )
    for line in report.diagnosis_lines():
        print(f"  {line}")
    for line in report.note_lines():
        print(f"  {line}")
    if not opts.no_log:
        where = artifact_location(store, parent, ARTIFACTS.report_html)
        print(f"report: {where} (logged to run {parent}, {len(files)} files)")
    if opts.out:
        print(f"report files: {(Path(opts.out) / 'report.html').resolve()}")
    return 0
