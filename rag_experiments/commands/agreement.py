"""``rag-exp grade-sheet <run_id>`` and ``rag-exp agreement <filled.csv>``: a blinded sheet of a
run's answers for human graders, and the judge-human agreement of the filled sheet
(:mod:`rag_experiments.qualify.agreement`), logged to the original run."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

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
    """``rag-exp agreement <filled.csv | run id> [--key KEY] [--labels FILE]
    [--tracking-uri URI] [--no-log]``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp agreement",
        description=(
            "Raw agreement and Cohen's kappa between people and the judge, per metric: from a "
            "filled grade sheet, or from a run graded in the browser with `rag-exp review` (each "
            "grader with the judge and each pair of graders); logged to the original run."
        ),
    )
    parser.add_argument("filled", help="a filled grade sheet (.csv) or a graded run's id")
    parser.add_argument("--key", default=None, help="the key (default: beside the sheet)")
    parser.add_argument(
        "--labels",
        default=None,
        help="a graded run's labels file (default: the one logged on the run)",
    )
    parser.add_argument("--tracking-uri", default=None, help="default: the one in the key")
    parser.add_argument("--no-log", action="store_true", help="print only")
    opts = parser.parse_args(argv)
    if not Path(opts.filled).exists() and RUN_ID.fullmatch(opts.filled):
        return _graded_run_agreement(opts)
    key, results = score_sheet(opts.filled, opts.key)
    print(f"{'metric':<28} {'n':>4} {'raw':>6} {'kappa':>7} {'kappa_q':>7}")
    for r in results:
        print(f"{r.metric:<28} {r.n:>4} {r.raw:>6.3f} {r.kappa:>7.3f} {r.kappa_quadratic:>7.3f}")
    if not opts.no_log:
        log_agreement(key, results, opts.tracking_uri)
        print(f"logged to run {key['run_id']}")
    return 0


RUN_ID = re.compile(r"[0-9a-f]{32}")


def _graded_run_agreement(opts: argparse.Namespace) -> int:
    """``rag-exp agreement <run id>``: the labels of ``rag-exp review --run`` against the judge
    and between graders (:func:`~rag_experiments.qualify.graded.agreement_report`); logged to
    the run as ``agreement/graded.json``."""
    from rag_experiments.common.cliargs import DEFAULT_TRACKING_URI
    from rag_experiments.common.uri import require_existing_store
    from rag_experiments.qualify.graded import (
        agreement_report,
        current_labels,
        read_label_lines,
        run_labels_file,
    )
    from rag_experiments.tracking.record import ARTIFACTS
    from rag_experiments.tracking.store import RunStore, quiet_downloads

    uri = opts.tracking_uri or DEFAULT_TRACKING_URI
    require_existing_store(uri)
    store = RunStore(uri)
    with quiet_downloads():
        path = Path(opts.labels) if opts.labels else run_labels_file(store, opts.filled)
        labels = current_labels(read_label_lines(path))
        report = agreement_report(labels, store.read_rows(opts.filled))
    graders = sorted({g for _, _, g in labels})
    print(f"run {opts.filled}: {len(labels)} labels by {', '.join(graders)} ({path})")
    print(f"{'metric':<28} {'rater':<12} {'with':<12} {'n':>4} {'raw':>6} {'kappa':>7}")
    for a in report:
        r = a.result
        print(f"{a.metric:<28} {a.a:<12} {a.b:<12} {r.n:>4} {r.raw:>6.3f} {r.kappa:>7.3f}")
    if not opts.no_log:
        rows = [{"metric": a.metric, "a": a.a, "b": a.b, **vars(a.result)} for a in report]
        where = f"{ARTIFACTS.agreement_dir}/graded.json"
        store.log_dict(opts.filled, {"graders": graders, "results": rows}, where)
        print(f"logged to run {opts.filled} (agreement/graded.json)")
    return 0
