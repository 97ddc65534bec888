"""The value a job returns to a Hydra sweeper (``hydra/sweeper=optuna``): one metric or a
weighted sum of metrics, chosen by the root key ``objective``.

Syntax: terms joined by ``+``, each ``<weight>*<metric>`` or ``<metric>`` (weight 1), metric
names as printed by the run (``nDCG@10``, ``faithfulness``, ``by_type/procedural/Hit@5``)::

    objective=nDCG@10
    objective='0.7*nDCG@10+0.3*faithfulness'

A negative weight subtracts (``+-0.1*latency_ms_p50``). The direction (maximize / minimize)
belongs to the sweeper (``hydra.sweeper.direction``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rag_experiments.errors import ConfigError


def parse_objective(expr: str) -> list[tuple[float, str]]:
    """Split an objective expression into ``(weight, metric)`` terms.

    Args:
        expr: E.g. ``"0.7*nDCG@10+0.3*faithfulness"``.

    Returns:
        The terms in order.

    Raises:
        ConfigError: An empty term or a weight that is not a number.
    """
    terms: list[tuple[float, str]] = []
    for raw in expr.split("+"):
        term = raw.strip()
        if not term:
            raise ConfigError(f"objective={expr!r} has an empty term; write e.g. "
                              "objective='0.7*nDCG@10+0.3*faithfulness'")
        weight, sep, name = term.partition("*")
        if not sep:
            terms.append((1.0, term))
            continue
        try:
            terms.append((float(weight), name.strip()))
        except ValueError:
            raise ConfigError(f"objective term {term!r}: {weight.strip()!r} is not a number; "
                              "write <weight>*<metric>, e.g. 0.3*faithfulness") from None
    return terms


def objective_value(expr: str | None, summary: Mapping[str, float]) -> float | None:
    """The objective of one run.

    Args:
        expr: The ``objective`` key (None or empty = no objective).
        summary: The run's metrics (``EvalResult.metrics()``: means, counts, …).

    Returns:
        The weighted sum, or None when ``expr`` is empty or a term's metric is NaN (then
        Optuna records the trial as failed instead of ranking it).

    Raises:
        ConfigError: A term names a metric the run did not produce.
    """
    if not expr:
        return None
    total = 0.0
    for weight, name in parse_objective(expr):
        if name not in summary and f"{name}_n_valid" in summary:
            return None  # every row NaN: the mean is not logged
        if name not in summary:
            known = ", ".join(sorted(k for k in summary if "/" not in k)[:40])
            raise ConfigError(f"objective metric {name!r} was not produced by this run; "
                              f"known metrics: {known}")
        value = float(summary[name])
        if math.isnan(value):
            return None
        total += weight * value
    return total
