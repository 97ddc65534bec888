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

A metric with no valid value shows ``—``, ``n = 0`` and its most frequent NaN reason (all
reasons per question: ``per_query_results.csv``). A metric whose range is not [0, 1] (the raw
1–5 grades of ``answer_judge``) is in a block of its own after the answer block, its range after
its name and its mean written on its scale (``1.00/5``), so a raw ``1.0`` (the worst grade) does
not read as a perfect score. With ``judge.repeats`` > 1 a judged metric's row ends
with its judge noise, ``judge sd`` (pooled within-question SD) and ``flips`` (share of
questions whose verdict changed between repeats), from :mod:`~rag_experiments.metrics.repeats`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from rag_experiments.metrics.aggregate import CONFIDENCE, Aggregate
from rag_experiments.metrics.definitions import DEFINITIONS
from rag_experiments.metrics.keys import KEY_METRICS
from rag_experiments.metrics.repeats import FLIP_RATE_SUFFIX, JUDGE_SD_SUFFIX
from rag_experiments.records import MetricSpec, MetricValue

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
    *,
    key_metrics: Collection[str] = KEY_METRICS,
    values: Sequence[Mapping[str, MetricValue]] = (),
    run_metrics: Mapping[str, float] = {},  # noqa: B006 - read only
) -> list[str]:
    """The run's metric table as lines (rules in the module docstring).

    Args:
        specs: The run's metric columns, in output order.
        aggregates: The run's aggregates (only group ``all`` is shown).
        key_metrics: The key metrics.
        values: The run's per-row values (``EvalResult.values``): the NaN reason shown for a
            metric without a valid value is their most frequent one (none shown when empty).
        run_metrics: The run's logged metrics (``EvalResult.metrics()``): a metric's
            ``<m>.judge_sd`` and ``<m>.flip_rate``, when there, end its row.

    Returns:
        Lines without trailing newlines: a header, the retrieval block, the answer block and
        the legend; blocks without a metric are left out.
    """
    overall = {a.metric: a for a in aggregates if a.group == "all"}
    labels = {s.name: _label(s) for s in specs}
    names = [s.name for s in specs if s.name in overall]
    spec_of = {s.name: s for s in specs}
    retrieval = [n for n in names if not is_answer_metric(n)]
    answer = [n for n in names if is_answer_metric(n) and _unit_range(spec_of[n])]
    # A column every row of which is NaN ``has_reference`` does not apply to this dataset
    # (context_utilization, the reference-free form of context_precision, on a dataset where
    # every question has a reference): a "—" row would read as a failure, so it is named below.
    not_applicable = [
        n
        for n in answer
        if values
        and math.isnan(overall[n].mean)
        and all(n in row and row[n].reason == NOT_APPLICABLE for row in values)
    ]
    answer = [n for n in answer if n not in not_applicable]
    grades = [n for n in names if is_answer_metric(n) and not _unit_range(spec_of[n])]
    shown_retrieval = [n for n in retrieval if n in key_metrics] or retrieval[:6]
    hidden = len(retrieval) - len(shown_retrieval)
    width = max([len(labels[n]) for n in shown_retrieval + answer + grades] + [20]) + 2
    ci_label = f"[{CONFIDENCE:.0%} CI]"
    lines = [f"  {'':<{width}} {'mean':>7}  {ci_label:<16} {'n':>4}"]
    blocks = (
        ("retrieval", shown_retrieval),
        ("answer", answer),
        ("answer grades on their own scale (the mean grade / the best grade)", grades),
    )
    for title, block in blocks:
        if not block:
            continue
        lines.append(f"  {title}")
        lines.extend(
            _row(overall[n], labels[n], width, values, spec_of[n]) + _noise(n, run_metrics)
            for n in block
        )
        if title == "answer" and not_applicable:
            lines.append(
                f"    ({', '.join(not_applicable)} not shown: scored only for questions without "
                "a reference, and every question has one)"
            )
        if title == "retrieval" and hidden:
            lines.append(
                f"    (+ {hidden} more retrieval metrics, every cutoff and level: "
                "average_results.csv)"
            )
    lines.append("  " + LEGEND.format(ci=f"{CONFIDENCE * 100:.0f}"))
    return lines


NOT_APPLICABLE = "has_reference"
"""The NaN reason of a column that does not apply to a question because another column scores
it (:mod:`~rag_experiments.metrics.context_precision`); a column with it on every row is not
shown in the table."""


def _unit_range(spec: MetricSpec) -> bool:
    """True for a metric in [0, 1] (every metric but the raw 1–5 grades)."""
    return (spec.low, spec.high) == (0.0, 1.0)


def _label(spec: MetricSpec) -> str:
    """The metric's name, with its range when that is not [0, 1]: ``x_raw (1–5)``."""
    if (spec.low, spec.high) == (0.0, 1.0):
        return spec.name
    return f"{spec.name} ({spec.low:g}–{spec.high:g})"


def _noise(name: str, run_metrics: Mapping[str, float]) -> str:
    """``"  judge sd 0.167, flips 33%"`` for a metric judged more than once, else ``""``."""
    sd = run_metrics.get(name + JUDGE_SD_SUFFIX)
    flips = run_metrics.get(name + FLIP_RATE_SUFFIX)
    if sd is None or flips is None or math.isnan(sd) or math.isnan(flips):
        return ""
    return f"  judge sd {sd:.3f}, flips {flips:.0%}"


def _row(
    a: Aggregate,
    label: str,
    width: int,
    values: Sequence[Mapping[str, MetricValue]],
    spec: MetricSpec | None = None,
) -> str:
    if math.isnan(a.mean):
        reasons = Counter(
            row[a.metric].reason or "no reason"
            for row in values
            if a.metric in row and not row[a.metric].is_valid
        )
        why = ""
        if reasons:
            reason, count = reasons.most_common(1)[0]
            why = f"  no value: {reason} ({count} of {len(values)})"
        return f"    {label:<{width - 2}} {'—':>7}  {'':<16} {a.n_valid:>4}{why}"
    if spec is not None and not _unit_range(spec):  # a grade: "1.00/5", never "1.0000"
        mean = f"{a.mean:.2f}/{spec.high:g}"
        ci = f"[{a.ci_low:.2f}, {a.ci_high:.2f}]"
        return f"    {label:<{width - 2}} {mean:>7}  {ci:<16} {a.n_valid:>4}"
    ci = f"[{a.ci_low:.3f}, {a.ci_high:.3f}]"
    return f"    {label:<{width - 2}} {a.mean:>7.4f}  {ci:<16} {a.n_valid:>4}"
