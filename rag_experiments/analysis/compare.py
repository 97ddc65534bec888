"""Paired comparison of two runs: did run b do better than run a, beyond noise?

Both runs answered the same questions, so each question is its own control: the comparison
works on the per-question differences d_i = b_i − a_i over the questions both runs scored
(matched by sample ``id``; a question whose value is NaN in either run is left out of that
metric). For every metric, over all questions and per question type:

* **diff** = mean(b) − mean(a) over the n pairs (equal to mean(d)).
* **95 % CI**: percentile bootstrap of mean(d) — the pairs are resampled together, which is
  the paired bootstrap (Efron & Tibshirani 1993, ch. 13; the resampling is
  :func:`rag_experiments.aggregate.bootstrap_ci` applied to d, seeded).
* **p-value**: two-sided paired permutation test of mean(d) = 0 — under the null each pair's
  two values are exchangeable, i.e. each d_i's sign is flipped at random (Good, *Permutation
  Tests*, 2000, §3.1). Computed by ``scipy.stats.permutation_test(..., permutation_type=
  "samples")`` with ``n_resamples`` random sign patterns from ``rng=seed`` (the exact
  distribution when 2^n ≤ n_resamples); scipy's p counts the observed pattern, so p ≥
  1 / (n_resamples + 1).
* **Few pairs** (a small run, a question type with one question, a metric most questions
  leave NaN): every statistic is still defined, never an error. n = 0: diff, CI and p are NaN
  with reason ``too_few_pairs``. n = 1: diff = d_1; the CI is NaN with reason
  ``too_few_pairs`` (a bootstrap of one value is a point, not an interval); p is the exact
  sign-flip test, which for one pair has the two equally likely outcomes ±d_1, both as extreme
  as the observed one, so p = 1 (no evidence either way). n ≥ 2: as above (for n = 2 the
  exact distribution of 4 sign patterns gives p ≥ 0.5, and the CI spans the two differences).
* **p_holm**: Holm's step-down adjustment across the metrics of the same group (Holm 1979,
  *Scand. J. Statist.* 6(2)): with m p-values sorted p_(1) ≤ … ≤ p_(m),
  p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)). It controls the family-wise error rate:
  with 60 retrieval metrics, some raw p < 0.05 are expected by chance alone.

**Flipped questions**: a question flips on a metric when it passes the metric's threshold in
one run and not in the other (``gained``: passes in b only; ``lost``: in a only). A higher-is-
better metric passes when value ≥ t (> t where marked), a lower-is-better one when value ≤ t:

=====================================  ============  ===========================================
metrics                                t             why
=====================================  ============  ===========================================
``P@k``, ``chunk.P@k``                 > 0           one relevant item in k gives P@k = 1/k; > 0
                                                     = "the top k held something relevant"
``faithfulness``, ``context_recall``   0.8           the "faithful"/"complete" boundary of the
(any backend prefix)                                 grade sheets (:mod:`rag_experiments.agreement`)
every other metric                     midpoint of   0.5 on [0, 1]: ``Hit@k`` (0/1) passes on a
                                       its range     hit, ``nDCG@k``/``MRR@k``/``R@k``/``MAP@k`` …
                                                     on a half-good ranking; 3 on the judge's raw
                                                     1–5 grades; ``refusal`` passes at 0
=====================================  ============  ===========================================

``--threshold NAME=VALUE`` overrides a metric's threshold (value ≥ t).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from scipy import stats

from rag_experiments.aggregate import bootstrap_ci
from rag_experiments.analysis.runs import (
    MetricInfo,
    client_for,
    get_run,
    load_specs,
)
from rag_experiments.common.cliargs import (
    DEFAULT_TRACKING_URI,
    add_tracking_uri,
    parse_store_command,
)
from rag_experiments.errors import DatasetError, RagExpError
from rag_experiments.metrics.keys import key_metrics_among
from rag_experiments.tracking.mlflow_tracker import MlflowTracker, read_table

N_RESAMPLES = 9999
"""Bootstrap resamples and random sign patterns per test (scipy's default)."""

CONFIDENCE = 0.95
"""Coverage of the difference's confidence interval."""

ALL = "all"
"""Group name of the comparison over every question."""

NOTE_TAG = "mlflow.note.content"
"""The run description tag (MLflow's): the caveats a run carries (see :class:`Comparison`)."""

MIN_PAIRS_CI = 2
"""Fewest pairs with a confidence interval (below it: NaN, reason :data:`TOO_FEW_PAIRS`)."""

TOO_FEW_PAIRS = "too_few_pairs"
"""Reason of a statistic left NaN because there are too few pairs for it."""

_CLAIM_RATIOS = ("faithfulness", "context_recall")


@dataclass(frozen=True)
class PairedStat:
    """Paired comparison of one metric over one group of questions (b − a).

    Attributes:
        metric: Canonical metric name.
        group: ``"all"`` or a question type.
        n: Pairs (questions with a value in both runs).
        mean_a: Mean of run a over the pairs.
        mean_b: Mean of run b over the pairs.
        diff: ``mean_b − mean_a`` (NaN when n = 0).
        ci_low: Lower bound of the 95 % paired bootstrap CI of the diff.
        ci_high: Upper bound of it.
        p_value: Two-sided paired permutation (sign-flip) test p-value, in (0, 1].
        p_holm: Holm-adjusted p across the metrics of the group, in (0, 1].
        higher_is_better: The metric's direction.
        reason: Why some of the statistics are NaN (:data:`TOO_FEW_PAIRS`: n <
            :data:`MIN_PAIRS_CI`), ``""`` when all are defined.
    """

    metric: str
    group: str
    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    higher_is_better: bool = True
    reason: str = ""

    @property
    def verdict(self) -> str:
        """``better`` / ``worse`` (b against a) when the CI excludes 0 and p_holm < 0.05,
        else ``""``."""
        if not (self.p_holm < 0.05 and (self.ci_low > 0 or self.ci_high < 0)):
            return ""
        return "better" if (self.diff > 0) == self.higher_is_better else "worse"


@dataclass(frozen=True)
class Threshold:
    """Pass threshold of a metric (see the module docstring).

    Attributes:
        value: t.
        inclusive: ``value ≥ t`` passes (``≤`` for lower-is-better); strict comparison when
            False.
    """

    value: float
    inclusive: bool = True

    def passes(self, x: float, higher_is_better: bool = True) -> bool:
        """Whether the value ``x`` passes."""
        if higher_is_better:
            return x >= self.value if self.inclusive else x > self.value
        return x <= self.value if self.inclusive else x < self.value


@dataclass(frozen=True)
class Flip:
    """A question that passed a metric's threshold in one run and not in the other.

    Attributes:
        metric: Canonical metric name.
        id: Sample id.
        question_type: The sample's type ("" when none).
        user_input: The question.
        a: Value in run a.
        b: Value in run b.
        change: ``gained`` (passes in b only) or ``lost`` (passes in a only).
    """

    metric: str
    id: str
    question_type: str
    user_input: str
    a: float
    b: float
    change: str


@dataclass
class Comparison:
    """Everything :func:`compare_tables` found.

    Attributes:
        stats: One :class:`PairedStat` per metric over ``all``, then per type.
        flips: Flipped questions, by metric then id.
        thresholds: The pass threshold used per metric.
        pairs: ``{metric: (a values, b values)}`` over all pairs (for the scatter plots).
        n_common: Questions present in both runs.
        run_a: Id of run a ("" for tables compared directly).
        run_b: Id of run b.
        dataset_digest: ``{"a": digest, "b": digest}``.
        seed: Seed of the bootstrap and the permutations.
        n_resamples: Resamples per bootstrap and per test.
        notes: ``{"a"|"b": note}``: each run's description (``mlflow.note.content``) when it
            has one: the caveat of a run that used the embedded 135M model, a judge
            qualification warning; printed under the table, as ``rag-exp run`` prints it.
    """

    stats: list[PairedStat]
    flips: list[Flip]
    thresholds: dict[str, Threshold]
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    n_common: int = 0
    run_a: str = ""
    run_b: str = ""
    dataset_digest: dict[str, str | None] = field(default_factory=dict)
    seed: int = 0
    n_resamples: int = N_RESAMPLES
    notes: dict[str, str] = field(default_factory=dict)

    def overall(self) -> list[PairedStat]:
        """The stats over every question."""
        return [s for s in self.stats if s.group == ALL]

    def to_json(self) -> dict[str, Any]:
        """``{"metrics": {name: {diff, ci_low, ci_high, p_value, p_holm, n, mean_a, mean_b,
        higher_is_better}}, "by_type": {type: {name: {…}}}, "flipped": [...], …}``; NaN
        becomes null."""
        by_type: dict[str, dict[str, Any]] = {}
        for s in self.stats:
            if s.group != ALL:
                by_type.setdefault(s.group, {})[s.metric] = _stat_json(s)
        return _finite({
            "run_a": self.run_a, "run_b": self.run_b, "dataset_digest": self.dataset_digest,
            "n_common": self.n_common, "seed": self.seed, "n_resamples": self.n_resamples,
            "confidence": CONFIDENCE,
            "metrics": {s.metric: _stat_json(s) for s in self.overall()},
            "by_type": by_type,
            "flipped": [asdict(f) for f in self.flips],
            "thresholds": {m: asdict(t) for m, t in self.thresholds.items()},
            "notes": self.notes,
        })  # fmt: skip

    def rows(self) -> list[dict[str, Any]]:
        """One CSV row per (group, metric)."""
        return [{**asdict(s), "verdict": s.verdict} for s in self.stats]

    def format(self, max_flips: int = 5, all_metrics: bool = False) -> str:
        """A human-readable summary: the overall table, then the flipped questions.

        The key metrics (:data:`~rag_experiments.metrics.keys.KEY_METRICS`, in that order)
        come first; the other metrics are summarised in one line each for the table
        (how many are better, worse, undecided) and for the flips, unless ``all_metrics``.
        A comparison without any key metric (``--metrics Hit@1``) lists every metric.

        Args:
            max_flips: Flipped questions listed per metric.
            all_metrics: List every metric, not only the key ones.
        """
        overall = self.overall()
        key = key_metrics_among(s.metric for s in overall)
        if all_metrics or not key:
            shown = [s for s in overall]
        else:
            order = {m: i for i, m in enumerate(key)}
            shown = sorted((s for s in overall if s.metric in order), key=lambda s: order[s.metric])
        shown_names = {s.metric for s in shown}
        rest = [s for s in overall if s.metric not in shown_names]
        width = max([len(s.metric) for s in shown] + [24])
        lines = [
            f"compare a={self.run_a} b={self.run_b}: {self.n_common} common questions, "
            f"diff = b - a, {CONFIDENCE:.0%} paired bootstrap CI, permutation p "
            f"({self.n_resamples} resamples, seed {self.seed}), Holm across metrics"
        ]
        lines.append(
            f"  {'metric':<{width}} {'n':>4} {'a':>7} {'b':>7} {'diff':>8} "
            f"{'95% CI':>18} {'p':>7} {'p_holm':>7}"
        )
        for s in shown:
            ci = f"[{s.ci_low:+.3f}, {s.ci_high:+.3f}]"
            lines.append(
                f"  {s.metric:<{width}} {s.n:>4} {s.mean_a:>7.4f} {s.mean_b:>7.4f} "
                f"{s.diff:>+8.4f} {ci:>18} {s.p_value:>7.4f} {s.p_holm:>7.4f}"
                f"  {s.verdict or _why_nan(s)}".rstrip()
            )
        if rest:
            verdicts = Counter(s.verdict or "no decision" for s in rest)
            lines.append(
                f"  + {len(rest)} other metrics: "
                + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
                + " (--all lists them; every group and metric: compare.csv)"
            )
        by_metric: dict[str, list[Flip]] = {}
        for f in self.flips:
            by_metric.setdefault(f.metric, []).append(f)
        other_flips = {m: fl for m, fl in by_metric.items() if m not in shown_names}
        if any(m in shown_names for m in by_metric):
            lines.append("flipped questions (passed the threshold in one run only):")
        for metric, flips in by_metric.items():
            if metric not in shown_names:
                continue
            t = self.thresholds[metric]
            gained = sum(f.change == "gained" for f in flips)
            lines.append(
                f"  {metric} (t {'≥' if t.inclusive else '>'} {t.value:g}): "
                f"{gained} gained, {len(flips) - gained} lost"
            )
            for f in flips[:max_flips]:
                lines.append(
                    f"    {f.change:<6} {f.id}  {f.a:.3f} -> {f.b:.3f}  {_short(f.user_input)}"
                )
            if len(flips) > max_flips:
                lines.append(f"    … and {len(flips) - max_flips} more (--json lists all)")
        if other_flips:
            lines.append(
                f"  + flipped questions on {len(other_flips)} other metrics "
                f"({sum(len(f) for f in other_flips.values())} flips; --all lists them, "
                "flipped.csv has every one)"
            )
        if self.notes and self.notes.get("a") == self.notes.get("b"):
            lines.append(f"  NOTE (runs a and b): {self.notes['a']}")
        else:
            lines += [f"  NOTE (run {label}): {note}" for label, note in self.notes.items()]
        return "\n".join(lines)


def paired_test(
    a: Sequence[float], b: Sequence[float], *, seed: int = 0, n_resamples: int = N_RESAMPLES
) -> tuple[float, float, float, float]:
    """Difference of means with its paired bootstrap CI and permutation p-value.

    Defined for any number of pairs (the few-pairs rules are in the module docstring): no
    pairs give all NaN; one pair gives its difference, a NaN CI and the exact p = 1.

    Args:
        a: Values of run a, one per question (no NaN).
        b: Values of run b for the same questions, same order.
        seed: Seed of the bootstrap and of the random sign patterns.
        n_resamples: Bootstrap resamples and sign patterns.

    Returns:
        ``(diff, ci_low, ci_high, p_value)`` as in the module docstring; diff in the metric's
        units, p in (0, 1]; NaN where :func:`too_few_pairs` says so.

    Raises:
        ValueError: ``a`` and ``b`` differ in length.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {x.size} and {y.size}")
    if x.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    diff = float(np.mean(y) - np.mean(x))
    if x.size < MIN_PAIRS_CI:  # one pair: sign flips give ±d_1, both as extreme: exact p = 1
        return diff, math.nan, math.nan, 1.0
    low, high = bootstrap_ci(y - x, seed=seed, n_resamples=n_resamples, confidence=CONFIDENCE)
    test = stats.permutation_test(
        (x, y), mean_difference, permutation_type="samples", vectorized=True,
        n_resamples=n_resamples, alternative="two-sided", rng=seed,
    )  # fmt: skip
    return diff, low, high, float(test.pvalue)


def _why_nan(s: PairedStat) -> str:
    """The table's note on a row with NaN statistics: how many pairs there were and why."""
    if not s.reason:
        return ""
    return f"{s.reason} (n < {MIN_PAIRS_CI}: questions with a value in both runs)"


def too_few_pairs(n: int) -> str:
    """The reason some statistics of ``n`` pairs are NaN: :data:`TOO_FEW_PAIRS` when
    ``n`` < :data:`MIN_PAIRS_CI` (no CI; for n = 0 no diff and no p either), else ``""``."""
    return TOO_FEW_PAIRS if n < MIN_PAIRS_CI else ""


def mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """The test statistic mean(y − x) along ``axis`` (vectorised for scipy)."""
    return np.mean(y - x, axis=axis)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (formula in the module docstring); NaN stays NaN and
    does not count in m.

    Args:
        p_values: Raw p-values in [0, 1] or NaN.

    Returns:
        Adjusted p-values, same order.
    """
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    order = valid[np.argsort(p[valid], kind="stable")]
    m = order.size
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return [float(v) for v in out]


def default_threshold(spec: MetricInfo) -> Threshold:
    """The pass threshold of a metric kind (table in the module docstring)."""
    base = spec.name.rsplit(".", 1)[-1]
    if base.startswith("P@"):
        return Threshold(spec.low, inclusive=False)
    if base in _CLAIM_RATIOS:
        return Threshold(0.8)
    return Threshold((spec.low + spec.high) / 2.0)


def compare_tables(
    table_a: pd.DataFrame,
    table_b: pd.DataFrame,
    specs: Sequence[MetricInfo],
    *,
    metrics: Sequence[str] | None = None,
    thresholds: Mapping[str, float] | None = None,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> Comparison:
    """Compare two per-query tables question by question.

    Args:
        table_a: Per-query table of run a (``id``, ``question_type``, ``user_input`` and one
            column per metric).
        table_b: The same for run b.
        specs: Metric columns to compare (those missing from either table are skipped).
        metrics: Canonical names or shell patterns (``nDCG@*``) to keep; all when None.
        thresholds: ``{metric: t}`` overriding :func:`default_threshold` (value ≥ t passes).
        seed: Seed of every bootstrap and test (the same for each cell, so a cell does not
            depend on the others).
        n_resamples: Resamples per bootstrap and per test.

    Returns:
        The :class:`Comparison` (run ids and digests left empty).

    Raises:
        DatasetError: No common question, or a pattern of ``metrics`` matches no metric.
    """
    a = table_a.drop_duplicates("id").set_index("id", drop=False)
    b = table_b.drop_duplicates("id").set_index("id")
    common = [i for i in a.index if i in b.index]  # run a's (dataset) order
    if not common:
        raise DatasetError(
            "the two runs have no sample id in common: they evaluated different questions"
        )
    chosen = [s for s in specs if s.name in a.columns and s.name in b.columns]
    if metrics:
        missing = [p for p in metrics if not any(fnmatch.fnmatchcase(s.name, p) for s in chosen)]
        if missing:
            raise DatasetError(
                f"--metrics {' '.join(missing)} match no metric of both runs; "
                f"they have: {', '.join(s.name for s in chosen)}"
            )
        chosen = [s for s in chosen if any(fnmatch.fnmatchcase(s.name, p) for p in metrics)]
    a, b = a.loc[common], b.loc[common]
    types = (
        a["question_type"].fillna("").astype(str)
        if "question_type" in a
        else pd.Series("", index=a.index)
    )
    groups = [(ALL, np.ones(len(common), dtype=bool))]
    groups += [(t, (types == t).to_numpy()) for t in sorted(set(types) - {""})]
    overrides = dict(thresholds or {})
    result = Comparison([], [], {}, n_common=len(common), seed=seed, n_resamples=n_resamples)
    for group, member in groups:
        cells = []
        for spec in chosen:
            va = pd.to_numeric(a[spec.name], errors="coerce").to_numpy(dtype=np.float64)
            vb = pd.to_numeric(b[spec.name], errors="coerce").to_numpy(dtype=np.float64)
            keep = member & ~np.isnan(va) & ~np.isnan(vb)
            cells.append((spec, va[keep], vb[keep]))
            if group == ALL:
                result.pairs[spec.name] = (va[keep], vb[keep])
        tests = [paired_test(x, y, seed=seed, n_resamples=n_resamples) for _, x, y in cells]
        adjusted = holm([t[3] for t in tests])
        for (spec, x, y), (diff, low, high, p), p_holm in zip(cells, tests, adjusted, strict=True):
            mean_a = float(np.mean(x)) if x.size else math.nan
            mean_b = float(np.mean(y)) if y.size else math.nan
            result.stats.append(
                PairedStat(
                    spec.name,
                    group,
                    int(x.size),
                    mean_a,
                    mean_b,
                    diff,
                    low,
                    high,
                    p,
                    p_holm,
                    spec.higher_is_better,
                    too_few_pairs(int(x.size)),
                )
            )
    for spec in chosen:
        t = (
            Threshold(float(overrides[spec.name]))
            if spec.name in overrides
            else default_threshold(spec)
        )
        result.thresholds[spec.name] = t
        result.flips.extend(_flips(spec, t, a, b, types))
    return result


def _flips(
    spec: MetricInfo, t: Threshold, a: pd.DataFrame, b: pd.DataFrame, types: pd.Series
) -> list[Flip]:
    out = []
    for sid in a.index:
        va, vb = pd.to_numeric(a.at[sid, spec.name]), pd.to_numeric(b.at[sid, spec.name])
        if pd.isna(va) or pd.isna(vb):
            continue
        pa = t.passes(float(va), spec.higher_is_better)
        pb = t.passes(float(vb), spec.higher_is_better)
        if pa != pb:
            text = a.at[sid, "user_input"] if "user_input" in a.columns else ""
            out.append(
                Flip(
                    spec.name,
                    str(sid),
                    str(types[sid]),
                    "" if pd.isna(text) else str(text),
                    float(va),
                    float(vb),
                    "gained" if pb else "lost",
                )
            )
    return out


def compare_runs(
    run_a: str,
    run_b: str,
    *,
    tracking_uri: str = DEFAULT_TRACKING_URI,
    force: bool = False,
    metrics: Sequence[str] | None = None,
    thresholds: Mapping[str, float] | None = None,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> Comparison:
    """Compare two logged runs (:func:`compare_tables` on their per-query tables).

    Args:
        run_a: The baseline run id.
        run_b: The changed run id (diff = b − a).
        tracking_uri: Store holding both runs.
        force: Compare even when the runs' ``dataset.digest`` tags differ.
        metrics: See :func:`compare_tables`.
        thresholds: See :func:`compare_tables`.
        seed: See :func:`compare_tables`.
        n_resamples: See :func:`compare_tables`.

    Returns:
        The :class:`Comparison` with run ids and digests.

    Raises:
        TrackingError: A run, its table or its metric specs cannot be fetched.
        DatasetError: Different dataset digests without ``force``; no common question.
    """
    client = client_for(tracking_uri)
    runs = {k: get_run(client, r) for k, r in (("a", run_a), ("b", run_b))}
    digests = {k: r.data.tags.get("dataset.digest") for k, r in runs.items()}
    if digests["a"] != digests["b"] and not force:
        raise DatasetError(
            f"runs {run_a} and {run_b} evaluated different datasets (dataset.digest "
            f"{digests['a']} vs {digests['b']}): their questions are not the same. Compare runs "
            "of one dataset, or pass --force to compare the sample ids they share"
        )
    specs_b = {s.name for s in load_specs(client, run_b)}
    specs = [s for s in load_specs(client, run_a) if s.name in specs_b]
    result = compare_tables(
        read_table(client, run_a),
        read_table(client, run_b),
        specs,
        metrics=metrics,
        thresholds=thresholds,
        seed=seed,
        n_resamples=n_resamples,
    )
    result.run_a, result.run_b, result.dataset_digest = run_a, run_b, digests
    result.notes = {
        k: r.data.tags[NOTE_TAG] for k, r in runs.items() if r.data.tags.get(NOTE_TAG, "").strip()
    }
    return result


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
    from rag_experiments.analysis.plots import write_compare_report

    client = client_for(tracking_uri)
    experiment = client.get_experiment(get_run(client, result.run_a).info.experiment_id).name
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
        "compare.run_a": result.run_a,
        "compare.run_b": result.run_b,
        "compare.forced": str(forced).lower(),
        "dataset.digest": str(result.dataset_digest.get("a")),
    }
    with tracker.start_run(params=params, config_yaml=json.dumps(params), tags=tags) as run_id:
        values: dict[str, float] = {}
        for s in result.overall():
            for key in ("diff", "ci_low", "ci_high", "p_value", "p_holm", "n"):
                values[f"{s.metric}.{key}"] = float(getattr(s, key))
        tracker.log_metrics(values)
        mlflow.log_artifacts(str(out_dir))
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
    result = compare_runs(
        opts.run_a,
        opts.run_b,
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
            from rag_experiments.analysis.plots import write_compare_report

            write_compare_report(result, out)
    if opts.json:
        print(
            json.dumps(
                {**result.to_json(), "comparison_run_id": run_id}, indent=2, ensure_ascii=False
            )
        )
    else:
        print(result.format(all_metrics=opts.all_metrics))
        if run_id:
            print(f"logged as MLflow run {run_id}", file=sys.stderr)
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


def _stat_json(s: PairedStat) -> dict[str, Any]:
    return {
        "diff": s.diff,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "p_value": s.p_value,
        "p_holm": s.p_holm,
        "n": s.n,
        "mean_a": s.mean_a,
        "mean_b": s.mean_b,
        "higher_is_better": s.higher_is_better,
        "verdict": s.verdict,
        "reason": s.reason,
    }


def _finite(obj: Any) -> Any:
    """NaN and infinities → None, recursively (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
