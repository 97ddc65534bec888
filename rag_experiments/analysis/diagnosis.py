"""The diagnosis of a comparison: where a change between two runs is — the retriever or the
generator — read from the claim diagnostics (:mod:`~rag_experiments.metrics.claim_formulas`).

The paired statistics of the claim metrics (:class:`~rag_experiments.analysis.paired.
PairedStat`, over all questions: :meth:`~rag_experiments.analysis.paired.Comparison.overall`)
are grouped as RAGChecker groups them (overall, retriever,
generator), and one line names the **largest significant change**: among the retriever and
generator metrics whose change is significant (the comparison's own verdict: the 95 % paired
CI excludes 0 and Holm-adjusted p < 0.05), the one with the largest |b − a|; a drop (``worse``)
before a gain. Only when no retriever or generator metric changed significantly is an overall
one (claim precision / recall / F1) named. The line gives the diff and its CI in the metric's
own direction, e.g. ``the drop is in the generator's noise sensitivity (irrelevant chunks):
+0.120 [+0.050, +0.190]`` (noise sensitivity is lower-is-better: +0.12 is worse).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from rag_experiments.metrics.claim_formulas import GROUPS, READABLE


class PairedStat(Protocol):
    """What the diagnosis reads of a :class:`~rag_experiments.analysis.paired.PairedStat`
    (over all questions)."""

    metric: str
    diff: float
    ci_low: float
    ci_high: float
    higher_is_better: bool

    @property
    def verdict(self) -> str: ...  # noqa: D102


ORDER = ("retriever", "generator", "overall")


def _claim_stats(stats: Sequence[PairedStat]) -> list[PairedStat]:
    """The stats of claim metrics (a backend prefix allowed), in :data:`GROUPS` order."""
    found = {_base(s.metric): s for s in stats if _base(s.metric) in GROUPS}
    return [found[m] for m in GROUPS if m in found]


def _base(metric: str) -> str:
    return metric.rsplit(".", 1)[-1]


def headline(stats: Sequence[PairedStat]) -> str | None:
    """The one line naming the largest significant change (module docstring); ``"no
    significant change in the claim diagnostics"`` when none; None without claim metrics."""
    claims = _claim_stats(stats)
    if not claims:
        return None
    changed = [s for s in claims if s.verdict]
    if not changed:
        return "no significant change in the claim diagnostics"
    parts = [s for s in changed if GROUPS[_base(s.metric)] != "overall"] or changed
    worse = [s for s in parts if s.verdict == "worse"]
    pick = max(worse or parts, key=lambda s: abs(s.diff))
    group = GROUPS[_base(pick.metric)]
    where = READABLE[_base(pick.metric)]
    if group != "overall":
        where = f"the {group}'s {where}"
    kind = "drop" if pick.verdict == "worse" else "gain"
    return f"the {kind} is in {where}: {pick.diff:+.3f} [{pick.ci_low:+.3f}, {pick.ci_high:+.3f}]"


def diagnosis_lines(stats: Sequence[PairedStat]) -> list[str]:
    """The diagnosis block of ``rag-exp compare``: the claim metrics by group (diff, CI,
    verdict; ↓ marks lower-is-better) and the :func:`headline`; ``[]`` without claim
    metrics."""
    claims = _claim_stats(stats)
    line = headline(stats)
    if not claims or line is None:
        return []
    lines = [f"diagnosis: {line}"]
    for group in ORDER:
        members = [s for s in claims if GROUPS[_base(s.metric)] == group]
        if not members:
            continue
        cells = [
            f"{s.metric}{'' if s.higher_is_better else ' ↓'} {s.diff:+.3f} "
            f"[{s.ci_low:+.3f}, {s.ci_high:+.3f}]{' ' + s.verdict if s.verdict else ''}"
            for s in members
        ]
        lines.append(f"  {group}: " + "; ".join(cells))
    return lines


def diagnosis_json(stats: Sequence[PairedStat]) -> dict[str, Any] | None:
    """``{"headline": str, "groups": {group: [metric, …]}}`` for ``compare --json``; None
    without claim metrics."""
    claims = _claim_stats(stats)
    if not claims:
        return None
    groups: dict[str, list[str]] = {}
    for s in claims:
        groups.setdefault(GROUPS[_base(s.metric)], []).append(s.metric)
    return {"headline": headline(stats), "groups": groups}


class SweepChild(Protocol):
    """What :func:`sweep_lines` reads of a sweep child
    (:class:`~rag_experiments.analysis.report.Child`)."""

    mean: dict[str, float]
    ci_low: dict[str, float]
    ci_high: dict[str, float]

    @property
    def label(self) -> str: ...  # noqa: D102


def sweep_lines(children: Sequence[SweepChild]) -> list[str]:
    """The diagnosis block of ``rag-exp report``: per part (retriever, generator, overall) the
    range of each claim metric over the finished children, and one line naming the claim
    metric whose best and worst child differ most among those whose 95 % CIs do not overlap
    (retriever and generator metrics before overall ones); ``[]`` when the children have no
    claim metric.

    Unlike :func:`headline` (paired, per question), this compares run means: non-overlapping
    intervals are a conservative sign of a real difference, not a test.
    """
    present = [m for m in GROUPS if any(_finite(c.mean.get(m)) for c in children)]
    if not present or len(children) < 2:
        return []
    spans: dict[str, tuple[float, SweepChild, SweepChild, bool]] = {}
    for m in present:
        valued = [c for c in children if _finite(c.mean.get(m))]
        lo = min(valued, key=lambda c: c.mean[m])
        hi = max(valued, key=lambda c: c.mean[m])
        apart = lo.ci_high.get(m, float("nan")) < hi.ci_low.get(m, float("nan"))
        spans[m] = (hi.mean[m] - lo.mean[m], lo, hi, apart)
    apart = [m for m in present if spans[m][3] and spans[m][0] > 0]
    parts = [m for m in apart if GROUPS[m] != "overall"] or apart
    if parts:
        m = max(parts, key=lambda name: spans[name][0])
        _, lo, hi, _ = spans[m]
        where = READABLE[m] if GROUPS[m] == "overall" else f"the {GROUPS[m]}'s {READABLE[m]}"
        head = (
            f"the children differ most in {where}: {lo.mean[m]:.3f} ({lo.label}) to "
            f"{hi.mean[m]:.3f} ({hi.label}), 95% CIs apart"
        )
    else:
        head = "no claim metric differs between children beyond their 95% CIs"
    lines = [f"diagnosis: {head}"]
    for group in ORDER:
        cells = [
            f"{m} {spans[m][1].mean[m]:.3f}–{spans[m][2].mean[m]:.3f}"
            for m in present
            if GROUPS[m] == group
        ]
        if cells:
            lines.append(f"  {group}: " + "; ".join(cells))
    return lines


def _finite(value: float | None) -> bool:
    return value is not None and value == value and abs(value) != float("inf")
