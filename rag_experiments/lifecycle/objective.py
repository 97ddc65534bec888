"""The value a job returns to a Hydra sweeper (``hydra/sweeper=optuna``): one metric or a
weighted sum of metrics, chosen by the root key ``objective``.

Syntax: terms joined by ``+``, each ``<weight>*<metric>`` or ``<metric>`` (weight 1), metric
names as printed by the run (``nDCG@10``, ``faithfulness``, ``by_type/procedural/Hit@5``)::

    objective=nDCG@10
    objective='0.7*nDCG@10+0.3*faithfulness'

A negative weight subtracts (``+-0.1*latency_ms_p50``). The direction (maximize / minimize)
belongs to the sweeper (``hydra.sweeper.direction``).

A run whose objective cannot be computed (a term's metric has no valid row) returns a
:class:`NaNObjective`, a NaN that says why (:func:`nan_reason`); the sweeper
(:mod:`rag_experiments.lifecycle.sweeper`) records that trial as failed with the reason.

Some swept keys cannot move some metrics: doc-level retrieval metrics (``nDCG@10``, ``R@5`` …)
are measured on a ranking as deep as the deepest cutoff whatever ``retriever.top_k`` is
(``top_k`` only decides how many contexts the generator sees), and no retrieval metric depends
on the generator (``llm``). :func:`unmoved_keys` finds such keys and
:class:`~rag_experiments.lifecycle.callbacks.ObjectiveCheckCallback` warns about them when a
sweep starts.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from rag_experiments.errors import ConfigError, RagExpError
from rag_experiments.records import MetricValue

_DOC_RETRIEVAL = re.compile(r"^(by_type/[^/]+/)?(Hit|MRR|nDCG|P|R|MAP)@\d+$")
"""Doc-level retrieval metric names (:mod:`rag_experiments.metrics.retrieval`), also per type."""

_RETRIEVAL = re.compile(r"^(by_type/[^/]+/)?(chunk\.)?(Hit|MRR|nDCG|P|R|MAP)@\d+$")
"""Doc- and chunk-level retrieval metric names."""


class NaNObjective(float):
    """A NaN objective carrying why it is NaN (``reason``), returned by a job to its sweeper.

    Args:
        reason: E.g. ``"objective faithfulness is NaN: 0 of 3 rows valid (parse_error: 3)"``.
    """

    reason: str

    def __new__(cls, reason: str) -> NaNObjective:
        value = super().__new__(cls, "nan")
        value.reason = reason
        return value

    def __reduce__(self) -> tuple[type, tuple[str]]:  # pickled to and from launcher processes
        return (NaNObjective, (self.reason,))


class ObjectiveNaNError(RagExpError):
    """A trial's objective is NaN: it is recorded as a failed trial, with this message."""


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
            raise ConfigError(
                f"objective={expr!r} has an empty term; write e.g. "
                "objective='0.7*nDCG@10+0.3*faithfulness'"
            )
        weight, sep, name = term.partition("*")
        if not sep:
            terms.append((1.0, term))
            continue
        try:
            terms.append((float(weight), name.strip()))
        except ValueError:
            raise ConfigError(
                f"objective term {term!r}: {weight.strip()!r} is not a number; "
                "write <weight>*<metric>, e.g. 0.3*faithfulness"
            ) from None
    return terms


def objective_value(expr: str | None, summary: Mapping[str, float]) -> float | None:
    """The objective of one run.

    Args:
        expr: The ``objective`` key (None or empty = no objective).
        summary: The run's metrics (``EvalResult.metrics()``: means, counts, …).

    Returns:
        The weighted sum; NaN when a term's metric is NaN or has no valid row (the trial then
        fails, see :func:`nan_reason`); None when ``expr`` is empty.

    Raises:
        ConfigError: A term names a metric the run did not produce.
    """
    if not expr:
        return None
    total = 0.0
    for weight, name in parse_objective(expr):
        if name not in summary and f"{name}_n_valid" in summary:
            return math.nan  # every row NaN: the mean is not logged
        if name not in summary:
            known = ", ".join(sorted(k for k in summary if "/" not in k)[:40])
            raise ConfigError(
                f"objective metric {name!r} was not produced by this run; known metrics: {known}"
            )
        value = float(summary[name])
        if math.isnan(value):
            return math.nan
        total += weight * value
    return total


def nan_reason(expr: str, rows: Sequence[Mapping[str, MetricValue]]) -> str:
    """Why objective ``expr`` is NaN: each term's metric with no valid row, its number of valid
    rows and the NaN reasons of its rows, most frequent first.

    Args:
        expr: The ``objective`` key.
        rows: The run's per-row metric values (``EvalResult.values``).

    Returns:
        E.g. ``"objective faithfulness is NaN: 0 of 3 rows valid (parse_error: 3)"``.
    """
    parts = []
    for _, name in parse_objective(expr):
        cells = [row.get(name, MetricValue.nan("missing")) for row in rows]
        n_valid = sum(1 for c in cells if c.is_valid)
        if n_valid:
            continue
        counts = Counter(c.reason or "no reason" for c in cells)
        why = ", ".join(f"{reason}: {n}" for reason, n in counts.most_common())
        parts.append(f"{name} is NaN: {n_valid} of {len(cells)} rows valid ({why or 'no rows'})")
    return f"objective {expr}: " + ("; ".join(parts) or "NaN")


def _ignores(key: str, metric: str) -> bool:
    """Whether ``metric`` cannot change when config key ``key`` changes (see the module
    docstring): ``retriever.top_k`` for doc-level retrieval metrics, the generator (``llm``,
    ``llm.*``) for every retrieval metric."""
    if key == "retriever.top_k":
        return bool(_DOC_RETRIEVAL.match(metric))
    if key == "llm" or key.startswith("llm."):
        return bool(_RETRIEVAL.match(metric))
    return False


def unmoved_keys(expr: str | None, swept: Sequence[str]) -> list[str]:
    """The swept keys that cannot change objective ``expr``: every term's metric ignores them.

    Args:
        expr: The ``objective`` key (None or empty = no objective, nothing to check).
        swept: The swept config keys (``retriever.top_k``, ``chunker.size`` …).

    Returns:
        Those keys, in ``swept`` order; e.g. ``["retriever.top_k"]`` for
        ``expr="nDCG@10"``, ``[]`` for ``expr="chunk.R@10"`` or ``"faithfulness"``.

    Raises:
        ConfigError: ``expr`` is malformed (:func:`parse_objective`).
    """
    if not expr:
        return []
    names = [name for _, name in parse_objective(expr)]
    return [key for key in swept if all(_ignores(key, name) for name in names)]


def unmoved_warnings(expr: str | None, swept: Sequence[str]) -> list[str]:
    """One line per key of :func:`unmoved_keys`, saying why and what to do.

    Args:
        expr: The ``objective`` key.
        swept: The swept config keys.

    Returns:
        The warnings (empty when every swept key can move the objective).
    """
    why = {
        "retriever.top_k": (
            "doc-level retrieval metrics are measured at a fixed depth (the deepest cutoff), "
            "top_k only sets how many contexts the generator sees"
        ),
    }
    return [
        f"objective={expr} cannot depend on swept key {key}: "
        + why.get(key, "retrieval metrics do not depend on the generator")
        + "; every value will tie. Sweep the chunker or embedder instead, or choose an "
        "objective that depends on it (an answer metric such as faithfulness with "
        "metrics=custom, or a chunk-level one such as chunk.nDCG@10)"
        for key in unmoved_keys(expr, swept)
    ]
