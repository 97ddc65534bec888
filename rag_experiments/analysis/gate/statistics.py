"""The gate's statistics: each rule's verdict on one question group from two per-query tables
(:func:`evaluate_tables`): a bound on the candidate's mean with its bootstrap CI, the
non-inferiority test of a ``max_drop`` rule (paired bootstrap CI of the worsening, the
sign-flip permutation test of the differences shifted by the margin, Holm within a question
group) and the judge's noise on a difference of means. The rules and their references are in
the package docstring (:mod:`rag_experiments.analysis.gate`). Reads no store."""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from rag_experiments.analysis.compare import compare_tables, holm
from rag_experiments.analysis.gate.results import RuleResult
from rag_experiments.analysis.gate.rules import (
    FAIL,
    PASS,
    UNDECIDED,
    GateSettings,
    Rule,
    rule_limits,
)
from rag_experiments.analysis.paired import ALL, CONFIDENCE, MIN_PAIRS_CI, PairedStat
from rag_experiments.analysis.runs import MetricInfo
from rag_experiments.config.stats_defaults import ALPHA, N_RESAMPLES, SEED
from rag_experiments.metrics.aggregate import bootstrap_ci

JudgeNoise = tuple[tuple[float, int], tuple[float, int]]
"""``((sd_b, R_b), (sd_c, R_c))``: each run's pooled within-row judge SD and judge repeats."""


def judge_noise_of_diff(
    n: int, sd_b: float, repeats_b: int, sd_c: float, repeats_c: int, alpha: float = ALPHA
) -> float:
    """The judge's own noise on a difference of two means: the half-width (z times the standard
    error) that the judge's repeat-to-repeat variance alone adds to candidate − baseline, for a
    ``max_drop`` rule's "within judge noise" guard (formula and reasoning in the package
    docstring, :mod:`rag_experiments.analysis.gate`). Not the per-run ``judge_sd`` /
    ``flip_rate`` of :func:`rag_experiments.metrics.repeats.judge_noise`.

    Args:
        n: Paired rows (≥ 1).
        sd_b: Baseline's pooled within-row SD σ of the judge over its repeats (metric units, ≥ 0).
        repeats_b: Baseline's judge repeats per row (≥ 1).
        sd_c: Candidate's pooled within-row SD.
        repeats_c: Candidate's judge repeats per row.
        alpha: Two-sided level; z = Φ⁻¹(1 − α/2).

    Returns:
        z · sqrt(sd_b²/(n·R_b) + sd_c²/(n·R_c)), in metric units.
    """
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    return z * math.sqrt(sd_b**2 / (n * repeats_b) + sd_c**2 / (n * repeats_c))


def evaluate_tables(
    candidate: pd.DataFrame,
    baseline: pd.DataFrame | None,
    specs: Sequence[MetricInfo],
    settings: GateSettings,
    *,
    noise: Mapping[str, JudgeNoise] | None = None,
    baseline_metrics: Collection[str] | None = None,
) -> list[RuleResult]:
    """Apply the rules to two per-query tables (the package docstring gives every rule).

    Args:
        candidate: The candidate's per-query table (``id``, ``question_type``, metric columns).
        baseline: The baseline's table, or None (``max_drop`` rules are then undecided).
        specs: The candidate's metric columns with their declared direction (bounds read
            the candidate only; a ``max_drop`` rule also needs the metric in the baseline).
        settings: The rules.
        noise: ``{metric: ((sd_b, R_b), (sd_c, R_c))}`` for metrics whose judge noise both
            runs logged.
        baseline_metrics: Metrics the baseline run computed (its ``metric_specs.json``);
            None = the baseline table's columns.

    Returns:
        One result per rule kind and group, in rule order (``all`` first, then the types).
    """
    by_name = {s.name: s for s in specs}
    in_base = set(
        baseline_metrics
        if baseline_metrics is not None
        else (baseline.columns if baseline is not None else ())
    ) & set(by_name)
    noise = dict(noise or {})
    types = _types(candidate)
    drop_rules = [r for r in settings.rules if r.max_drop is not None and r.metric in in_base]
    paired: dict[tuple[str, str], PairedStat] = {}
    if baseline is not None and drop_rules:
        comparison = compare_tables(
            baseline,
            candidate,
            [by_name[r.metric] for r in drop_rules],
            seed=settings.seed,
            n_resamples=settings.n_resamples,
        )
        paired = {(s.metric, s.group): s for s in comparison.stats}
    p_ni = (
        _noninferiority_p(candidate, baseline, drop_rules, by_name, settings)
        if baseline is not None and drop_rules
        else {}
    )
    out: list[RuleResult] = []
    for rule in settings.rules:
        groups = [ALL] + (types if rule.by_type else [])
        spec = by_name.get(rule.metric)
        for group in groups:
            for kind, limit in rule_limits(rule):
                if spec is None:
                    out.append(_missing(rule.metric, kind, limit, group, "candidate", by_name))
                elif kind == "max_drop" and baseline is not None and rule.metric not in in_base:
                    out.append(_missing(rule.metric, kind, limit, group, "baseline", in_base))
                elif kind == "max_drop":
                    out.append(
                        _drop_rule(
                            spec,
                            limit,
                            group,
                            paired.get((rule.metric, group)),
                            p_ni.get((rule.metric, group), math.nan),
                            settings,
                            noise.get(rule.metric),
                            baseline is not None,
                        )  # fmt: skip
                    )
                else:
                    out.append(_bound_rule(spec, kind, limit, group, candidate, settings))
    return out


def noninferiority_p(
    worsening: Sequence[float], margin: float, *, seed: int = SEED, n_resamples: int = N_RESAMPLES
) -> float:
    """One-sided p-value of H0 "mean worsening ≤ ``margin``" against H1 "> ``margin``".

    The paired sign-flip permutation test of the shifted differences x_i = w_i − margin
    (under H0 at its boundary each x_i is symmetric about 0, so its sign is exchangeable;
    Wellek 2010, §2.1: a non-inferiority hypothesis is tested as a one-sided test of the
    difference shifted by the margin; Good, *Permutation Tests*, 2000, §3.1):
    p = (1 + #{sign patterns with mean(±x) ≥ mean(x)}) / (1 + B), or the exact share over all
    2ⁿ patterns when 2ⁿ ≤ ``n_resamples`` (``scipy.stats.permutation_test``).

    Args:
        worsening: Per-question worsening w_i (metric units; > 0 = candidate worse), no NaN.
        margin: The non-inferiority margin δ = ``max_drop`` (≥ 0).
        seed: Seed of the random sign patterns.
        n_resamples: Random sign patterns B.

    Returns:
        p in (0, 1]; NaN for fewer than 2 pairs.
    """
    x = np.asarray(worsening, dtype=np.float64) - margin
    if x.size < MIN_PAIRS_CI:
        return math.nan
    test = stats.permutation_test(
        (x,), _mean, permutation_type="samples", vectorized=True,
        n_resamples=n_resamples, alternative="greater", rng=seed,
    )  # fmt: skip
    return float(test.pvalue)


def _mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _noninferiority_p(
    candidate: pd.DataFrame,
    baseline: pd.DataFrame,
    drop_rules: Sequence[Rule],
    by_name: Mapping[str, MetricInfo],
    settings: GateSettings,
) -> dict[tuple[str, str], float]:
    """Holm-adjusted :func:`noninferiority_p` of every ``max_drop`` rule, per question group
    (Holm within a group: ``all`` over every rule, a type over the ``by_type`` rules). Rows
    are paired by ``id`` and grouped by the baseline's ``question_type``, as
    :func:`~rag_experiments.analysis.compare.compare_tables` does."""
    a = baseline.drop_duplicates("id").set_index("id")
    b = candidate.drop_duplicates("id").set_index("id")
    common = [i for i in a.index if i in b.index]
    if not common:
        return {}
    a, b = a.loc[common], b.loc[common]
    types = (
        a["question_type"].fillna("").astype(str)
        if "question_type" in a
        else pd.Series("", index=a.index)
    )
    groups = [(ALL, np.ones(len(common), dtype=bool), drop_rules)]
    groups += [
        (t, (types == t).to_numpy(), [r for r in drop_rules if r.by_type])
        for t in sorted(set(types) - {""})
    ]
    out: dict[tuple[str, str], float] = {}
    for group, member, rules in groups:
        raw = []
        for rule in rules:
            spec = by_name[rule.metric]
            if spec.name not in a.columns or spec.name not in b.columns:
                raw.append(math.nan)
                continue
            va = pd.to_numeric(a[spec.name], errors="coerce").to_numpy(dtype=np.float64)
            vb = pd.to_numeric(b[spec.name], errors="coerce").to_numpy(dtype=np.float64)
            keep = member & ~np.isnan(va) & ~np.isnan(vb)
            d = vb[keep] - va[keep]
            worse = -d if spec.higher_is_better else d
            raw.append(
                noninferiority_p(
                    worse,
                    float(rule.max_drop or 0.0),
                    seed=settings.seed,
                    n_resamples=settings.n_resamples,
                )  # fmt: skip
            )
        for rule, p in zip(rules, holm(raw), strict=True):
            out[(rule.metric, group)] = p
    return out


def _types(table: pd.DataFrame) -> list[str]:
    if "question_type" not in table:
        return []
    return sorted(set(table["question_type"].fillna("").astype(str)) - {""})


def _bound_rule(
    spec: MetricInfo,
    kind: str,
    limit: float,
    group: str,
    table: pd.DataFrame,
    settings: GateSettings,
) -> RuleResult:
    rows = table if group == ALL else table[table["question_type"].astype(str) == group]
    values = pd.to_numeric(rows[spec.name], errors="coerce").to_numpy(dtype=np.float64)
    values = values[~np.isnan(values)]
    n = int(values.size)
    if n < settings.min_pairs:
        return RuleResult(
            spec.name, kind, limit, group, UNDECIDED,
            f"only {n} rows with a value (min_pairs {settings.min_pairs})", n,
        )  # fmt: skip
    mean = float(np.mean(values))
    low, high = bootstrap_ci(
        values, seed=settings.seed, n_resamples=settings.n_resamples, confidence=CONFIDENCE
    )
    ok = mean >= limit if kind == "min" else mean <= limit
    sign = ("≥" if ok else "<") if kind == "min" else ("≤" if ok else ">")
    message = f"mean {mean:.4f} {sign} {limit:g} (n {n}, 95% CI [{low:.4f}, {high:.4f}])"
    return RuleResult(
        spec.name, kind, limit, group, PASS if ok else FAIL, message, n, mean,
        ci_low=low, ci_high=high,
    )  # fmt: skip


def _drop_rule(
    spec: MetricInfo,
    margin: float,
    group: str,
    s: PairedStat | None,
    p_ni: float,
    settings: GateSettings,
    noise: JudgeNoise | None,
    has_baseline: bool,
) -> RuleResult:
    name = spec.name
    if not has_baseline:
        return RuleResult(name, "max_drop", margin, group, UNDECIDED, "no baseline run given")
    n = s.n if s is not None else 0
    if s is None or n < settings.min_pairs or math.isnan(s.ci_low):
        return RuleResult(
            name, "max_drop", margin, group, UNDECIDED,
            f"only {n} paired rows with a value in both runs (min_pairs {settings.min_pairs})", n,
        )  # fmt: skip
    hib = spec.higher_is_better
    worse = -s.diff if hib else s.diff  # worsening, > 0 = candidate worse
    worse_low = -s.ci_high if hib else s.ci_low  # CI of the worsening
    by_ci = worse_low > margin
    by_p = p_ni < settings.alpha  # NaN (too few pairs) compares False
    direction = "higher is better" if hib else "lower is better"
    facts = (
        f"candidate {s.mean_b:.4f} vs baseline {s.mean_a:.4f}, diff {s.diff:+.4f} "
        f"({direction}), 95% CI [{s.ci_low:+.4f}, {s.ci_high:+.4f}]"
    )
    tail = f"p(worsening > {margin:g}) Holm {p_ni:.4g}, n {n}"
    stat = dict(
        n=n, candidate=s.mean_b, baseline=s.mean_a, diff=s.diff, ci_low=s.ci_low,
        ci_high=s.ci_high, p_holm=p_ni,
    )  # fmt: skip
    noise_value = math.nan
    if noise is not None:
        (sd_b, r_b), (sd_c, r_c) = noise
        noise_value = judge_noise_of_diff(n, sd_b, r_b, sd_c, r_c, settings.alpha)
        stat["judge_noise"] = noise_value
        facts += f", judge noise ±{noise_value:.4f}"
    facts += f", {tail}"
    if (by_ci or by_p) and abs(s.diff) < noise_value:
        return RuleResult(
            name, "max_drop", margin, group, PASS,
            f"not failed: the difference {s.diff:+.4f} is within the judge noise "
            f"±{noise_value:.4f} (judge_sd and judge.repeats of both runs; the CI holds the "
            f"judge's noise only when its verdicts are independent between the runs); {facts}",
            **stat,
        )  # fmt: skip
    if by_ci or by_p:
        why = []
        if by_ci:
            why.append(f"the whole CI is worse than the margin {margin:g}")
        if by_p:
            why.append(
                f"the worsening {worse:.4f} exceeds {margin:g} significantly "
                f"(Holm-adjusted non-inferiority p {p_ni:.4g} < alpha {settings.alpha:g})"
            )
        return RuleResult(
            name, "max_drop", margin, group, FAIL,
            f"worse beyond the margin: {' and '.join(why)}; {facts}", **stat,
        )  # fmt: skip
    return RuleResult(
        name, "max_drop", margin, group, PASS,
        f"no worsening beyond {margin:g} shown; {facts}", **stat,
    )  # fmt: skip


def all_undecided(settings: GateSettings, problem: str) -> list[RuleResult]:
    """Every rule's every limit undecided for one reason (the runs cannot be compared)."""
    return [
        RuleResult(r.metric, kind, limit, ALL, UNDECIDED, problem)
        for r in settings.rules
        for kind, limit in rule_limits(r)
    ]


def _missing(
    metric: str, kind: str, limit: float, group: str, run: str, names: Collection[str]
) -> RuleResult:
    """The rule's limit undecided because ``run`` (``candidate`` or ``baseline``) has no
    ``metric``; the message lists up to :data:`SHOWN_METRICS` of the metrics it has
    (``names``), the closest to ``metric`` first (``difflib``), then "… (N more)"."""
    has = _closest_names(metric, names)
    return RuleResult(
        metric,
        kind,
        limit,
        group,
        UNDECIDED,
        f"metric {metric} is missing from the {run} run; it has {has}",
    )


SHOWN_METRICS = 8
"""Most metric names a "metric … is missing" line lists."""


def _closest_names(metric: str, names: Collection[str], limit: int = SHOWN_METRICS) -> str:
    """Up to ``limit`` of ``names``, the closest to ``metric`` first (``difflib`` ratio of the
    case-folded names; ties alphabetically), then "… (N more)" for the others; "none" when
    ``names`` is empty."""
    ranked = sorted(
        set(names),
        key=lambda n: (
            -difflib.SequenceMatcher(None, metric.casefold(), n.casefold()).ratio(),
            n,
        ),
    )
    shown = ", ".join(ranked[:limit]) or "none"
    return shown + (f", … ({len(ranked) - limit} more)" if len(ranked) > limit else "")
