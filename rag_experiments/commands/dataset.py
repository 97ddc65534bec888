"""``rag-exp dataset stats|report <path>``: a dataset's counts and lengths
(:mod:`rag_experiments.generate.stats`) and its quality report
(:mod:`rag_experiments.generate.report`), printed, written as files or logged to MLflow."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from rag_experiments.build import build_chunker, build_role_chat, build_tracker, model_session
from rag_experiments.config.compose import compose_config
from rag_experiments.data.jsonl import JsonlDataset, load_corpus
from rag_experiments.generate.report import DATASETS_EXPERIMENT, build_report, write_report
from rag_experiments.generate.stats import dataset_stats
from rag_experiments.tracking.record import ARTIFACTS, TAGS
from rag_experiments.tracking.store import RunStore


def dataset_command(argv: list[str]) -> int:
    """``rag-exp dataset stats <path> [--json]`` (:mod:`~rag_experiments.generate.stats`) and
    ``rag-exp dataset report <path> …`` (:mod:`~rag_experiments.generate.report`); returns the
    exit code."""
    parser = argparse.ArgumentParser(
        prog="rag-exp dataset",
        description="Inspect an evaluation dataset in our JSONL format.",
    )
    sub = parser.add_subparsers(dest="action", metavar="action", required=True)
    stats = sub.add_parser("stats", help="type distribution and average question/answer length")
    stats.add_argument("path", help="a dataset .jsonl file, or a `rag-exp generate` out folder")
    stats.add_argument("--json", action="store_true", help="print machine-readable JSON")
    report = sub.add_parser(
        "report",
        help="quality report: type balance, lengths, near-duplicates, corpus "
        "coverage, groundedness (Markdown, JSON, PNG plots)",
        description="Quality report of a dataset; extra arguments are Hydra overrides of the "
        "run config (chunker=fixed, judge.model=…).",
    )
    report.add_argument("path", help="a dataset .jsonl file, or a `rag-exp generate` out folder")
    report.add_argument("--corpus", help="document folder or BEIR corpus: report coverage")
    report.add_argument(
        "--judge",
        help="judge option (embedded, ollama, openai, fake): judge "
        "the groundedness of each reference answer",
    )
    report.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    report.add_argument("--out", help="folder for report.md, report.json and the PNG plots")
    report.add_argument("--log", action="store_true", help="log to MLflow experiment datasets")
    report.add_argument(
        "--dup-threshold",
        type=float,
        default=0.8,
        help="token Jaccard index of near-duplicate questions (default 0.8)",
    )
    args, overrides = parser.parse_known_args(argv)
    if args.action == "report":
        return report_command(args, overrides)
    if overrides:
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    result = dataset_stats(args.path)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(result.format())
    return 0


def report_command(args: argparse.Namespace, overrides: list[str]) -> int:
    """``rag-exp dataset report`` (arguments parsed by :func:`dataset_command`); returns the
    exit code.

    Raises:
        RagExpError: Unreadable dataset or corpus, bad overrides, a judge that cannot load.
    """
    stats = dataset_stats(args.path)  # resolves a generation folder, checks the file
    samples = JsonlDataset(stats.path).load().samples
    cfg = compose_config("config", [*([f"judge={args.judge}"] if args.judge else []), *overrides])
    documents = chunker = judge = None
    if args.corpus:
        documents, _ = load_corpus(args.corpus)
        chunker = build_chunker(cfg)
    if args.judge:
        judge = build_role_chat(cfg.judge, "judge", model_session(cfg))
    report = build_report(
        samples,
        stats.path,
        documents=documents,
        chunker=chunker,
        judge=judge,
        dup_threshold=args.dup_threshold,
    )
    out = Path(args.out) if args.out else None
    if out is not None:
        write_report(report, out)
    if args.log:
        tracker = build_tracker(
            cfg,
            experiment=DATASETS_EXPERIMENT,
            run_name=f"report-{Path(stats.path).parent.name or 'dataset'}",
        )
        params = {
            "report": {
                "path": stats.path,
                "corpus": args.corpus,
                "judge": args.judge,
                "dup_threshold": args.dup_threshold,
            },
            "chunker": OmegaConf.to_container(cfg.chunker, resolve=True),
        }
        with tracker.start_run(
            params=params,
            config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
            tags={TAGS.dataset_report: stats.path},
        ) as run_id:
            tracker.log_metrics(report.metrics())
            with tempfile.TemporaryDirectory() as tmp:
                folder = out or Path(tmp)
                write_report(report, folder)
                RunStore(tracker.uri).log_artifacts(run_id, folder, ARTIFACTS.report_dir)
        print(tracker.describe_location(), file=sys.stderr)
    print(
        json.dumps(report.to_dict(), indent=2, ensure_ascii=False)
        if args.json
        else report.markdown()
    )
    return 0
