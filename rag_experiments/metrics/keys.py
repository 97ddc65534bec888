"""The key metrics: the few values users compare across runs first.

One list, read by every place that must choose among a run's many metric columns: the sweep
report and ``rag-exp compare`` (what to show first), the tracker (which metrics are logged per
question type), and the trace writer (which values become assessments beside the judged ones).
It is derived from the metric declarations (:mod:`~rag_experiments.metrics.definitions`): an
output declared with ``key=<priority>`` is a key metric, smaller priorities first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from rag_experiments.metrics.audit import RATIONALE_KEY
from rag_experiments.metrics.definitions import LiveSequence, declared_outputs
from rag_experiments.records import ColumnSource, MetricSpec

if TYPE_CHECKING:
    from rag_experiments.metrics.scheduler import JudgedRowMetric


def _key_metrics() -> tuple[str, ...]:
    keyed = [d for d in declared_outputs() if d.key is not None]
    return tuple(d.name for d in sorted(keyed, key=lambda d: d.key or 0))


KEY_METRICS: Sequence[str] = LiveSequence(_key_metrics)
"""Canonical names of the key metrics, most important first (built in: ``nDCG@10``,
``MRR@10``, ``Hit@5``, ``R@10``, ``chunk.nDCG@10``, ``keyword_coverage``, ``faithfulness``,
``answer_relevancy``, ``context_precision``, ``context_recall``, ``answer_judge.accuracy``,
``keyword_faithfulness``, ``correct_refusal_rate``, ``false_refusal_rate``); the first one a
run has is the quality axis of the sweep report's Pareto front."""


def key_metrics_among(names: Iterable[str]) -> list[str]:
    """The :data:`KEY_METRICS` present in ``names``, in :data:`KEY_METRICS` order.

    Args:
        names: Canonical metric names (per-query table columns or run metric names).

    Returns:
        The key metrics found; empty when ``names`` holds none.
    """
    present = set(names)
    return [m for m in KEY_METRICS if m in present]


def key_priorities() -> dict[str, int]:
    """``{key metric: priority}`` of every declared key metric (smaller = more important)."""
    return {d.name: int(d.key) for d in declared_outputs() if d.key is not None}


def keyed(specs: Iterable[MetricSpec]) -> list[MetricSpec]:
    """``specs`` with :attr:`~rag_experiments.records.MetricSpec.key` filled in from the
    declarations (a spec that already has one keeps it), e.g. for specs read back from a
    run's ``metric_specs.json``.

    Args:
        specs: Metric columns.

    Returns:
        The same columns, in the same order.
    """
    priority = key_priorities()
    return [
        s
        if s.key is not None or s.name not in priority
        else dataclasses.replace(s, key=priority[s.name])
        for s in specs
    ]


def declared_specs(metric: Any) -> list[MetricSpec]:
    """A built metric's columns (``metric.specs()``) with what readers of the run need from
    the metric as plain data on each spec: its key-metric priority
    (:attr:`~rag_experiments.records.MetricSpec.key`) and, for an LLM-judged metric
    (``per_row``), the judge's model id with the audit record field that explains the value
    (:attr:`~rag_experiments.records.MetricSpec.source`, :data:`~rag_experiments.metrics.
    audit.RATIONALE_KEY`). The tracker reads these instead of the metric.

    Args:
        metric: A built :class:`~rag_experiments.protocols.Metric`.

    Returns:
        Its specs, in its order.
    """
    source = None
    if metric.per_row:
        judge = cast("JudgedRowMetric", metric).judge
        model = str(judge.describe().get("model", "")) if judge is not None else ""
        source = ColumnSource(model or "judge", str(metric.name), RATIONALE_KEY)
    return [dataclasses.replace(s, source=source) for s in keyed(metric.specs())]
