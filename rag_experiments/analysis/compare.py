"""Paired comparison of two runs: did run b do better than run a, beyond noise?

Both runs answered the same questions, so each question is its own control: the comparison
works on the per-question differences d_i = b_i − a_i over the questions both runs scored
(matched by sample ``id``; a question whose value is NaN in either run is left out of that
metric). For every metric, over all questions and per question type:

* **diff** = mean(b) − mean(a) over the n pairs (equal to mean(d)).
* **95 % CI**: percentile bootstrap of mean(d) — the pairs are resampled together, which is
  the paired bootstrap (Efron & Tibshirani 1993, ch. 13; the resampling is
  :func:`rag_experiments.metrics.aggregate.bootstrap_ci` applied to d, seeded).
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
(any backend prefix)                                 grade sheets (``qualify/agreement.py``)
every other metric                     midpoint of   0.5 on [0, 1]: ``Hit@k`` (0/1) passes on a
                                       its range     hit, ``nDCG@k``/``MRR@k``/``R@k``/``MAP@k`` …
                                                     on a half-good ranking; 3 on the judge's raw
                                                     1–5 grades; ``refusal`` passes at 0
=====================================  ============  ===========================================

``--threshold NAME=VALUE`` overrides a metric's threshold (value ≥ t).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from rag_experiments.analysis.paired import (
    ALL,
    CONFIDENCE,
    MIN_PAIRS_CI,
    NOTE_TAG,
    TOO_FEW_PAIRS,
    Comparison,
    Flip,
    PairedStat,
    Threshold,
)
from rag_experiments.analysis.runs import MetricInfo, load_specs, open_run_store
from rag_experiments.common.cliargs import DEFAULT_TRACKING_URI
from rag_experiments.config.stats_defaults import N_RESAMPLES
from rag_experiments.errors import DatasetError
from rag_experiments.metrics.aggregate import bootstrap_ci
from rag_experiments.tracking.record import TAGS, PerQueryRow

_CLAIM_RATIOS = ("faithfulness", "context_recall")


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
    store = open_run_store(tracking_uri)
    runs = {k: store.get_run(r) for k, r in (("a", run_a), ("b", run_b))}
    digests = {k: r.tags.get(TAGS.dataset_digest) for k, r in runs.items()}
    if digests["a"] != digests["b"] and not force:
        raise DatasetError(
            f"runs {run_a} and {run_b} evaluated different datasets (dataset.digest "
            f"{digests['a']} vs {digests['b']}): their questions are not the same. Compare runs "
            "of one dataset, or pass --force to compare the sample ids they share"
        )
    specs_b = {s.name for s in load_specs(store, run_b)}
    specs = [s for s in load_specs(store, run_a) if s.name in specs_b]
    result = compare_tables(
        per_query_frame(store.read_rows(run_a)),
        per_query_frame(store.read_rows(run_b)),
        specs,
        metrics=metrics,
        thresholds=thresholds,
        seed=seed,
        n_resamples=n_resamples,
    )
    result.run_a, result.run_b, result.dataset_digest = run_a, run_b, digests
    result.notes = {
        k: r.tags[NOTE_TAG] for k, r in runs.items() if r.tags.get(NOTE_TAG, "").strip()
    }
    return result


def per_query_frame(rows: Sequence[PerQueryRow]) -> pd.DataFrame:
    """The columns :func:`compare_tables` reads, from a run's typed per-query rows: ``id``,
    ``question_type`` (None when a sample has none), ``user_input`` and one float column per
    metric (NaN for a NaN cell), in row order."""
    return pd.DataFrame(
        [
            {"id": r.id, "question_type": r.question_type, "user_input": r.user_input, **r.values}
            for r in rows
        ],
        columns=["id", "question_type", "user_input", *(rows[0].values if rows else [])],
    )
