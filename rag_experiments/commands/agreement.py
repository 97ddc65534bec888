"""``rag-exp grade-sheet <run_id>`` and ``rag-exp agreement <filled.csv>``: a blinded sheet of a
run's answers for human graders, and the judge-human agreement of the filled sheet
(:mod:`rag_experiments.qualify.agreement`), logged to the original run."""

from __future__ import annotations

import argparse

from rag_experiments.common.cliargs import add_tracking_uri, parse_store_command
from rag_experiments.qualify.agreement import LABEL_SETS, grade_sheet, log_agreement, score_sheet


def grade_sheet_command(argv: list[str]) -> int:
    """``rag-exp grade-sheet <run_id> [--n 20] [--seed 0] [--out DIR] [--tracking-uri URI]``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp grade-sheet",
        description=(
            "Export a blinded CSV of a run's answers for human grading (judge verdicts hidden) and "
            "a separate key; labels: "
            + "; ".join(f"{m}: {'/'.join(ls.labels)}" for m, ls in LABEL_SETS.items())
        ),
    )
    parser.add_argument("run_id")
    parser.add_argument("--n", type=int, default=20, help="questions to draw (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw (default 0)")
    parser.add_argument("--out", default=".", help="folder for the sheet and the key")
    add_tracking_uri(parser, "the run")
    opts = parse_store_command(parser, argv)
    sheet, key = grade_sheet(opts.run_id, opts.tracking_uri, opts.n, opts.seed, opts.out)
    print(f"sheet (give to graders): {sheet}\nkey (keep apart): {key}")
    return 0


def agreement_command(argv: list[str]) -> int:
    """``rag-exp agreement <filled.csv> [--key KEY] [--tracking-uri URI] [--no-log]``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp agreement",
        description=(
            "Raw agreement and Cohen's kappa between a filled grade sheet and the judge, per "
            "metric; logged to the original run."
        ),
    )
    parser.add_argument("filled")
    parser.add_argument("--key", default=None, help="the key (default: beside the sheet)")
    parser.add_argument("--tracking-uri", default=None, help="default: the one in the key")
    parser.add_argument("--no-log", action="store_true", help="print only")
    opts = parser.parse_args(argv)
    key, results = score_sheet(opts.filled, opts.key)
    print(f"{'metric':<28} {'n':>4} {'raw':>6} {'kappa':>7} {'kappa_q':>7}")
    for r in results:
        print(f"{r.metric:<28} {r.n:>4} {r.raw:>6.3f} {r.kappa:>7.3f} {r.kappa_quadratic:>7.3f}")
    if not opts.no_log:
        log_agreement(key, results, opts.tracking_uri)
        print(f"logged to run {key['run_id']}")
    return 0
