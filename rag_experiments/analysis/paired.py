"""The result types of a paired run comparison (:mod:`rag_experiments.analysis.compare`): one
metric's paired statistics, a pass threshold, a flipped question, the whole comparison; in their
own module so that the comparison and its plots (:mod:`rag_experiments.analysis.plots`) both
import them without importing each other."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rag_experiments.analysis.diagnosis import diagnosis_json, diagnosis_lines
from rag_experiments.config.stats_defaults import N_RESAMPLES
from rag_experiments.metrics.keys import key_metrics_among
from rag_experiments.tracking.record import TAGS

CONFIDENCE = 0.95
"""Coverage of the difference's confidence interval."""

ALL = "all"
"""Group name of the comparison over every question."""

NOTE_TAG = TAGS.note
"""The run description tag (MLflow's ``mlflow.note.content``): the caveats a run carries
(see :class:`Comparison`)."""

MIN_PAIRS_CI = 2
"""Fewest pairs with a confidence interval (below it: NaN, reason :data:`TOO_FEW_PAIRS`)."""

TOO_FEW_PAIRS = "too_few_pairs"
"""Reason of a statistic left NaN because there are too few pairs for it."""


@dataclass(frozen=True)
class PairedStat:
    """Paired comparison of one metric over one group of questions (b − a).

    Attributes:
        metric: Canonical metric name.
        group: ``"all"`` or a question type.
        n: Pairs (questions with a value in both runs).
        mean_a: Mean of run a over the pairs.
        mean_b: Mean of run b over the pairs.
        diff: ``mean_b − mean_a`` (NaN when n = 0).
        ci_low: Lower bound of the 95 % paired bootstrap CI of the diff.
        ci_high: Upper bound of it.
        p_value: Two-sided paired permutation (sign-flip) test p-value, in (0, 1].
        p_holm: Holm-adjusted p across the metrics of the group, in (0, 1].
        higher_is_better: The metric's direction.
        reason: Why some of the statistics are NaN (:data:`TOO_FEW_PAIRS`: n <
            :data:`MIN_PAIRS_CI`), ``""`` when all are defined.
    """

    metric: str
    group: str
    n: int
    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    p_holm: float
    higher_is_better: bool = True
    reason: str = ""

    @property
    def verdict(self) -> str:
        """``better`` / ``worse`` (b against a) when the CI excludes 0 and p_holm < 0.05,
        else ``""``."""
        if not (self.p_holm < 0.05 and (self.ci_low > 0 or self.ci_high < 0)):
            return ""
        return "better" if (self.diff > 0) == self.higher_is_better else "worse"


@dataclass(frozen=True)
class Threshold:
    """Pass threshold of a metric (see the module docstring).

    Attributes:
        value: t.
        inclusive: ``value ≥ t`` passes (``≤`` for lower-is-better); strict comparison when
            False.
    """

    value: float
    inclusive: bool = True

    def passes(self, x: float, higher_is_better: bool = True) -> bool:
        """Whether the value ``x`` passes."""
        if higher_is_better:
            return x >= self.value if self.inclusive else x > self.value
        return x <= self.value if self.inclusive else x < self.value


@dataclass(frozen=True)
class Flip:
    """A question that passed a metric's threshold in one run and not in the other.

    Attributes:
        metric: Canonical metric name.
        id: Sample id.
        question_type: The sample's type ("" when none).
        user_input: The question.
        a: Value in run a.
        b: Value in run b.
        change: ``gained`` (passes in b only) or ``lost`` (passes in a only).
    """

    metric: str
    id: str
    question_type: str
    user_input: str
    a: float
    b: float
    change: str


@dataclass
class Comparison:
    """Everything :func:`compare_tables` found.

    Attributes:
        stats: One :class:`PairedStat` per metric over ``all``, then per type.
        flips: Flipped questions, by metric then id.
        thresholds: The pass threshold used per metric.
        pairs: ``{metric: (a values, b values)}`` over all pairs (for the scatter plots).
        n_common: Questions present in both runs.
        run_a: Id of run a ("" for tables compared directly).
        run_b: Id of run b.
        dataset_digest: ``{"a": digest, "b": digest}``.
        seed: Seed of the bootstrap and the permutations.
        n_resamples: Resamples per bootstrap and per test.
        notes: ``{"a"|"b": note}``: each run's description (``mlflow.note.content``) when it
            has one: the caveat of a run that used the embedded 135M model, a judge
            qualification warning; printed under the table, as ``rag-exp run`` prints it.
    """

    stats: list[PairedStat]
    flips: list[Flip]
    thresholds: dict[str, Threshold]
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    n_common: int = 0
    run_a: str = ""
    run_b: str = ""
    dataset_digest: dict[str, str | None] = field(default_factory=dict)
    seed: int = 0
    n_resamples: int = N_RESAMPLES
    notes: dict[str, str] = field(default_factory=dict)

    def overall(self) -> list[PairedStat]:
        """The stats over every question."""
        return [s for s in self.stats if s.group == ALL]

    def to_json(self) -> dict[str, Any]:
        """``{"metrics": {name: {diff, ci_low, ci_high, p_value, p_holm, n, mean_a, mean_b,
        higher_is_better}}, "by_type": {type: {name: {…}}}, "flipped": [...], …}``; NaN
        becomes null."""
        by_type: dict[str, dict[str, Any]] = {}
        for s in self.stats:
            if s.group != ALL:
                by_type.setdefault(s.group, {})[s.metric] = _stat_json(s)
        return strict_json({
            "run_a": self.run_a, "run_b": self.run_b, "dataset_digest": self.dataset_digest,
            "n_common": self.n_common, "seed": self.seed, "n_resamples": self.n_resamples,
            "confidence": CONFIDENCE,
            "metrics": {s.metric: _stat_json(s) for s in self.overall()},
            "by_type": by_type,
            "flipped": [asdict(f) for f in self.flips],
            "thresholds": {m: asdict(t) for m, t in self.thresholds.items()},
            "notes": self.notes,
            "diagnosis": diagnosis_json(self.overall()),
        })  # fmt: skip

    def rows(self) -> list[dict[str, Any]]:
        """One CSV row per (group, metric)."""
        return [{**asdict(s), "verdict": s.verdict} for s in self.stats]

    def format(self, max_flips: int = 5, all_metrics: bool = False) -> str:
        """A human-readable summary: the overall table, then the flipped questions.

        The key metrics (:data:`~rag_experiments.metrics.keys.KEY_METRICS`, in that order)
        come first; the other metrics are summarised in one line each for the table
        (how many are better, worse, undecided) and for the flips, unless ``all_metrics``.
        A comparison without any key metric (``--metrics Hit@1``) lists every metric.

        Args:
            max_flips: Flipped questions listed per metric.
            all_metrics: List every metric, not only the key ones.
        """
        overall = self.overall()
        key = key_metrics_among(s.metric for s in overall)
        if all_metrics or not key:
            shown = [s for s in overall]
        else:
            order = {m: i for i, m in enumerate(key)}
            shown = sorted((s for s in overall if s.metric in order), key=lambda s: order[s.metric])
        shown_names = {s.metric for s in shown}
        rest = [s for s in overall if s.metric not in shown_names]
        width = max([len(s.metric) for s in shown] + [24])
        lines = [
            f"compare a={self.run_a} b={self.run_b}: {self.n_common} common questions, "
            f"diff = b - a, {CONFIDENCE:.0%} paired bootstrap CI, permutation p "
            f"({self.n_resamples} resamples, seed {self.seed}), Holm across metrics"
        ]
        lines.append(
            f"  {'metric':<{width}} {'n':>4} {'a':>7} {'b':>7} {'diff':>8} "
            f"{'95% CI':>18} {'p':>7} {'p_holm':>7}"
        )
        for s in shown:
            ci = f"[{s.ci_low:+.3f}, {s.ci_high:+.3f}]"
            lines.append(
                f"  {s.metric:<{width}} {s.n:>4} {s.mean_a:>7.4f} {s.mean_b:>7.4f} "
                f"{s.diff:>+8.4f} {ci:>18} {s.p_value:>7.4f} {s.p_holm:>7.4f}"
                f"  {s.verdict or _why_nan(s)}".rstrip()
            )
        if rest:
            verdicts = Counter(s.verdict or "no decision" for s in rest)
            lines.append(
                f"  + {len(rest)} other metrics: "
                + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
                + " (--all lists them; every group and metric: compare.csv)"
            )
        by_metric: dict[str, list[Flip]] = {}
        for f in self.flips:
            by_metric.setdefault(f.metric, []).append(f)
        other_flips = {m: fl for m, fl in by_metric.items() if m not in shown_names}
        if any(m in shown_names for m in by_metric):
            lines.append("flipped questions (passed the threshold in one run only):")
        for metric, flips in by_metric.items():
            if metric not in shown_names:
                continue
            t = self.thresholds[metric]
            gained = sum(f.change == "gained" for f in flips)
            lines.append(
                f"  {metric} (t {'≥' if t.inclusive else '>'} {t.value:g}): "
                f"{gained} gained, {len(flips) - gained} lost"
            )
            for f in flips[:max_flips]:
                lines.append(
                    f"    {f.change:<6} {f.id}  {f.a:.3f} -> {f.b:.3f}  {_short(f.user_input)}"
                )
            if len(flips) > max_flips:
                lines.append(f"    … and {len(flips) - max_flips} more (--json lists all)")
        if other_flips:
            lines.append(
                f"  + flipped questions on {len(other_flips)} other metrics "
                f"({sum(len(f) for f in other_flips.values())} flips; --all lists them, "
                "flipped.csv has every one)"
            )
        lines += diagnosis_lines(overall)
        if self.notes and self.notes.get("a") == self.notes.get("b"):
            lines.append(f"  NOTE (runs a and b): {self.notes['a']}")
        else:
            lines += [f"  NOTE (run {label}): {note}" for label, note in self.notes.items()]
        return "\n".join(lines)


def _why_nan(s: PairedStat) -> str:
    """The table's note on a row with NaN statistics: how many pairs there were and why."""
    if not s.reason:
        return ""
    return f"{s.reason} (n < {MIN_PAIRS_CI}: questions with a value in both runs)"


def _stat_json(s: PairedStat) -> dict[str, Any]:
    return {
        "diff": s.diff,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "p_value": s.p_value,
        "p_holm": s.p_holm,
        "n": s.n,
        "mean_a": s.mean_a,
        "mean_b": s.mean_b,
        "higher_is_better": s.higher_is_better,
        "verdict": s.verdict,
        "reason": s.reason,
    }


def strict_json(obj: Any) -> Any:
    """NaN and infinities → None, recursively (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [strict_json(v) for v in obj]
    return obj


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
