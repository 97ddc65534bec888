"""The key metrics: the few values users compare across runs first.

One list, read by every place that must choose among a run's many metric columns: the sweep
report and ``rag-exp compare`` (what to show first), the tracker (which metrics are logged per
question type), and the trace writer (which values become assessments beside the judged ones).
It is derived from the metric declarations (:mod:`~rag_experiments.metrics.definitions`): an
output declared with ``key=<priority>`` is a key metric, smaller priorities first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rag_experiments.metrics.definitions import LiveSequence, declared_outputs


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
