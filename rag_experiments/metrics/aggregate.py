"""Corpus-level aggregation of per-sample metric values (a separate, named step).

Every metric column is summarised as the mean over its valid (non-NaN) values and the count of
those values, ``<metric>_n_valid``; a column with no valid value has no mean (NaN is never
logged) and ``n_valid = 0``. The same is done per question type under ``by_type/<type>/``.

Every mean also gets a 95 % **percentile bootstrap** confidence interval (Efron & Tibshirani,
*An Introduction to the Bootstrap*, 1993, ch. 13), logged as ``<metric>_ci_low`` and
``<metric>_ci_high``: the valid values x_1..x_n are resampled with replacement B = 1,000 times
(``numpy.random.default_rng(seed).integers(0, n, size=(B, n))``, a fresh generator with the
run's ``seed`` for every metric and group, so a cell's interval does not depend on the other
cells), and the interval is the (2.5, 97.5) percentiles (``numpy.percentile``, linear) of the B
resample means. Constant values give the interval [value, value]; with few valid values
(a question type with 3 rows) the interval is as rough as the data.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag_experiments.records import MetricValue


@dataclass(frozen=True)
class Aggregate:
    """Summary of one metric over one group of samples.

    Attributes:
        metric: Canonical metric name.
        group: ``"all"`` or a question type.
        mean: Mean of the valid values, NaN when there are none.
        n_valid: Number of valid values.
        n_nan: Number of NaN values (their reasons are in the per-query table).
        ci_low: Lower bound of the bootstrap confidence interval of the mean (NaN: no value).
        ci_high: Upper bound of it.
    """

    metric: str
    group: str
    mean: float
    n_valid: int
    n_nan: int
    ci_low: float = math.nan
    ci_high: float = math.nan


N_RESAMPLES = 1000
"""Bootstrap resamples per confidence interval."""

CONFIDENCE = 0.95
"""Coverage of the confidence intervals."""


def bootstrap_ci(
    values: Sequence[float],
    *,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean (method in the module docstring).

    Args:
        values: Valid (non-NaN) values.
        seed: Seed of the resampling generator.
        n_resamples: B, the number of resamples.
        confidence: Coverage in (0, 1).

    Returns:
        ``(low, high)``; ``(nan, nan)`` for no values.
    """
    return _intervals([values], seed, n_resamples, confidence)[0]


def _intervals(
    cells: Sequence[Sequence[float]], seed: int, n_resamples: int, confidence: float
) -> list[tuple[float, float]]:
    """:func:`bootstrap_ci` of every cell, computed together: the same numbers.

    A value vector that occurs in several cells is resampled once (its interval depends only on
    the values, the seed, B and the coverage); the vectors are resampled grouped by length, so
    the resample indices of each length are drawn once; and the percentiles of all the resample
    means come from one ``numpy.percentile`` call along the rows of a ``(vectors, B)`` array,
    which computes each row's percentiles as the 1-d call does (a test pins them equal).
    """
    keys: list[bytes | None] = []
    distinct: dict[bytes, np.ndarray] = {}
    for values in cells:
        x = np.asarray(values, dtype=np.float64)
        if x.size == 0:
            keys.append(None)
            continue
        key = x.size.to_bytes(8, "little") + x.tobytes()
        distinct.setdefault(key, x)
        keys.append(key)
    if not distinct:
        return [(math.nan, math.nan)] * len(cells)
    order = sorted(distinct, key=lambda k: distinct[k].size)
    means = np.empty((len(order), n_resamples), dtype=np.float64)
    for row, key in enumerate(order):
        x = distinct[key]
        means[row] = x[_resample_indices(seed, x.size, n_resamples)].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail], axis=1)
    found = {key: (float(low[row]), float(high[row])) for row, key in enumerate(order)}
    return [(math.nan, math.nan) if key is None else found[key] for key in keys]


@functools.lru_cache(maxsize=2)
def _resample_indices(seed: int, n: int, n_resamples: int) -> np.ndarray:
    """The ``(n_resamples, n)`` resample indices of :func:`bootstrap_ci`:
    ``default_rng(seed).integers(0, n, size=(n_resamples, n))``, drawn once per
    ``(seed, n, n_resamples)``. They depend on nothing else, so the metrics of one group (the
    same seed and, mostly, the same number of valid values) reuse them; the intervals are the
    ones a fresh generator per call gives. Two entries are kept: at 10,000 values one is 80 MB.
    """
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    idx.flags.writeable = False
    return idx


def aggregate(
    names: Sequence[str],
    values: Sequence[dict[str, MetricValue]],
    groups: Sequence[str | None],
    *,
    seed: int = 0,
) -> list[Aggregate]:
    """Mean, count and bootstrap confidence interval of valid values per metric, overall and
    per group.

    Args:
        names: Metric names in output order.
        values: One dict per sample (missing names count as NaN).
        groups: The sample's group (question type) or None (counted only in ``all``).
        seed: Seed of every bootstrap (the run's ``seed``).

    Returns:
        ``Aggregate`` records: first every metric over ``all``, then per group in sorted order.
    """
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        if g:
            members[g].append(i)
    cells = [(n, "all", [v.get(n) for v in values]) for n in names]
    for g in sorted(members):
        cells.extend((n, g, [values[i].get(n) for i in members[g]]) for n in names)
    valid = [[c.value for c in column if c is not None and c.is_valid] for _, _, column in cells]
    ci = _intervals(valid, seed, N_RESAMPLES, CONFIDENCE)
    return [
        Aggregate(
            name,
            group,
            float(np.mean(v)) if v else math.nan,
            len(v),
            len(column) - len(v),
            low,
            high,
        )
        for (name, group, column), v, (low, high) in zip(cells, valid, ci, strict=True)
    ]


def to_metrics(aggs: Sequence[Aggregate]) -> dict[str, float]:
    """Flatten aggregates into MLflow metric values (NaN means are left out).

    ``all`` → ``<metric>``, ``<metric>_n_valid``, ``<metric>_ci_low`` and ``<metric>_ci_high``;
    a group → the same under ``by_type/<group>/``.
    """
    out: dict[str, float] = {}
    for a in aggs:
        prefix = "" if a.group == "all" else f"by_type/{a.group}/"
        if not math.isnan(a.mean):
            out[f"{prefix}{a.metric}"] = a.mean
            out[f"{prefix}{a.metric}_ci_low"] = a.ci_low
            out[f"{prefix}{a.metric}_ci_high"] = a.ci_high
        out[f"{prefix}{a.metric}_n_valid"] = float(a.n_valid)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100, linear interpolation as numpy), NaN for no values."""
    vals = [v for v in values if not math.isnan(v)]
    return float(np.percentile(vals, q)) if vals else math.nan
