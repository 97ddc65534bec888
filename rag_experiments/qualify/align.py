"""Few-shot alignment of a judged metric to people's labels (``rag-exp align``).

MLflow aligns a judge to human feedback with optimizers over its instructions and examples
(SIMBA, and MemAlign, which keeps distilled guidelines and concrete examples; MLflow docs,
"Judge Alignment": mlflow.org/docs/latest/genai/eval-monitor/scorers/llm-judge/alignment and
…/llm-judge/memalign). We do the part that needs no optimizer and can be checked: put ``k``
people-graded examples into the metric's prompt (in-context few-shot learning, Brown et al.,
NeurIPS 2020) and measure whether the judge then agrees with people more, on labels it did not
see.

**Choice of examples** (:func:`choose`): for each of people's two verdicts (value ≥
threshold or not), the labeled rows where the judge's logged verdict disagreed come first (the
errors to fix), then the others, each group in a seeded shuffle; the pick alternates between
the two verdicts (starting with the one the judge got wrong more often) while both remain, so
the set shows both and its errors first. A row whose judged value is NaN counts as agreeing
(no error seen).

**Before and after, cross-validated** (:func:`align`): the labeled rows are split into
``folds`` seeded folds. *Before*: the metric as configured (no examples) judges every row.
*After*: for each fold, ``k`` examples are chosen from the other folds' rows and the metric
with them judges the fold's rows; so every row is judged once after, by a prompt whose
examples do not include it. Verdicts are ``value ≥ threshold`` for the judge and for people's
value. On the rows with a verdict before and after, Cohen's kappa and balanced accuracy with
bootstrap intervals (:func:`~rag_experiments.qualify.stats.binary_agreement`) and the gain
``after − before`` with a paired bootstrap interval
(:func:`~rag_experiments.qualify.stats.paired_gain`). The result says **improvement** when the
kappa gain's interval lies above 0, **worse** when below, and otherwise **no evidence of
improvement** (the interval includes 0): with a constant judge (``judge=fake``) or one that
ignores its prompt, that is the honest result.

The example set written is chosen from all labeled rows by the same rule
(:class:`~rag_experiments.metrics.fewshot.ExampleSet`, loaded with
``metrics.suite.<m>.examples=<file>``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.definitions import LabelSet
from rag_experiments.metrics.fewshot import Example, ExampleSet
from rag_experiments.qualify.stats import BinaryAgreement, PairedGain, binary_agreement, paired_gain
from rag_experiments.records import RagResponse, Sample

METHOD = (
    "k-shot examples chosen from people's labels, the judge's disagreements first, positive "
    "and negative alternating (rag-exp align; Brown et al. 2020 in-context few-shot)"
)
"""The ``method`` line of a written example set."""


@dataclass(frozen=True)
class LabeledRow:
    """One row people labeled.

    Attributes:
        sample: The question (with reference).
        response: The answer and its contexts.
        human: People's value in [0, 1].
        judged: The judge's logged value of the metric (NaN when none).
    """

    sample: Sample
    response: RagResponse
    human: float
    judged: float = math.nan

    @property
    def id(self) -> str:
        """The sample id."""
        return self.sample.id


def verdict_label(value: float, labels: LabelSet | None, threshold: float) -> str:
    """The label people gave as a word: label ``round(v · (K − 1))`` of the metric's ``K``
    labels (the inverse of the calibration loader's ``k / (K − 1)``), or ``positive`` /
    ``negative`` by ``threshold`` for a metric without labels."""
    if labels is None:
        return "positive" if value >= threshold else "negative"
    k = len(labels.labels)
    return labels.labels[max(0, min(k - 1, round(value * (k - 1))))]


def choose(rows: Sequence[LabeledRow], k: int, threshold: float, seed: int) -> list[LabeledRow]:
    """``k`` rows for the prompt (rule in the module docstring): per people's verdict, the
    rows the judge got wrong first (each group in a seeded shuffle), then the two verdicts
    alternately, starting with the one the judge got wrong more often.

    Args:
        rows: Candidate labeled rows.
        k: How many (fewer when fewer rows).
        threshold: Verdict threshold of people's and the judge's values.
        seed: Seed of the shuffle.
    """
    rng = random.Random(seed)

    def disagrees(r: LabeledRow) -> bool:
        return not math.isnan(r.judged) and (r.judged >= threshold) != (r.human >= threshold)

    queues = []
    for positive in (True, False):
        side = [r for r in rows if (r.human >= threshold) == positive]
        wrong = [r for r in side if disagrees(r)]
        right = [r for r in side if not disagrees(r)]
        rng.shuffle(wrong)
        rng.shuffle(right)
        queues.append((len(wrong), wrong + right))
    queues.sort(key=lambda q: -q[0])  # stable: positive first on a tie
    first, second = queues[0][1], queues[1][1]
    picked: list[LabeledRow] = []
    while (first or second) and len(picked) < k:
        for queue in (first, second):
            if queue and len(picked) < k:
                picked.append(queue.pop(0))
    return picked


def example_set(
    rows: Sequence[LabeledRow], metric: str, labels: LabelSet | None, threshold: float
) -> ExampleSet:
    """The :class:`~rag_experiments.metrics.fewshot.ExampleSet` of ``rows`` (people's label
    as the verdict, the note saying what the judge had given when it disagreed)."""
    examples = []
    for r in rows:
        note = ""
        if not math.isnan(r.judged) and (r.judged >= threshold) != (r.human >= threshold):
            note = f"the judge had given {r.judged:.2f}; people grade it {r.human:.2f}"
        examples.append(
            Example(
                question=r.sample.user_input,
                answer=r.response.response,
                verdict=verdict_label(r.human, labels, threshold),
                value=round(float(r.human), 4),
                contexts=tuple(r.response.retrieved_contexts),
                reference=r.sample.reference,
                note=note,
                id=r.id,
            )
        )
    return ExampleSet(tuple(examples), metric, METHOD)


@dataclass
class AlignResult:
    """Outcome of :func:`align`.

    Attributes:
        metric: The metric column.
        k: Examples per prompt.
        folds: Cross-validation folds.
        threshold: Verdict threshold.
        n_labeled: Labeled rows used.
        n_compared: Rows with a verdict before and after (the statistics' n).
        before: Agreement of the judge without examples.
        after: Agreement with examples (cross-validated).
        gains: ``{"kappa": …, "balanced_accuracy": …}``.
        examples: The example set chosen from all labeled rows.
        left_out: Rows without a verdict before or after, by reason.
    """

    metric: str
    k: int
    folds: int
    threshold: float
    n_labeled: int
    n_compared: int
    before: BinaryAgreement
    after: BinaryAgreement
    gains: dict[str, PairedGain]
    examples: ExampleSet
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """``improvement``, ``worse`` or ``no evidence of improvement`` (kappa's gain)."""
        gain = self.gains["kappa"]
        if gain.improved:
            return "improvement"
        if gain.worse:
            return "worse"
        return "no evidence of improvement"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (NaN as None)."""

        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(float(x), 4)

        def agreement(a: BinaryAgreement) -> dict[str, Any]:
            return {
                "kappa": num(a.kappa),
                "kappa_ci": [num(a.kappa_ci[0]), num(a.kappa_ci[1])],
                "balanced_accuracy": num(a.balanced_accuracy),
                "balanced_accuracy_ci": [
                    num(a.balanced_accuracy_ci[0]),
                    num(a.balanced_accuracy_ci[1]),
                ],
            }

        return {
            "metric": self.metric,
            "k": self.k,
            "folds": self.folds,
            "threshold": self.threshold,
            "n_labeled": self.n_labeled,
            "n_compared": self.n_compared,
            "left_out": self.left_out,
            "before": agreement(self.before),
            "after": agreement(self.after),
            "gain": {
                s: {"gain": num(g.gain), "ci": [num(g.ci[0]), num(g.ci[1])]}
                for s, g in self.gains.items()
            },
            "verdict": self.verdict,
            "examples_version": self.examples.version,
        }

    def format(self) -> str:
        """The printed report."""

        def ci(value: float, interval: tuple[float, float], sign: bool = False) -> str:
            f = "+.3f" if sign else ".3f"
            return f"{value:{f}} [{interval[0]:{f}}, {interval[1]:{f}}]"

        rows = [
            f"align {self.metric}: {self.n_labeled} labeled rows, k={self.k} examples, "
            f"{self.folds}-fold cross-validation, verdict = value ≥ {self.threshold:g}",
            f"  {'':<20}{'before':<24}{'after (held-out)':<24}gain [95% CI]",
        ]
        for s, title in (("kappa", "kappa"), ("balanced_accuracy", "balanced accuracy")):
            b, a, g = getattr(self.before, s), getattr(self.after, s), self.gains[s]
            rows.append(
                f"  {title:<20}{ci(b, getattr(self.before, s + '_ci')):<24}"
                f"{ci(a, getattr(self.after, s + '_ci')):<24}{ci(g.gain, g.ci, sign=True)}"
            )
        left = ", ".join(f"{n} {why}" for why, n in sorted(self.left_out.items()))
        rows.append(
            f"  n = {self.n_compared} rows judged before and after"
            + (f" (left out: {left})" if left else "")
        )
        if self.verdict == "improvement":
            rows.append("  improvement: the 95% CI of the kappa gain lies above 0")
        elif self.verdict == "worse":
            rows.append("  worse: the 95% CI of the kappa gain lies below 0")
        else:
            rows.append("  no evidence of improvement: the 95% CI of the kappa gain includes 0")
        return "\n".join(rows)


def _values(metric: Any, column: str, rows: Sequence[LabeledRow]) -> list[float]:
    if not rows:
        return []
    out = metric.evaluate([r.sample for r in rows], [r.response for r in rows])
    return [float(v[column].value) if v[column].is_valid else math.nan for v in out]


def align(
    make_metric: Callable[[ExampleSet | None], Any],
    column: str,
    rows: Sequence[LabeledRow],
    *,
    labels: LabelSet | None = None,
    k: int = 4,
    folds: int = 5,
    threshold: float = 0.5,
    seed: int = 0,
    n_resamples: int = 1000,
) -> AlignResult:
    """Choose examples and measure the agreement before and after (module docstring).

    Args:
        make_metric: Builds the metric with the given examples (None = as configured).
        column: The metric column people labeled.
        rows: The labeled rows.
        labels: The column's label set (how people's values are named in the examples).
        k: Examples per prompt (≥ 1).
        folds: Cross-validation folds (2 … number of rows).
        threshold: Verdict threshold in [0, 1].
        seed: Seed of the folds, the choice and the bootstrap.
        n_resamples: Bootstrap resamples.

    Returns:
        The :class:`AlignResult`.

    Raises:
        ConfigError: Fewer than 4 rows, ``k`` < 1, folds outside 2 … rows, or a threshold
            outside [0, 1].
    """
    n = len(rows)
    if n < 4:
        raise ConfigError(f"align {column}: {n} labeled rows; label at least 4 (better 20+)")
    if int(k) < 1:
        raise ConfigError(f"align: --k must be ≥ 1, got {k}")
    if not 2 <= int(folds) <= n:
        raise ConfigError(f"align: --folds must be in 2..{n} (the labeled rows), got {folds}")
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"align: --threshold must be in [0, 1], got {threshold}")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    fold_of = {i: pos % int(folds) for pos, i in enumerate(order)}
    before = _values(make_metric(None), column, rows)
    after = [math.nan] * n
    for f in range(int(folds)):
        held = [i for i in range(n) if fold_of[i] == f]
        train = [rows[i] for i in range(n) if fold_of[i] != f]
        chosen = example_set(choose(train, int(k), threshold, seed), column, labels, threshold)
        values = _values(make_metric(chosen), column, [rows[i] for i in held])
        for i, v in zip(held, values, strict=True):
            after[i] = v
    kept = [i for i in range(n) if not math.isnan(before[i]) and not math.isnan(after[i])]
    left_out: dict[str, int] = {}
    for i in range(n):
        if math.isnan(before[i]) or math.isnan(after[i]):
            why = "no verdict before" if math.isnan(before[i]) else "no verdict after"
            left_out[why] = left_out.get(why, 0) + 1
    truth = [rows[i].human >= threshold for i in kept]
    vb = [before[i] >= threshold for i in kept]
    va = [after[i] >= threshold for i in kept]
    opts = {"seed": seed, "n_resamples": n_resamples}
    return AlignResult(
        metric=column,
        k=int(k),
        folds=int(folds),
        threshold=threshold,
        n_labeled=n,
        n_compared=len(kept),
        before=binary_agreement(truth, vb, **opts),
        after=binary_agreement(truth, va, **opts),
        gains=paired_gain(truth, vb, va, **opts),
        examples=example_set(choose(rows, int(k), threshold, seed), column, labels, threshold),
        left_out=left_out,
    )
