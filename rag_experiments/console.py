"""The table ``rag-exp run`` prints at the end of a run: one compact, aligned block of
retrieval metrics and one of answer metrics, each row ``name  mean  [95% CI]  n``, and a
one-line legend.

* **retrieval** block: the key metrics (:data:`~rag_experiments.metrics.keys.KEY_METRICS`)
  among the metrics that are not answer-level (the ranking metrics ``nDCG@10`` …,
  ``keyword_coverage``); the others (every cutoff of every measure, doc and chunk level) are
  counted in one line pointing at ``average_results.csv``;
* **answer** block: every answer-level metric (those of
  :data:`~rag_experiments.metrics.definitions.DEFINITIONS`, with or without a backend prefix
  such as ``deepeval.``): the judged metrics, ``keyword_faithfulness`` and the refusal rates.

A metric with no valid value shows ``—`` and ``n = 0`` (the reasons are in
``per_query_results.csv``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from rag_experiments.aggregate import CONFIDENCE, Aggregate
from rag_experiments.metrics.definitions import DEFINITIONS
from rag_experiments.metrics.keys import KEY_METRICS
from rag_experiments.records import MetricSpec

LEGEND = (
    "mean over the n questions with a value; [{ci}% CI] = bootstrap interval of the mean; "
    "n = questions with a value (why the others are NaN: per_query_results.csv)"
)


def is_answer_metric(name: str) -> bool:
    """True for an answer-level metric: a name of :data:`DEFINITIONS`, possibly behind one
    backend prefix (``deepeval.faithfulness``)."""
    return name in DEFINITIONS or name.partition(".")[2] in DEFINITIONS


def summary_table(
    specs: Sequence[MetricSpec],
    aggregates: Sequence[Aggregate],
    key_metrics: Collection[str] = KEY_METRICS,
) -> list[str]:
    """The run's metric table as lines (rules in the module docstring).

    Args:
        specs: The run's metric columns, in output order.
        aggregates: The run's aggregates (only group ``all`` is shown).
        key_metrics: The key metrics.

    Returns:
        Lines without trailing newlines: a header, the retrieval block, the answer block and
        the legend; blocks without a metric are left out.
    """
    overall = {a.metric: a for a in aggregates if a.group == "all"}
    names = [s.name for s in specs if s.name in overall]
    retrieval = [n for n in names if not is_answer_metric(n)]
    answer = [n for n in names if is_answer_metric(n)]
    shown_retrieval = [n for n in retrieval if n in key_metrics] or retrieval[:6]
    hidden = len(retrieval) - len(shown_retrieval)
    width = max([len(n) for n in shown_retrieval + answer] + [20]) + 2
    ci_label = f"[{CONFIDENCE:.0%} CI]"
    lines = [f"  {'':<{width}} {'mean':>7}  {ci_label:<16} {'n':>4}"]
    for title, block in (("retrieval", shown_retrieval), ("answer", answer)):
        if not block:
            continue
        lines.append(f"  {title}")
        lines.extend(_row(overall[n], width) for n in block)
        if title == "retrieval" and hidden:
            lines.append(
                f"    (+ {hidden} more retrieval metrics, every cutoff and level: "
                "average_results.csv)"
            )
    lines.append("  " + LEGEND.format(ci=f"{CONFIDENCE * 100:.0f}"))
    return lines


def _row(a: Aggregate, width: int) -> str:
    if math.isnan(a.mean):
        return f"    {a.metric:<{width - 2}} {'—':>7}  {'':<16} {a.n_valid:>4}"
    ci = f"[{a.ci_low:.3f}, {a.ci_high:.3f}]"
    return f"    {a.metric:<{width - 2}} {a.mean:>7.4f}  {ci:<16} {a.n_valid:>4}"
