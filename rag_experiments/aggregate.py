"""Corpus-level aggregation of per-sample metric values (a separate, named step).

Every metric column is summarised as the mean over its valid (non-NaN) values and the count of
those values, ``<metric>_n_valid``; a column with no valid value has no mean (NaN is never
logged) and ``n_valid = 0``. The same is done per question type under ``by_type/<type>/``.
"""

from __future__ import annotations

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
    """

    metric: str
    group: str
    mean: float
    n_valid: int
    n_nan: int


def aggregate(
    names: Sequence[str],
    values: Sequence[dict[str, MetricValue]],
    groups: Sequence[str | None],
) -> list[Aggregate]:
    """Mean and count of valid values per metric, overall and per group.

    Args:
        names: Metric names in output order.
        values: One dict per sample (missing names count as NaN).
        groups: The sample's group (question type) or None (counted only in ``all``).

    Returns:
        ``Aggregate`` records: first every metric over ``all``, then per group in sorted order.
    """
    members: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        if g:
            members[g].append(i)
    out = [_one(n, "all", [v.get(n) for v in values]) for n in names]
    for g in sorted(members):
        out.extend(_one(n, g, [values[i].get(n) for i in members[g]]) for n in names)
    return out


def _one(name: str, group: str, cells: list[MetricValue | None]) -> Aggregate:
    valid = [c.value for c in cells if c is not None and c.is_valid]
    mean = float(np.mean(valid)) if valid else math.nan
    return Aggregate(name, group, mean, len(valid), len(cells) - len(valid))


def to_metrics(aggs: Sequence[Aggregate]) -> dict[str, float]:
    """Flatten aggregates into MLflow metric values (NaN means are left out).

    ``all`` → ``<metric>`` and ``<metric>_n_valid``; a group → ``by_type/<group>/<metric>`` and
    ``by_type/<group>/<metric>_n_valid``.
    """
    out: dict[str, float] = {}
    for a in aggs:
        prefix = "" if a.group == "all" else f"by_type/{a.group}/"
        if not math.isnan(a.mean):
            out[f"{prefix}{a.metric}"] = a.mean
        out[f"{prefix}{a.metric}_n_valid"] = float(a.n_valid)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100, linear interpolation as numpy), NaN for no values."""
    vals = [v for v in values if not math.isnan(v)]
    return float(np.percentile(vals, q)) if vals else math.nan
