"""``rag-exp report``: one page that summarises a sweep, logged to its parent run.

For a sweep's parent run (``rag-exp run -m …``, :mod:`rag_experiments.tracking.sweep`) it reads
every child run and writes, under the parent's artifact folder ``report/``:

* ``report.html`` — self-contained (plots inline as base64 PNG), readable offline;
* ``sweep.csv`` — one row per child: swept parameters, status, every metric's mean and 95 % CI
  (``<m>``, ``<m>_ci_low``, ``<m>_ci_high``, as the child computed them: its metrics, or its
  ``average_results.csv`` for those a headline run did not log as metrics), ``judge_calls``,
  ``latency_ms_p50``/``p95``, ``n_cached_answers``;
* ``best.csv`` — the best finished configuration per metric (highest mean, lowest for
  lower-is-better metrics); a tie is a tie: ``config`` and ``run_id`` list every child with
  the best mean (``|``- and space-separated, in start order) and ``n_tied`` counts them;
* ``metric_vs_<param>.png`` — the key metrics against each swept parameter, one line per
  combination of the other swept parameters, with the CI as a band;
* ``pareto_<cost>.png`` — quality (the first key metric) against cost (``latency_ms_p50``;
  ``judge_calls`` too when a child called a judge) with the Pareto front. Latency is over the
  answers the generator produced (answers served from the response cache are left out by
  the runner and counted in ``n_cached_answers``), so a child whose every answer was cached
  has no latency and is not on that plot.

*Swept parameters* are the params whose values differ between the finished children. *Pareto front*:
the configurations that no other configuration beats on both axes, i.e. sorted by cost (then
by quality, best first), those whose quality is strictly higher than every cheaper one's.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rag_experiments.analysis.diagnosis import sweep_lines
from rag_experiments.analysis.paired import NOTE_TAG
from rag_experiments.analysis.plots import (
    Series,
    html_page,
    html_table,
    img_tag,
    metric_vs_param_figure,
    pareto_figure,
    png_bytes,
)
from rag_experiments.analysis.runs import (
    TARGET_SUFFIX,
    MetricInfo,
    key_metrics,
    load_specs,
    run_values,
    typed_params,
)
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.names import sanitize_metric_name
from rag_experiments.tracking.record import ARTIFACTS, CI_HIGH_SUFFIX, CI_LOW_SUFFIX, TAGS
from rag_experiments.tracking.store import RunRecord, RunStore

COSTS = ("latency_ms_p50", "judge_calls")
"""Cost axes of the Pareto front (``judge_calls`` only when a child called a judge)."""

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Child:
    """One child run of the sweep.

    Attributes:
        run_id: MLflow run id.
        status: ``FINISHED``, ``FAILED`` …
        params: ``{swept parameter: value}`` (as logged, strings).
        mean: ``{metric: mean}`` (NaN when not logged).
        ci_low: ``{metric: CI low}``.
        ci_high: ``{metric: CI high}``.
        costs: ``{cost name: value}`` (:data:`COSTS` plus ``latency_ms_p95`` and
            ``n_cached_answers``).
    """

    run_id: str
    status: str
    params: dict[str, str]
    mean: dict[str, float]
    ci_low: dict[str, float]
    ci_high: dict[str, float]
    costs: dict[str, float]

    @property
    def label(self) -> str:
        """``param=value`` of the swept parameters, or the short run id."""
        return " ".join(f"{k}={v}" for k, v in self.params.items()) or self.run_id[:8]


@dataclass
class SweepReport:
    """What :func:`build_report` read.

    Attributes:
        parent: The parent run.
        children: Every child, in start order.
        swept: Swept parameters, sorted.
        specs: Metric columns (from the first finished child).
        key: Metrics of the table, line plots and Pareto front.
        best: One ``best.csv`` row per metric.
        notes: ``{note: children carrying it}``: the children's descriptions
            (``mlflow.note.content``), e.g. the caveat of runs that used the embedded 135M
            model, in first-seen order.
    """

    parent: RunRecord
    children: list[Child]
    swept: list[str]
    specs: list[MetricInfo]
    key: list[str]
    best: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, int] = field(default_factory=dict)

    def note_lines(self) -> list[str]:
        """One line per note: ``NOTE: <note>`` when every child carries it, else
        ``NOTE (k of n child runs): <note>``."""
        n = len(self.children)
        return [
            f"NOTE: {note}" if k == n else f"NOTE ({k} of {n} child runs): {note}"
            for note, k in self.notes.items()
        ]

    def diagnosis_lines(self) -> list[str]:
        """The claim diagnostics of the finished children grouped retriever / generator, and
        the metric they differ most in (:func:`~rag_experiments.analysis.diagnosis.
        sweep_lines`); ``[]`` without claim metrics."""
        return sweep_lines(self.finished())

    def finished(self) -> list[Child]:
        """The children that FINISHED (the only ones plotted and ranked)."""
        return [c for c in self.children if c.status == "FINISHED"]


def resolve_parent(store: RunStore, ref: str) -> RunRecord:
    """The sweep parent named by ``ref``: a run id, or an experiment name (its latest sweep
    parent, a run tagged ``sweep.dir``).

    Raises:
        TrackingError: Neither a run nor an experiment with a sweep.
    """
    ref = store.resolve_run_id(ref)  # the UI's 8-character id prefix -> the full id
    if _RUN_ID.match(ref):
        return store.get_run(ref)
    exp = store.experiment_by_name(ref)
    if exp is None:
        raise TrackingError(
            f"{ref!r} is neither a run id nor an experiment at "
            f"{store.uri}: pass a sweep's parent run id"
        )
    runs = store.find_runs(
        [exp.experiment_id],
        f"tags.`{TAGS.sweep_dir}` LIKE '%'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise TrackingError(
            f"experiment {ref!r} has no sweep parent run (tag sweep.dir): run a "
            "sweep with `rag-exp run -m …` first"
        )
    return runs[0]


def swept_params(params: Sequence[dict[str, str]]) -> list[str]:
    """Params whose value differs between runs (a param missing from a run counts as a value).

    A swapped config group (``-m retriever=dense,bm25,hybrid``) shows as its ``<group>._target_``
    only: the group's keys that some runs lack (``retriever.k1`` of BM25, ``retriever.fusion``
    of hybrid) came with the choice and are not listed; a group key every run has and that
    differs (``retriever.top_k`` swept as well) still is.

    Args:
        params: Each run's params.

    Returns:
        The swept parameter names, sorted.
    """
    keys = set().union(*params) if params else set()
    swept = sorted(k for k in keys if len({p.get(k) for p in params}) > 1)
    swapped = [k.removesuffix("_target_") for k in swept if k.endswith("._target_")]

    def implied(key: str) -> bool:
        return (
            not key.endswith("._target_")
            and any(key.startswith(group) for group in swapped)
            and any(key not in p for p in params)
        )

    return [k for k in swept if not implied(k)]


def pareto_front(cost: Sequence[float], quality: Sequence[float]) -> list[int]:
    """Indices of the Pareto-optimal points (low cost, high quality; definition in the module
    docstring), by increasing cost. Points with a NaN coordinate are left out."""
    idx = [i for i in range(len(cost)) if not (math.isnan(cost[i]) or math.isnan(quality[i]))]
    idx.sort(key=lambda i: (cost[i], -quality[i]))
    front, best = [], -math.inf
    for i in idx:
        if quality[i] > best:
            front.append(i)
            best = quality[i]
    return front


def build_report(
    store: RunStore, parent: RunRecord, metrics: Sequence[str] | None = None
) -> SweepReport:
    """Read a sweep's children and rank them.

    Args:
        store: The runs' store.
        parent: The sweep's parent run.
        metrics: Key metrics (canonical names); default :func:`~rag_experiments.analysis.runs.
            key_metrics` of the children's metrics.

    Returns:
        The :class:`SweepReport`.

    Raises:
        TrackingError: The parent has no child run, or no child finished.
    """
    runs = sorted(
        store.child_runs(parent.experiment_id, parent.run_id),
        key=lambda r: r.start_time or 0,
    )
    if not runs:
        raise TrackingError(
            f"run {parent.run_id} has no child runs: pass the parent run of "
            "a sweep (`rag-exp run -m …`)"
        )
    done = [r for r in runs if r.status == "FINISHED"]
    if not done:
        raise TrackingError(f"no child of sweep {parent.run_id} finished; nothing to report")
    specs = load_specs(store, done[0].run_id)
    swept = swept_params([dict(r.params) for r in done])
    children = []
    for r in runs:
        m = run_values(store, r) if r.status == "FINISHED" else dict(r.metrics)

        def get(key: str, m: dict[str, float] = m) -> float:
            return float(m.get(sanitize_metric_name(key), math.nan))

        children.append(Child(
            r.run_id, r.status, typed_params({k: r.params.get(k, "") for k in swept}),
            {s.name: get(s.name) for s in specs},
            {s.name: get(s.name + CI_LOW_SUFFIX) for s in specs},
            {s.name: get(s.name + CI_HIGH_SUFFIX) for s in specs},
            {c: get(c) for c in (*COSTS, "latency_ms_p95", "n_cached_answers")},
        ))  # fmt: skip
    names = [s.name for s in specs]
    key = [m for m in metrics if m in names] if metrics else key_metrics(names)
    if metrics and not key:
        raise TrackingError(
            f"--metrics {' '.join(metrics)}: none of them is a metric of the "
            f"sweep; it has: {', '.join(names)}"
        )
    swept = [k.removesuffix(TARGET_SUFFIX) for k in swept]  # as typed: chunker, not ._target_
    report = SweepReport(parent, children, swept, specs, key)
    report.best = _best(report)
    notes = (r.tags.get(NOTE_TAG, "").strip() for r in runs)
    report.notes = dict(Counter(note for note in notes if note))
    return report


def _best(report: SweepReport) -> list[dict[str, Any]]:
    rows = []
    done = report.finished()
    for spec in report.specs:
        valued = [c for c in done if not math.isnan(c.mean[spec.name])]
        if not valued:
            continue
        sign = 1.0 if spec.higher_is_better else -1.0
        top = max(valued, key=lambda c: sign * c.mean[spec.name])
        tied = [c for c in valued if c.mean[spec.name] == top.mean[spec.name]]
        rows.append(
            {
                "metric": spec.name,
                "direction": "higher" if spec.higher_is_better else "lower",
                "best": top.mean[spec.name],
                "ci_low": top.ci_low[spec.name],
                "ci_high": top.ci_high[spec.name],
                "config": " | ".join(c.label for c in tied),
                "run_id": " ".join(c.run_id for c in tied),
                "n_tied": len(tied),
            }
        )
    return rows


def write_sweep_report(report: SweepReport, out_dir: Path) -> dict[str, Path]:
    """Write the report's files (module docstring) to ``out_dir``.

    Returns:
        ``{file name: path}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    wide = []
    for c in report.children:
        row: dict[str, Any] = {"run_id": c.run_id, "status": c.status, **c.params}
        for s in report.specs:
            row.update(
                {
                    s.name: c.mean[s.name],
                    s.name + CI_LOW_SUFFIX: c.ci_low[s.name],
                    s.name + CI_HIGH_SUFFIX: c.ci_high[s.name],
                }
            )
        wide.append({**row, **c.costs})
    for name, frame in (("sweep.csv", pd.DataFrame(wide)), ("best.csv", pd.DataFrame(report.best))):
        files[name] = out_dir / name
        frame.to_csv(files[name], index=False)

    images: list[tuple[str, str, bytes]] = []  # (file, heading, png)
    for param in report.swept:
        fig = _param_figure(report, param)
        images.append((f"metric_vs_{_safe(param)}.png", f"Metrics against {param}", png_bytes(fig)))
    done = report.finished()
    quality = report.key[0]
    for cost in COSTS:
        values = [c.costs[cost] for c in done]
        if cost == "judge_calls" and not any(v > 0 for v in values if not math.isnan(v)):
            continue
        sign = 1.0 if _spec(report, quality).higher_is_better else -1.0
        q = [sign * c.mean[quality] for c in done]
        front = pareto_front(values, q)
        fig = pareto_figure(
            [c.label for c in done], values, [c.mean[quality] for c in done], front, cost, quality
        )
        images.append(
            (f"pareto_{cost}.png", f"Quality against cost: {quality} vs {cost}", png_bytes(fig))
        )
    for name, _, png in images:
        files[name] = out_dir / name
        files[name].write_bytes(png)

    table = []
    for c in report.children:
        row = {"run": c.run_id[:8], "status": c.status, **c.params}
        for m in report.key:
            row[m] = (
                f"{c.mean[m]:.4f} [{c.ci_low[m]:.3f}, {c.ci_high[m]:.3f}]"
                if not math.isnan(c.mean[m])
                else None
            )
        row.update({k: c.costs[k] for k in ("judge_calls", "latency_ms_p50", "n_cached_answers")})
        table.append(row)
    parent = report.parent
    body = [
        f'<p class="note">Parent run <code>{parent.run_id}</code> '
        f"({parent.name}), {len(report.children)} child runs "
        f"({len(done)} finished); swept: {', '.join(report.swept) or 'nothing'}. "
        "Means with their 95% bootstrap CI as each child logged them; latency_ms_p50 leaves "
        "out the n_cached_answers answers served from the response cache.</p>",
        *(f"<p><strong>{html.escape(line)}</strong></p>" for line in report.note_lines()),
        *(f"<p>{html.escape(line)}</p>" for line in report.diagnosis_lines()),
        "<h2>Configurations</h2>",
        html_table(
            table,
            [
                "run",
                "status",
                *report.swept,
                *report.key,
                "judge_calls",
                "latency_ms_p50",
                "n_cached_answers",
            ],
            left=["run", "status", *report.swept],
        ),
    ]
    for _, heading, png in images:
        body += [f"<h2>{heading}</h2>", img_tag(png, heading)]
    body += [
        "<h2>Best configuration per metric</h2>",
        html_table(
            report.best,
            ["metric", "direction", "best", "ci_low", "ci_high", "config", "n_tied"],
            left=["metric", "direction", "config"],
        ),
    ]
    files["report.html"] = out_dir / "report.html"
    files["report.html"].write_text(
        html_page(f"Sweep report: {parent.name}", "".join(body)), encoding="utf-8"
    )
    return files


def _param_figure(report: SweepReport, param: str) -> Any:
    done = report.finished()
    raw = sorted({c.params[param] for c in done}, key=_sort_key)
    numeric = all(_number(v) is not None for v in raw)
    position = {v: (_number(v) if numeric else float(i)) for i, v in enumerate(raw)}
    others = [p for p in report.swept if p != param]
    groups: dict[str, list[Child]] = {}
    for c in done:
        groups.setdefault(" ".join(f"{p}={c.params[p]}" for p in others), []).append(c)
    series = []
    for label, members in groups.items():
        members = sorted(members, key=lambda c: position[c.params[param]])
        pick = {m: [c.mean[m] for c in members] for m in report.key}
        series.append(
            Series(
                label,
                [position[c.params[param]] for c in members],
                pick,
                {m: [c.ci_low[m] for c in members] for m in report.key},
                {m: [c.ci_high[m] for c in members] for m in report.key},
            )
        )
    return metric_vs_param_figure(param, report.key, series, None if numeric else raw)


def _spec(report: SweepReport, name: str) -> MetricInfo:
    return next(s for s in report.specs if s.name == name)


def _number(v: str) -> float | None:
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _sort_key(v: str) -> tuple[int, float, str]:
    x = _number(v)
    return (0, x, "") if x is not None else (1, 0.0, v)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def log_report(store: RunStore, report: SweepReport, out_dir: Path) -> None:
    """Log ``out_dir`` to the parent run under ``report/`` and tag it ``sweep.report``.

    Raises:
        TrackingError: The store refuses the artifacts.
    """
    run_id = report.parent.run_id
    try:
        store.log_artifacts(run_id, out_dir, ARTIFACTS.report_dir)
        store.set_tag(run_id, TAGS.sweep_report, ARTIFACTS.report_html)
    except TrackingError as exc:
        raise TrackingError(f"cannot log the report to run {run_id}: {exc}") from exc
