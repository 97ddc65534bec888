"""Which of a run's summary values become MLflow metrics (``tracking.metrics``), and which
per-question values become trace assessments (``tracking.trace_assessments``,
:func:`assessed_columns`).

A run computes far more values than a reader compares across runs: with the custom suite,
about 60 metric columns × (mean, CI low, CI high, n_valid) × (all questions + every question
type) — over a thousand numbers for 8 questions. Logged as MLflow metrics they bury the few
that matter (the run page lists them in logging order; the charts tab opens on one bar chart per
question type). So the run's MLflow metrics are its **headline values**, and every value stays
in the run's tables:

``tracking.metrics=headline`` (the default) logs as MLflow metrics

* for each key metric the run has (a column whose spec carries a key priority,
  :attr:`~rag_experiments.records.MetricSpec.key`, filled in from the metric declarations): its
  mean over all questions ``<m>``, its 95 % CI ``<m>_ci_low`` / ``<m>_ci_high`` and
  ``<m>_n_valid``;
* per question type, only the key metrics' means ``by_type/<type>/<m>``, and only for a type
  with at least :data:`MIN_TYPE_VALUES` valid values (the mean of a single question is that
  question's value, not a type's: it cannot be compared across runs);
* every run-level value that is not a metric aggregate, unchanged: ``n_samples``,
  ``n_failed``, ``n_unanswerable``, ``n_cached_answers``, ``duration_s``, latencies, judge
  usage and errors.

They are logged headline first, since MLflow's run page lists metrics in the order they were
first logged (MLflow 3.17, measured): the key metrics' means (their order in the console
table), then their CIs and ``n_valid``, then the run values, then the ``by_type/`` means.

Every aggregate — all metrics, all groups, mean, CI, n_valid and n_nan — is in the run's
``average_results.csv`` (one row per metric and group, :meth:`~rag_experiments.runner.
EvalResult.average_rows`), and the per-question values in ``per_query_results.csv``; readers
that need a value that was not logged read it there.

``tracking.metrics=all`` logs every value as a metric (the behaviour before this switch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rag_experiments.errors import ConfigError
from rag_experiments.records import MetricSpec

METRIC_MODES = ("headline", "all")
"""Values of ``tracking.metrics``."""

MIN_TYPE_VALUES = 2
"""Fewest valid values of a question type for its key-metric means to be logged."""

AGGREGATE_SUFFIXES = ("", "_ci_low", "_ci_high", "_n_valid")
"""The names a run's summary gives the aggregates of a metric ``m``: ``m`` + each suffix, under
``by_type/<type>/`` for a question type."""

BY_TYPE = "by_type/"


def check_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`METRIC_MODES`.

    Raises:
        ConfigError: Any other value (the message lists the choices).
    """
    if mode not in METRIC_MODES:
        raise ConfigError(
            f"tracking.metrics={mode!r} is not one of {', '.join(METRIC_MODES)}: headline logs "
            "the key metrics (mean, CI, n_valid) and run counts, all logs every value"
        )
    return mode


def select_metrics(
    values: Mapping[str, float],
    specs: Sequence[MetricSpec],
    mode: str = "headline",
) -> dict[str, float]:
    """The values to log as MLflow metrics (rules in the module docstring).

    Args:
        values: A run's flat summary, canonical names (``nDCG@10``, ``nDCG@10_ci_low``,
            ``by_type/procedural/nDCG@10``, ``n_samples`` …), as
            :meth:`~rag_experiments.runner.EvalResult.metrics` returns it.
        specs: The run's metric columns: the names whose aggregates are in ``values`` (any
            other name is a run-level value and always kept); those with a
            :attr:`~rag_experiments.records.MetricSpec.key` are the key metrics.
        mode: ``headline`` or ``all``.

    Returns:
        The selected ``{name: value}``, headline first: the key metrics' means by priority,
        then their CIs and ``n_valid``, then the other values in the order of ``values``,
        ``by_type/`` values last (:func:`_headline_first`).

    Raises:
        ConfigError: An unknown ``mode``.
    """
    keys = {s.name: s.key for s in specs if s.key is not None}
    aggregate_of: dict[str, tuple[str, str]] = {}  # overall name -> (metric, suffix)
    for name in (s.name for s in specs):
        for suffix in AGGREGATE_SUFFIXES:
            aggregate_of[name + suffix] = (name, suffix)
    if check_mode(mode) == "all":
        out = dict(values)
    else:
        out = {}
        for name, value in values.items():
            if name.startswith(BY_TYPE):
                group, _, rest = name[len(BY_TYPE) :].partition("/")
                if rest not in aggregate_of:
                    out[name] = value  # not an aggregate: keep
                    continue
                metric, suffix = aggregate_of[rest]
                n_valid = values.get(f"{BY_TYPE}{group}/{metric}_n_valid", 0.0)
                if metric in keys and suffix == "" and n_valid >= MIN_TYPE_VALUES:
                    out[name] = value
            elif name in aggregate_of:
                if aggregate_of[name][0] in keys:
                    out[name] = value
            else:
                out[name] = value
    return _headline_first(out, keys, aggregate_of)


def _headline_first(
    values: dict[str, float],
    keys: Mapping[str, int],
    aggregate_of: Mapping[str, tuple[str, str]],
) -> dict[str, float]:
    """``values`` reordered for MLflow's run page, which lists a run's metrics in the order
    they were first logged (measured on MLflow 3.17's *Overview* tab: neither alphabetical nor
    by value): the key metrics' means by priority (ties in spec order), then their CI bounds
    and ``n_valid`` in the same order, then every other overall value in its order, then the
    ``by_type/`` values."""
    order = {name: i for i, name in enumerate(keys)}

    def rank(item: tuple[int, str]) -> tuple[int, float, int, int]:
        position, name = item
        metric, suffix = aggregate_of.get(name, (name, None))  # type: ignore[arg-type]
        if name.startswith(BY_TYPE):
            return (3, 0, 0, position)
        if metric in keys and suffix is not None:
            band = 0 if suffix == "" else 1
            return (band, keys[metric], order[metric], position)
        return (2, 0, 0, position)

    ranked = sorted(enumerate(values), key=rank)
    return {name: values[name] for _, name in ranked}


ASSESSMENT_MODES = ("key", "all")
"""Values of ``tracking.trace_assessments``: which columns become trace assessments."""


def assessed_columns(specs: Sequence[MetricSpec], mode: str = "key") -> list[str]:
    """The columns that become trace assessments.

    ``key`` (the default): the key metrics (a spec with a
    :attr:`~rag_experiments.records.MetricSpec.key`, the console's headline), most important
    first, so MLflow's Traces tab shows the few values the run is compared on. ``all``: those
    and every LLM-judged column (a spec with a :attr:`~rag_experiments.records.MetricSpec.
    source`), in ``specs`` order after them. Neither holds a grade on its own scale (a spec
    whose range is not [0, 1], e.g. ``answer_judge.accuracy_raw`` 1–5): its 0–1 column is the
    same verdict with the same rationale, and a raw ``1`` reads as a perfect score.

    Args:
        specs: The run's metric columns, in output order.
        mode: One of :data:`ASSESSMENT_MODES`.

    Returns:
        Column names.

    Raises:
        ConfigError: ``mode`` is not one of :data:`ASSESSMENT_MODES`.
    """
    if mode not in ASSESSMENT_MODES:
        raise ConfigError(
            f"tracking.trace_assessments={mode!r} is not one of {', '.join(ASSESSMENT_MODES)}: "
            "key assesses each trace on the key metrics, all also on every judged metric"
        )
    unit = [s for s in specs if s.low == 0.0 and s.high == 1.0]
    keyed = sorted((s for s in unit if s.key is not None), key=lambda s: s.key or 0)
    names = [s.name for s in keyed]
    if mode == "all":
        names += [s.name for s in unit if s.key is None and s.source is not None]
    return names
