"""``rag-exp align <graded run or labels file> --metric <m>``: few-shot alignment of a judged
metric to people's labels (:mod:`rag_experiments.qualify.align`).

The labels are read by :func:`~rag_experiments.metrics.calibration.load_labels` (what
``calibration.labels`` reads: a JSONL of ``{"id", "metric", "value"}``, a filled grade sheet,
or a graded run); the labeled rows' questions, answers and contexts, and the judge's logged
values, come from the run (``--run``, or the graded run itself). The metric is built from the
``rag-exp run`` config composed with the remaining arguments as Hydra overrides (``judge=…``,
``metrics=…``; the current folder's ``conf/`` overlay included), its suite entry found by the
column it produces.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rag_experiments.common.cliargs import add_tracking_uri
from rag_experiments.common.uri import require_existing_store
from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.metrics.fewshot import ExampleSet
from rag_experiments.qualify.align import LabeledRow, align
from rag_experiments.records import RagResponse, Sample


def _compose(overrides: list[str]) -> DictConfig:
    """The ``rag-exp run`` config with ``overrides`` (and the ``./conf`` overlay)."""
    from rag_experiments.config.compose import compose_config
    from rag_experiments.locations import add_user_code_path, user_conf_dir

    folder = user_conf_dir()
    extra = [f"hydra.searchpath=[file://{folder}]"] if folder is not None else []
    add_user_code_path()
    return compose_config("config", [*extra, *overrides])


def _metric_factory(cfg: DictConfig, column: str) -> tuple[Any, Any]:
    """``(make(examples) -> built metric, the column's label set)`` for the suite entry that
    produces ``column``.

    Raises:
        ConfigError: No entry of the suite produces it, or it is not judged row by row.
    """
    from rag_experiments.build import SharedParts, build_judge_repeats, build_metric, model_session
    from rag_experiments.metrics.definitions import declared_outputs
    from rag_experiments.metrics.judge import JudgedMetric

    shared = SharedParts(cfg, model_session(cfg), build_judge_repeats(cfg))
    found = None
    for name in cfg.metrics.suite:
        node = cfg.metrics.suite[name]
        built = build_metric(node, shared)
        if column in [s.name for s in built.specs()]:
            found = node
            break
    if found is None:
        raise ConfigError(
            f"align: no metric of metrics={cfg.metrics.name} produces {column!r}; pick the "
            "suite that has it (metrics=custom, metrics=rubrics, your own)"
        )
    if not isinstance(built, JudgedMetric):
        raise ConfigError(
            f"align: {column} is not a judged metric of ours (its prompt takes no examples)"
        )

    def make(examples: ExampleSet | None) -> Any:
        metric = build_metric(found, shared)
        metric.examples = examples
        return metric

    labels = {d.name: d.label_set() for d in declared_outputs()}.get(column)
    return make, labels


def _rows(run_id: str, tracking_uri: str, column: str, human: dict[str, float]) -> list[LabeledRow]:
    """The labeled rows of the run (its per-query table)."""
    from rag_experiments.analysis.runs import open_run_store

    store = open_run_store(tracking_uri)
    rows = store.read_rows(run_id)
    out = []
    for r in rows:
        if r.id not in human:
            continue
        sample = Sample(
            id=r.id,
            user_input=r.user_input,
            reference=r.reference or "",
            answerable=r.answerable,
            question_type=r.question_type,
        )
        response = RagResponse(
            response=r.response or "",
            retrieved_contexts=list(r.retrieved_contexts),
            no_response=bool(r.no_response),
            error=r.error,
        )
        judged = r.values.get(column, math.nan)
        out.append(LabeledRow(sample, response, float(human[r.id]), float(judged)))
    missing = sorted(set(human) - {r.id for r in rows})
    if missing:
        shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
        raise DatasetError(
            f"align: {len(missing)} labeled id(s) are not rows of run {run_id} ({shown}); "
            "give the run whose answers were labeled (--run)"
        )
    return out


def align_command(argv: list[str]) -> int:
    """``rag-exp align <graded run | labels file> --metric M [--run RUN] [--k 4] [--folds 5]
    [--threshold T] [--seed 0] [--out FILE] [--json] [overrides…]``; returns the exit code."""
    from rag_experiments.metrics.calibration import load_labels

    parser = argparse.ArgumentParser(
        prog="rag-exp align",
        description="Few-shot alignment of a judged metric to people's labels: choose k "
        "labeled examples (the judge's disagreements first) for the metric's prompt, write "
        "them as a versioned example set (metrics.suite.<m>.examples=<file>) and report "
        "Cohen's kappa and balanced accuracy before and after, cross-validated on the labels "
        "the examples do not include, with 95%% CIs and the CI of the gain. Other arguments "
        "are Hydra overrides of the run config (judge=…, metrics=…).",
        epilog="Example: rag-exp align labels.jsonl --run <run id> --metric faithfulness "
        "judge=ollama",
    )
    parser.add_argument("source", help="a graded run id, or a labels file (JSONL, grade sheet)")
    parser.add_argument("--metric", required=True, help="the metric column people labeled")
    parser.add_argument("--run", default=None, help="the run whose answers were labeled")
    parser.add_argument("--k", type=int, default=4, help="examples per prompt (4)")
    parser.add_argument("--folds", type=int, default=5, help="cross-validation folds (5)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="verdict = value ≥ threshold, for people and judge (default: the metric's "
        "declared probe threshold, else 0.5)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of folds, choice, bootstrap")
    parser.add_argument("--n-resamples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--out", default=None, help="example set file (default: ./examples_…)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_tracking_uri(parser, "the run")
    opts, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if o.startswith("-") or "=" not in o]
    if bad:
        raise ConfigError(f"unknown argument {bad[0]}; see rag-exp align --help")
    require_existing_store(opts.tracking_uri)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    is_file = Path(opts.source).is_file()
    run_id = opts.run or (None if is_file else opts.source)
    if run_id is None:
        raise ConfigError(
            f"align: {opts.source} is a labels file; give the run whose answers were labeled "
            "with --run <run id>"
        )
    labels = load_labels(opts.source)
    human = labels.by_metric.get(opts.metric)
    if not human:
        raise ConfigError(
            f"align: {opts.source} holds no label of {opts.metric!r} (it labels "
            f"{', '.join(sorted(labels.by_metric)) or 'nothing'})"
        )
    cfg = _compose(overrides)
    make, label_set = _metric_factory(cfg, opts.metric)
    threshold = opts.threshold
    if threshold is None:
        from rag_experiments.metrics.definitions import declared_metrics

        probes = [c.declaration.probe for c in declared_metrics() if c.declaration.probe]
        declared = [p.threshold for p in probes if p.column == opts.metric and p.threshold]
        threshold = float(declared[0]) if declared else 0.5
    rows = _rows(run_id, opts.tracking_uri, opts.metric, human)
    result = align(
        make,
        opts.metric,
        rows,
        labels=label_set,
        k=opts.k,
        folds=opts.folds,
        threshold=threshold,
        seed=opts.seed,
        n_resamples=opts.n_resamples,
    )
    out = Path(opts.out or f"examples_{opts.metric}_{result.examples.version}.yaml")
    result.examples.write(out)
    if opts.json:
        print(json.dumps({**result.to_dict(), "examples_file": str(out)}, indent=2))
    else:
        print(result.format())
        print(
            f"wrote {out} ({len(result.examples.examples)} examples, "
            f"{result.examples.version}): use it with "
            f"metrics.suite.<entry>.examples={out}",
            file=sys.stderr,
        )
    return 0
