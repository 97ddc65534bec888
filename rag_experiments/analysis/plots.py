"""Plots (matplotlib, no display) and self-contained HTML pages for ``rag-exp compare`` and
``rag-exp report``.

Figures are built with :class:`matplotlib.figure.Figure` directly (the Agg canvas, no pyplot
state), saved as PNG files and embedded in the HTML as ``data:image/png;base64`` images, so a
page opens offline with nothing beside it.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from rag_experiments.analysis.diagnosis import diagnosis_lines
from rag_experiments.analysis.runs import key_metrics
from rag_experiments.metrics.keys import key_metrics_among

if TYPE_CHECKING:
    from rag_experiments.analysis.paired import Comparison, PairedStat

_GREEN, _RED, _GREY, _BLUE = "#1a7f37", "#cf222e", "#6e7781", "#0969da"

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#1f2328;max-width:1200px}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:right;white-space:nowrap}
td.l{white-space:normal}
th{background:#f6f8fa} td.l,th.l{text-align:left}
tr.better td{background:#dafbe1} tr.worse td{background:#ffebe9} tr.best td{background:#ddf4ff}
img{max-width:100%;border:1px solid #d0d7de;margin:.5em 0}
.note{color:#57606a;font-size:.9em}
details{margin:.5em 0} summary{cursor:pointer;color:#0969da}
"""


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (100 dpi)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def img_tag(png: bytes, alt: str) -> str:
    """An ``<img>`` holding ``png`` inline (base64 data URI)."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def html_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    left: Sequence[str] = (),
    row_class: str | None = None,
) -> str:
    """An HTML table of ``rows`` (floats with 4 decimals; ``None``/NaN as ``—``).

    Args:
        rows: One mapping per row.
        columns: Keys to show, in order.
        left: Columns aligned left (text).
        row_class: Key of a row's CSS class (``better``, ``worse``, ``best``), if any.
    """
    head = "".join(f'<th class="{"l" if c in left else ""}">{html.escape(c)}</th>' for c in columns)
    body = []
    for row in rows:
        cls = html.escape(str(row.get(row_class, ""))) if row_class else ""
        cells = "".join(
            f'<td class="{"l" if c in left else ""}">{html.escape(_fmt(row.get(c)))}</td>'
            for c in columns
        )
        body.append(f'<tr class="{cls}">{cells}</tr>')
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def html_page(title: str, body: str) -> str:
    """A complete, self-contained HTML document."""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>'
        f"{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )


def _folded(summary: str, content: str) -> str:
    """``content`` in a closed ``<details>`` element headed by ``summary`` (no script)."""
    return f"<details><summary>{html.escape(summary)}</summary>{content}</details>"


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


# --- compare ---------------------------------------------------------------------------------


def diff_ci_figure(stats: Sequence[PairedStat], title: str) -> Figure:
    """Horizontal plot of each metric's diff (b − a) with its CI; green = significantly
    better, red = worse, grey = no decision."""
    shown = [s for s in stats if s.n > 0]
    fig = Figure(figsize=(7.5, 1.2 + 0.28 * max(1, len(shown))))
    ax = fig.add_subplot()
    for y, s in enumerate(reversed(shown)):
        color = {"better": _GREEN, "worse": _RED}.get(s.verdict, _GREY)
        ax.errorbar(
            s.diff,
            y,
            # ≥ 0: a CI of identical differences can sit a rounding error off the mean
            xerr=[[max(0.0, s.diff - s.ci_low)], [max(0.0, s.ci_high - s.diff)]],
            fmt="o",
            color=color,
            capsize=3,
            markersize=4,
        )
    ax.axvline(0.0, color="black", linewidth=0.8)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    ax.set_yticks(range(len(shown)), [s.metric for s in reversed(shown)], fontsize=8)
    ax.set_xlabel("difference b − a (95% paired bootstrap CI)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def scatter_figure(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], names: Sequence[str]
) -> Figure:
    """Per-question value in run a (x) against run b (y) for each metric of ``names``; points
    above the diagonal improved. Identical points are drawn larger (area ∝ count)."""
    cols = min(3, max(1, len(names)))
    rows = math.ceil(len(names) / cols)
    fig = Figure(figsize=(3.4 * cols, 3.2 * rows))
    for k, name in enumerate(names):
        ax = fig.add_subplot(rows, cols, k + 1)
        x, y = pairs[name]
        points, counts = np.unique(np.column_stack([x, y]), axis=0, return_counts=True)
        lo = float(min(points.min(initial=0.0), 0.0))
        hi = float(max(points.max(initial=1.0), 1.0))
        ax.plot([lo, hi], [lo, hi], color=_GREY, linewidth=0.8)
        ax.scatter(points[:, 0], points[:, 1], s=12 * counts, alpha=0.55, color=_BLUE)
        ax.set_xlim(lo - 0.05, hi + 0.05)
        ax.set_ylim(lo - 0.05, hi + 0.05)
        ax.set_title(f"{name} (n={len(x)})", fontsize=9)
        ax.set_xlabel("run a", fontsize=8)
        ax.set_ylabel("run b", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.tight_layout()
    return fig


def write_compare_report(result: Comparison, out_dir: Path) -> dict[str, Path]:
    """Write ``compare.csv``, ``flipped.csv``, ``compare.json``, ``diff_ci.png``,
    ``scatter.png`` and ``compare.html`` (self-contained) to ``out_dir``.

    Returns:
        ``{file name: path}``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        name: out_dir / name
        for name in (
            "compare.csv",
            "flipped.csv",
            "compare.json",
            "diff_ci.png",
            "scatter.png",
            "compare.html",
        )
    }
    pd.DataFrame(result.rows()).to_csv(files["compare.csv"], index=False)
    flips = [vars(f) for f in result.flips]
    pd.DataFrame(
        flips, columns=["metric", "id", "question_type", "user_input", "a", "b", "change"]
    ).to_csv(files["flipped.csv"], index=False)
    files["compare.json"].write_text(
        json.dumps(result.to_json(), indent=2, ensure_ascii=False), encoding="utf-8"
    )
    title = f"b = {result.run_b[:8]} vs a = {result.run_a[:8]}"
    overall_stats = result.overall()
    key = key_metrics_among(s.metric for s in overall_stats) or [s.metric for s in overall_stats]
    order = {m: i for i, m in enumerate(key)}
    key_stats = sorted(
        (s for s in overall_stats if s.metric in order), key=lambda s: order[s.metric]
    )
    diff_png = png_bytes(diff_ci_figure(key_stats, f"{title} (key metrics)"))
    names = key_metrics([n for n, (x, _) in result.pairs.items() if len(x)], limit=9)
    scatter_png = png_bytes(scatter_figure(result.pairs, names))
    files["diff_ci.png"].write_bytes(diff_png)
    files["scatter.png"].write_bytes(scatter_png)
    overall = [{**vars(s), "verdict": s.verdict} for s in key_stats]
    others = [{**vars(s), "verdict": s.verdict} for s in overall_stats if s.metric not in order]
    cols = [
        "metric",
        "n",
        "mean_a",
        "mean_b",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "p_holm",
        "verdict",
    ]
    by_type = [
        {**vars(s), "verdict": s.verdict}
        for s in result.stats
        if s.group != "all" and s.metric in names
    ]
    key_flips = [f for f in flips if f["metric"] in order]
    other_flips = [f for f in flips if f["metric"] not in order]
    flip_cols = ["metric", "change", "id", "question_type", "a", "b", "user_input"]
    flip_left = ["metric", "change", "id", "question_type", "user_input"]
    verdicts = ", ".join(
        f"{n} {v}"
        for v, n in sorted(Counter(r["verdict"] or "no decision" for r in others).items())
    )
    body = [
        f'<p class="note">Run a <code>{html.escape(result.run_a)}</code>, run b '
        f"<code>{html.escape(result.run_b)}</code>; {result.n_common} common questions; "
        f"dataset digests a={html.escape(str(result.dataset_digest.get('a')))}, "
        f"b={html.escape(str(result.dataset_digest.get('b')))}. diff = mean(b) − mean(a) over "
        "the questions both runs scored; 95% paired bootstrap CI; two-sided paired permutation "
        f"(sign-flip) test, {result.n_resamples} resamples, seed {result.seed}; p_holm = Holm "
        "across metrics. Green: CI excludes 0 and p_holm &lt; 0.05 in the better direction. "
        "Key metrics first; the other metrics, the per-type values and the flipped questions "
        "are folded below (click to open; every value is in compare.csv and flipped.csv).</p>",
        "<h2>Difference per key metric</h2>",
        img_tag(diff_png, "difference with CI per key metric"),
        html_table(overall, cols, left=["metric", "verdict"], row_class="verdict"),
        _folded(
            f"Other metrics ({len(others)}: {verdicts or 'none'})",
            html_table(others, cols, left=["metric", "verdict"], row_class="verdict"),
        ),
        "<h2>Per question: run a against run b</h2>",
        img_tag(scatter_png, "per-question scatter"),
        _folded(
            f"Per question type ({len(by_type)} rows, shown metrics)",
            html_table(
                by_type, ["group", *cols], left=["group", "metric", "verdict"], row_class="verdict"
            ),
        ),
        f"<h2>Flipped questions ({len(flips)})</h2>",
        _folded(f"On key metrics ({len(key_flips)})", html_table(key_flips, flip_cols, flip_left)),
        _folded(
            f"On other metrics ({len(other_flips)})",
            html_table(other_flips, flip_cols, flip_left),
        ),
    ]
    diagnosis = diagnosis_lines(overall_stats)
    if diagnosis:  # the claim diagnostics: where the change is (retriever or generator)
        body[1:1] = [
            "<h2>Diagnosis</h2>",
            *(f"<p>{html.escape(line.strip())}</p>" for line in diagnosis),
        ]
    files["compare.html"].write_text(
        html_page(f"Comparison: {title}", "".join(body)), encoding="utf-8"
    )
    return files


# --- sweep report ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One line of a metric-vs-parameter plot.

    Attributes:
        label: The other swept parameters' values (``""`` when only one is swept).
        x: Parameter values (numbers, or category positions).
        mean: ``{metric: means}`` aligned with ``x``.
        low: ``{metric: CI lows}``.
        high: ``{metric: CI highs}``.
    """

    label: str
    x: list[float]
    mean: dict[str, list[float]]
    low: dict[str, list[float]]
    high: dict[str, list[float]]


TICK_WRAP = 14
"""Characters per line of a category tick label before it wraps."""


def category_ticks(ax: Any, ticks: Sequence[str]) -> None:
    """Label x = 0, 1, … with ``ticks`` so that neighbours do not overlap: each label wrapped
    at :data:`TICK_WRAP` characters (a word longer than that, such as a class path, is cut
    across lines), and turned 30° when a line is still longer than the room one category has
    in a 3.8-inch panel (about 60 characters of 7-point text across)."""
    import textwrap

    wrapped = ["\n".join(textwrap.wrap(t, TICK_WRAP)) or t for t in ticks]
    longest = max((len(line) for w in wrapped for line in w.splitlines()), default=0)
    if longest > 60 / max(1, len(ticks)):
        ax.set_xticks(range(len(ticks)), wrapped, fontsize=7, rotation=30, ha="right")
    else:
        ax.set_xticks(range(len(ticks)), wrapped, fontsize=7)


def metric_vs_param_figure(
    param: str, metrics: Sequence[str], series: Sequence[Series], ticks: Sequence[str] | None = None
) -> Figure:
    """One panel per metric: the metric (mean and CI band) against ``param``, one line per
    combination of the other swept parameters.

    Args:
        param: The swept parameter on the x axis.
        metrics: Canonical metric names, one panel each.
        series: The lines.
        ticks: Category labels when the parameter is not numeric (x = 0, 1, …).
    """
    cols = min(3, max(1, len(metrics)))
    rows = math.ceil(len(metrics) / cols)
    fig = Figure(figsize=(3.8 * cols, 3.0 * rows))
    for k, metric in enumerate(metrics):
        ax = fig.add_subplot(rows, cols, k + 1)
        for s in series:
            line = ax.plot(s.x, s.mean[metric], marker="o", label=s.label or None)[0]
            ax.fill_between(s.x, s.low[metric], s.high[metric], color=line.get_color(), alpha=0.2)
        if ticks is not None:
            category_ticks(ax, ticks)
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel(param, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if k == 0 and any(s.label for s in series):
            ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def pareto_figure(
    labels: Sequence[str],
    cost: Sequence[float],
    quality: Sequence[float],
    front: Sequence[int],
    cost_name: str,
    quality_name: str,
) -> Figure:
    """Quality against cost for every configuration; the Pareto front (no other configuration
    is at least as cheap and strictly better) is joined and labelled."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    ax.scatter(cost, quality, color=_GREY, s=25, label="configuration")
    fx = [cost[i] for i in front]
    fy = [quality[i] for i in front]
    ax.plot(fx, fy, color=_RED, marker="o", drawstyle="steps-post", label="Pareto front")
    for i in front:
        ax.annotate(
            labels[i], (cost[i], quality[i]), fontsize=7, xytext=(4, 4), textcoords="offset points"
        )
    ax.set_xlabel(f"{cost_name} (lower is cheaper)")
    ax.set_ylabel(quality_name)
    ax.set_title(f"{quality_name} vs {cost_name}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig
