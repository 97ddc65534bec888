"""The regression gate: turn a paired comparison of a candidate run against a baseline run into
pass / fail / undecided per rule, and an exit code (``rag-exp gate``, ``gate=`` of ``rag-exp
run``, the pytest plugin's ``assert_rag``).

Rules are given per metric (canonical names, as in the per-query table)::

    alpha: 0.05
    rules:
      nDCG@10: {max_drop: 0.02}
      faithfulness: {min: 0.8, by_type: true}
      false_refusal_rate: {max: 0.1, max_drop: 0.05}

* ``min`` / ``max`` (**absolute bounds**): the candidate's **mean** over its rows with a value
  must be ≥ ``min`` (≤ ``max``). The bound is checked on the mean, not on the lower bound of
  its CI: a bound is a product requirement on the score a dashboard shows (as DeepEval's
  ``threshold`` and promptfoo's assertions compare the observed score), and a CI-bound rule
  would fail a small but good run only for being small, the flaky gate users complain about.
  The 95 % CI is printed beside it so the margin is visible. Either bound works for either
  direction (a refusal rate wants ``max``).
* ``max_drop`` (**non-inferiority with a margin**, the one rule that reads the baseline): let
  d = candidate − baseline per question (paired, :mod:`rag_experiments.analysis.compare`),
  and the *worsening* w = −d for a higher-is-better metric, w = +d for a lower-is-better one
  (the direction each metric declares in ``metric_specs.json``, never guessed from a name).
  The rule **fails** when

  1. the 95 % paired bootstrap CI of w lies entirely above ``max_drop`` (the candidate is
     worse by more than the margin with 95 % confidence: the non-inferiority test with margin
     δ = ``max_drop`` by a one-sided 97.5 % interval, Wellek, *Testing Statistical Hypotheses of
     Equivalence and Noninferiority*, 2nd ed. 2010, §2; ICH E9 §3.3.2), **or**
  2. the **non-inferiority test** rejects: the one-sided p-value of H0 "mean w ≤ ``max_drop``"
     against H1 "mean w > ``max_drop``" — a paired sign-flip permutation test of the
     differences shifted by the margin, x_i = w_i − ``max_drop`` (:func:`noninferiority_p`;
     Wellek 2010, §2.1: non-inferiority is a one-sided test of the difference shifted by the
     margin) — Holm-adjusted across the ``max_drop`` rules of the same question group (Holm
     1979, *Scand. J. Statist.* 6(2)) is below ``alpha``.

  Otherwise it passes: a worsening not shown to exceed the margin does not fail. A candidate
  whose true worsening equals the margin fails with probability ≈ ``alpha`` (the test's size;
  rule 1 is a one-sided 2.5 % test, mostly inside rule 2), one inside the margin less often.
  (The earlier rule 2, "p of d ≠ 0 < alpha and the observed w > margin", failed such a
  candidate about half the time: it tested "different from 0", not "past the margin".)
  Holm corrects within one group (``all``, or one question type), not across the types.
* ``by_type: true`` applies the metric's rules to each question type as well (one line per
  type, Holm within each type's group).

**Judge noise.** When both runs logged the metric ``<metric>.judge_sd`` (pooled within-row SD σ of
the judge over its repeats) and the param ``judge.repeats`` (R, ``judge.repeats=N`` of
``rag-exp run``), the judge's own noise on the difference of the two means over n paired rows
is

    noise = z_{1−α/2} · sqrt(sd_b² / (n · R_b) + sd_c² / (n · R_c))

(a row's value is the mean of R verdicts, so its judge SD is sd/√R; the mean of n rows has
sd/√(nR); the two runs' judges are independent, so the variances add; z = 1.96 at α = 0.05).
A ``max_drop`` rule whose |d| is below that noise is **not failed**: the line says
"within judge noise ±…"; every ``max_drop`` line prints the noise next to the CI. Per question
type the run-level sd is used with the type's n. When the two runs' verdicts are independent
(fresh judge calls), the paired CI and the test already contain the judge's noise (each d_i
carries it); the guard matters when they are correlated — cached verdicts replayed for
unchanged rows, which make d_i = 0 there and the CI narrower than the judge's real noise.

**Undecided** (exit code 2): the runs evaluated different questions (their
``dataset.questions_digest`` tags differ — the digest of questions, references and corpus
without the recorded answers, so two ``target=recorded`` runs of one question set compare —
or, for runs logged before that tag, their ``dataset.digest`` tags), fewer than ``min_pairs``
paired rows, or the metric is missing (from the candidate for any rule; from the baseline
too for ``max_drop``: bounds never read the baseline). A ``gate=`` of ``rag-exp run`` refuses
an unknown metric or baseline before any work instead (:func:`check_rule_metrics`,
:func:`check_baseline`).

Exit code: 1 when any rule failed, else 2 when any rule is undecided, else 0.
"""

from __future__ import annotations

import difflib
import json
import math
import sys
import xml.etree.ElementTree as ET
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import mlflow
import numpy as np
import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from scipy import stats

from rag_experiments.analysis.compare import compare_tables, holm
from rag_experiments.analysis.defaults import ALPHA, MIN_PAIRS, N_RESAMPLES, SEED
from rag_experiments.analysis.paired import (
    ALL,
    CONFIDENCE,
    MIN_PAIRS_CI,
    PairedStat,
    strict_json,
)
from rag_experiments.analysis.runs import MetricInfo, load_specs
from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.errors import ConfigError, DatasetError, TrackingError
from rag_experiments.metrics.aggregate import bootstrap_ci
from rag_experiments.tracking.names import sanitize_metric_name
from rag_experiments.tracking.resilience import Outage
from rag_experiments.tracking.store import RunStore, find_runs, get_run, open_store, read_table

PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"
EXIT_CODES = {PASS: 0, FAIL: 1, UNDECIDED: 2}
"""Process exit code of each gate result."""

ALIAS_TAG = "rag_exp.alias."
"""Experiment tag prefix of a baseline alias: ``rag_exp.alias.<name> = <run id>``."""

QUESTIONS_DIGEST_TAG = "dataset.questions_digest"
"""Run tag: digest of the questions, references and corpus, without the recorded answers."""

JUDGE_SD = "judge_sd"
"""Suffix of the run metric ``<metric>.judge_sd`` (pooled within-row SD σ of the judge)."""

JUDGE_REPEATS_PARAM = "judge.repeats"
"""Param holding the number of judge repeats per (row, metric)."""


@dataclass(frozen=True)
class Rule:
    """The rules of one metric.

    Attributes:
        metric: Canonical metric name (``nDCG@10``).
        min: Floor on the candidate's mean, or None.
        max: Ceiling on the candidate's mean, or None.
        max_drop: Largest worsening against the baseline (metric units, ≥ 0), or None.
        by_type: Apply the rules per question type too.
    """

    metric: str
    min: float | None = None
    max: float | None = None
    max_drop: float | None = None
    by_type: bool = False


@dataclass(frozen=True)
class GateSettings:
    """What the gate checks and how.

    Attributes:
        rules: One :class:`Rule` per metric.
        alpha: Family-wise error rate of the ``max_drop`` tests (Holm), in (0, 1).
        min_pairs: Fewest paired rows (rows with values) a rule decides on.
        seed: Seed of the bootstrap and permutation test.
        n_resamples: Resamples of each bootstrap and test.
    """

    rules: tuple[Rule, ...]
    alpha: float = ALPHA
    min_pairs: int = MIN_PAIRS
    seed: int = SEED
    n_resamples: int = N_RESAMPLES

    @property
    def needs_baseline(self) -> bool:
        """Whether a rule compares against a baseline (``max_drop``)."""
        return any(r.max_drop is not None for r in self.rules)


class _RuleSpec(BaseModel):
    """One metric's rules as written (strict: a bool is no number, a string no bool)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    min: float | None = None
    max: float | None = None
    max_drop: float | None = Field(default=None, ge=0.0)
    by_type: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> _RuleSpec:
        if self.min is None and self.max is None and self.max_drop is None:
            raise ValueError("sets none of min, max, max_drop; give e.g. {max_drop: 0.02}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(
                f"min {self.min:g} > max {self.max:g}: no mean can pass; swap or fix them"
            )
        return self


class _GateSpec(BaseModel):
    """A gate config as written: the keys of :class:`~rag_experiments.config.schema.GateConf`
    (``baseline``, ``junit``, ``markdown`` are the caller's)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    rules: dict[str, _RuleSpec]
    alpha: float = Field(default=ALPHA, gt=0.0, lt=1.0)
    min_pairs: int = Field(default=MIN_PAIRS, ge=2)
    seed: int = SEED
    n_resamples: int = Field(default=N_RESAMPLES, ge=1)
    baseline: str | None = None
    junit: str | None = None
    markdown: str | None = None


_FIXES = {
    "float_type": "give a number, e.g. 0.05 (not true/false, not quoted)",
    "int_type": "give an integer, e.g. 5 (not true/false, not quoted)",
    "bool_type": "give true or false (not quoted)",
    "finite_number": "give a finite number",
    "greater_than": "raise it",
    "greater_than_equal": "raise it",
    "less_than": "lower it",
    "less_than_equal": "lower it",
    "string_type": "give a string",
}


def _config_error(where: str, exc: ValidationError) -> ConfigError:
    """The first error of ``exc`` as one line: the file, the dotted key, what is wrong, the fix
    (an unknown key gets the closest allowed key, ``difflib``)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(part) for part in err["loc"]]
    key = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _RuleSpec if len(loc) == 3 and loc[0] == "rules" else _GateSpec
        allowed = sorted(model.model_fields)
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return ConfigError(f"{where}: unknown key {key}; {hint}the keys are {', '.join(allowed)}")
    if kind == "value_error":  # our own checks of a rule: the message says the fix
        return ConfigError(f"{where}: {key}: {err['msg'].removeprefix('Value error, ')}")
    if kind in ("dict_type", "model_type"):
        want = "{metric: {max_drop: 0.02}}" if key == "rules" else "{min: 0.8}"
        return ConfigError(f"{where}: {key}={err['input']!r} is not a mapping; give e.g. {want}")
    fix = _FIXES.get(kind, "see docs/how-to/ci-gate.md")
    return ConfigError(f"{where}: {key}={err['input']!r}: {err['msg'].lower()}; {fix}")


def parse_settings(raw: Mapping[str, Any], where: str = "gate config") -> GateSettings:
    """Read ``{alpha, min_pairs, seed, n_resamples, rules: {metric: {min, max, max_drop,
    by_type}}}`` (``baseline``, ``junit``, ``markdown`` are the caller's), validated by
    pydantic in strict mode: a bool is not a number, a string is neither a number nor a bool,
    an unknown key is refused (with the closest known one).

    Raises:
        ConfigError: One line naming ``where`` and the key: no rule, an unknown key, a wrong
            type, a non-finite number, a negative ``max_drop``, ``min`` > ``max``, a rule with
            no limit, an ``alpha`` outside (0, 1), ``min_pairs`` < 2, ``n_resamples`` < 1.
    """
    rules_raw = raw.get("rules")
    if not rules_raw:
        raise ConfigError(
            f"{where}: no rules; give e.g. rules: {{nDCG@10: {{max_drop: 0.02}}, "
            "faithfulness: {min: 0.8}}"
        )
    try:
        spec = _GateSpec.model_validate(dict(raw))
    except ValidationError as exc:
        raise _config_error(where, exc) from None
    rules = tuple(
        Rule(str(metric), r.min, r.max, r.max_drop, r.by_type) for metric, r in spec.rules.items()
    )
    return GateSettings(rules, spec.alpha, spec.min_pairs, spec.seed, spec.n_resamples)


@dataclass(frozen=True)
class RuleResult:
    """The verdict of one rule on one question group.

    Attributes:
        metric: Canonical metric name.
        kind: ``min``, ``max`` or ``max_drop``.
        limit: The rule's number.
        group: ``all`` or a question type.
        status: ``pass``, ``fail`` or ``undecided``.
        message: The plain line's explanation (values, CI, p, why).
        n: Rows the rule decided on (candidate rows for bounds, pairs for ``max_drop``).
        candidate: Candidate mean (NaN when unknown).
        baseline: Baseline mean over the pairs (``max_drop`` only, else NaN).
        diff: candidate − baseline (``max_drop``), NaN otherwise.
        ci_low: Lower 95 % CI bound (of the mean for bounds, of the diff for ``max_drop``).
        ci_high: Upper bound of it.
        p_holm: Holm-adjusted one-sided non-inferiority p of H0 "worsening ≤ limit"
            (``max_drop``, :func:`noninferiority_p`), else NaN.
        judge_noise: The judge noise of the diff when known, else NaN.
    """

    metric: str
    kind: str
    limit: float
    group: str
    status: str
    message: str
    n: int = 0
    candidate: float = math.nan
    baseline: float = math.nan
    diff: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_holm: float = math.nan
    judge_noise: float = math.nan

    @property
    def name(self) -> str:
        """``<metric> <kind> <limit> [<group>]``: the test case's name."""
        return f"{self.metric} {self.kind} {self.limit:g} [{self.group}]"

    def line(self) -> str:
        """The console line: ``FAIL  <name>: <message>``."""
        return f"{self.status.upper():<9} {self.name}: {self.message}"


@dataclass
class GateResult:
    """Every rule's verdict and the overall result.

    Attributes:
        candidate: Candidate run id.
        baseline: Baseline run id ("" without one).
        baseline_ref: What the user named the baseline (an alias or the id).
        results: One :class:`RuleResult` per rule and group.
        alpha: The gate's alpha.
        problem: Why the whole gate could not decide ("" when it could).
    """

    candidate: str
    baseline: str
    baseline_ref: str
    results: list[RuleResult] = field(default_factory=list)
    alpha: float = ALPHA
    problem: str = ""

    @property
    def status(self) -> str:
        """``fail`` when any rule failed, else ``undecided`` when any is, else ``pass``."""
        statuses = {r.status for r in self.results}
        if FAIL in statuses:
            return FAIL
        if UNDECIDED in statuses or self.problem or not self.results:
            return UNDECIDED
        return PASS

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 2 undecided."""
        return EXIT_CODES[self.status]

    def summary(self) -> str:
        """One line: the result and the counts."""
        counts = {s: sum(r.status == s for r in self.results) for s in (PASS, FAIL, UNDECIDED)}
        against = f" against baseline {self.baseline_ref}" if self.baseline_ref else ""
        if self.baseline and self.baseline_ref != self.baseline:
            against += f" ({self.baseline})"
        text = (
            f"gate {self.status.upper()}: run {self.candidate}{against}: {counts[PASS]} passed, "
            f"{counts[FAIL]} failed, {counts[UNDECIDED]} undecided (exit {self.exit_code})"
        )
        return text + (f"; {self.problem}" if self.problem else "")

    def lines(self) -> list[str]:
        """One plain line per rule, then the summary."""
        return [r.line() for r in self.results] + [self.summary()]

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-ready data (NaN → null)."""
        return strict_json({
            "candidate": self.candidate, "baseline": self.baseline,
            "baseline_ref": self.baseline_ref, "status": self.status,
            "exit_code": self.exit_code, "alpha": self.alpha, "problem": self.problem,
            "rules": [{**asdict(r), "name": r.name} for r in self.results],
        })  # fmt: skip

    def junit_xml(self) -> str:
        """JUnit XML: one ``<testcase>`` per rule and group in one ``<testsuite name="rag-exp
        gate">``; a failed rule has a ``<failure>``, an undecided one an ``<error>`` (the gate
        could not decide, which GitLab and Jenkins show as an error), with the line as message.
        """
        failures = sum(r.status == FAIL for r in self.results)
        errors = sum(r.status == UNDECIDED for r in self.results)
        suites = ET.Element("testsuites", name="rag-exp gate")
        suite = ET.SubElement(
            suites,
            "testsuite",
            name="rag-exp gate",
            tests=str(len(self.results)),
            failures=str(failures),
            errors=str(errors),
            skipped="0",
            time="0",
        )
        props = ET.SubElement(suite, "properties")
        for key, value in (("candidate", self.candidate), ("baseline", self.baseline)):
            ET.SubElement(props, "property", name=key, value=value)
        for r in self.results:
            case = ET.SubElement(
                suite, "testcase", classname=f"rag_exp.gate.{r.metric}", name=r.name, time="0"
            )
            if r.status == FAIL:
                ET.SubElement(
                    case, "failure", message=r.message, type="GateRuleFailed"
                ).text = r.line()
            elif r.status == UNDECIDED:
                ET.SubElement(
                    case, "error", message=r.message, type="GateUndecided"
                ).text = r.line()
        ET.indent(suites)
        return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"

    def markdown(self) -> str:
        """A Markdown summary (for ``$GITHUB_STEP_SUMMARY``): the result, then a table."""
        icon = {PASS: "✅", FAIL: "❌", UNDECIDED: "⚠️"}
        out = [
            f"## {icon[self.status]} rag-exp gate: {self.status}",
            "",
            f"Candidate run `{self.candidate}`"
            + (f", baseline `{self.baseline_ref}`" if self.baseline_ref else "")
            + (f" (`{self.baseline}`)" if self.baseline not in ("", self.baseline_ref) else "")
            + f"; α = {self.alpha:g} (Holm), {CONFIDENCE:.0%} paired bootstrap CI.",
            "",
        ]
        if self.problem:
            out += [f"**Could not decide:** {self.problem}", ""]
        out += [
            "| result | metric | rule | group | n | candidate | baseline | diff | 95% CI "
            "| p (Holm) | note |",
            "|---|---|---|---|---:|---:|---:|---:|---|---:|---|",
        ]  # fmt: skip
        for r in self.results:
            ci = "" if math.isnan(r.ci_low) else f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]"
            out.append(
                f"| {icon[r.status]} {r.status} | `{r.metric}` | {r.kind} {r.limit:g} | "
                f"{r.group} | {r.n} | {_num(r.candidate)} | {_num(r.baseline)} | "
                f"{_num(r.diff, signed=True)} | {ci} | {_num(r.p_holm)} | "
                f"{r.message.replace('|', '/')} |"
            )
        return "\n".join(out) + "\n"


def judge_noise(
    n: int, sd_b: float, repeats_b: int, sd_c: float, repeats_c: int, alpha: float = ALPHA
) -> float:
    """The judge's noise on a difference of two means (formula in the module docstring).

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


def _judge_sd(run: Run, metric: str) -> tuple[float, int] | None:
    """``(judge_sd, repeats)`` a run logged for ``metric``, or None."""
    sd = run.data.metrics.get(sanitize_metric_name(f"{metric}.{JUDGE_SD}"))
    repeats = run.data.params.get(JUDGE_REPEATS_PARAM)
    if sd is None or repeats is None:
        return None
    try:
        r = int(float(repeats))
    except ValueError:
        return None
    return (float(sd), r) if r >= 1 and math.isfinite(sd) else None


def evaluate_tables(
    candidate: pd.DataFrame,
    baseline: pd.DataFrame | None,
    specs: Sequence[MetricInfo],
    settings: GateSettings,
    *,
    noise: Mapping[str, tuple[tuple[float, int], tuple[float, int]]] | None = None,
    baseline_metrics: Collection[str] | None = None,
) -> list[RuleResult]:
    """Apply the rules to two per-query tables (the module docstring gives every rule).

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
            for kind, limit in _limits(rule):
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
    noise: tuple[tuple[float, int], tuple[float, int]] | None,
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
        noise_value = judge_noise(n, sd_b, r_b, sd_c, r_c, settings.alpha)
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


def questions_digest(run: Run) -> str | None:
    """The digest that says which questions a run evaluated: ``dataset.questions_digest``
    when logged, else ``dataset.digest``."""
    tags = run.data.tags
    return tags.get(QUESTIONS_DIGEST_TAG) or tags.get("dataset.digest")


SWEEP_PARENT_TAG = "sweep.dir"
"""Tag of a sweep's parent run (:mod:`rag_experiments.tracking.sweep`): it has no per-query
results of its own."""


def no_results(run: Run, *, finished: bool = False) -> str:
    """Why ``run`` has no per-query results to gate, or "" when it may have them: a sweep
    parent (tag :data:`SWEEP_PARENT_TAG`), a FAILED or KILLED run (any run not FINISHED with
    ``finished``: a gate of logged runs; the end-of-run gate reads its own RUNNING run)."""
    run_id, status = run.info.run_id, run.info.status
    if SWEEP_PARENT_TAG in run.data.tags:
        return (
            f"run {run_id} is a sweep parent and has no per-query results; gate one of its "
            "child runs (rag-exp report <parent> lists them)"
        )
    if status in ("FAILED", "KILLED") or (finished and status != "FINISHED"):
        return (
            f"run {run_id} is {status}, not FINISHED, and has no complete per-query results; "
            "gate a finished run (rag-exp run … resume=<id> finishes a stopped one)"
        )
    return ""


def check_gate_runs(
    client: mlflow.MlflowClient, candidate_id: str, baseline_ref: str | None
) -> None:
    """Refuse, before the gate, runs it cannot read: an unknown candidate or baseline (alias or
    run id), or one that is a sweep parent or not FINISHED (:func:`no_results`). ``rag-exp
    gate`` calls it so that a wrong input is one error line (exit 2), not a line per rule.

    Raises:
        TrackingError: The candidate is not a run of the store.
        ConfigError: An unknown baseline, or a run with no per-query results to gate.
    """
    cand = get_run(client, candidate_id)
    runs = [cand]
    if baseline_ref:
        runs.append(get_run(client, resolve_baseline(client, cand, baseline_ref)))
    for run in runs:
        why = no_results(run, finished=True)
        if why:
            raise ConfigError(why)


LAST = "last"
"""Run reference meaning the newest finished run of an experiment (for CI scripts, which do not
know the id of the run they just made)."""

RESERVED_ALIASES = frozenset({LAST})
"""Names ``rag-exp promote --alias`` refuses: they mean something else where a run is named."""


def resolve_run(client: mlflow.MlflowClient, ref: str, experiment: str) -> str:
    """The run id ``ref`` names: :data:`LAST` = the newest FINISHED run of ``experiment`` (by
    start time; a ``rag-exp compare`` run is not an evaluation run and is skipped), anything
    else is taken as a run id.

    Raises:
        TrackingError: ``last`` in an experiment without a finished evaluation run.
    """
    if ref != LAST:
        return ref
    exp = client.get_experiment_by_name(experiment)
    runs = (
        find_runs(
            client,
            [exp.experiment_id],
            "attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
        )
        if exp is not None
        else []
    )
    runs = [r for r in runs if "compare.run_a" not in r.data.tags]
    if not runs:
        raise TrackingError(
            f"`last`: experiment {experiment!r} at {client.tracking_uri} has no finished run; "
            "check --experiment and --tracking-uri"
        )
    return runs[0].info.run_id


def resolve_baseline(client: mlflow.MlflowClient, candidate: Run, ref: str) -> str:
    """The run id ``ref`` names: an alias of the candidate's experiment (experiment tag
    ``rag_exp.alias.<ref>``, set by ``rag-exp promote``), else ``ref`` itself as a run id.

    Raises:
        ConfigError: ``ref`` is neither an alias of the experiment nor a run of the store.
    """
    experiment = client.get_experiment(candidate.info.experiment_id)
    target = experiment.tags.get(ALIAS_TAG + ref)
    if target:
        return target
    try:
        client.get_run(ref)
    except MlflowException:
        aliases = sorted(
            k.removeprefix(ALIAS_TAG) for k in experiment.tags if k.startswith(ALIAS_TAG)
        )
        raise ConfigError(
            f"baseline {ref!r} is neither an alias of experiment {experiment.name!r} "
            f"(aliases: {', '.join(aliases) or 'none'}) nor a run at {client.tracking_uri}; "
            f"set it with `rag-exp promote <run id> --alias {ref}` or pass a run id"
        ) from None
    return ref


class _Declared(Protocol):
    """A declared metric column: :class:`~rag_experiments.records.MetricSpec` before a run,
    :class:`~rag_experiments.analysis.runs.MetricInfo` read back from one."""

    name: str
    low: float
    high: float


def check_rule_metrics(settings: GateSettings, specs: Sequence[_Declared]) -> None:
    """Refuse rules naming a metric the run does not compute, or a bound no mean of the metric
    can meet (checked before any work, and by ``rag-exp gate`` before it reads the tables).

    Args:
        settings: The rules.
        specs: The run's metric columns: every metric's ``specs()`` (a per-type rule names the
            plain column; ``by_type`` handles the types), each with its declared range.

    Raises:
        ConfigError: A rule's metric is not among ``specs`` (the message suggests the closest
            name, ``difflib.get_close_matches``); or its ``min`` lies above the metric's
            highest value or its ``max`` below its lowest (the rule could never pass).
    """
    declared = {s.name: s for s in specs}
    known = sorted(declared)
    folded = {name.casefold(): name for name in known}
    for rule in settings.rules:
        spec = declared.get(rule.metric)
        if spec is None:
            close = difflib.get_close_matches(rule.metric.casefold(), list(folded), n=1)
            hint = f"did you mean {folded[close[0]]!r}? " if close else ""
            shown = ", ".join(known[:20]) + (
                f", … ({len(known)} in all)" if len(known) > 20 else ""
            )
            raise ConfigError(
                f"gate: rules.{rule.metric} names a metric this run does not compute; {hint}"
                f"the run computes {shown or 'none'}"
            )
    check_bounds(settings, specs)


def check_bounds(settings: GateSettings, specs: Sequence[_Declared]) -> None:
    """Refuse a ``min`` above its metric's highest value or a ``max`` below its lowest: no
    mean could pass (a rule whose metric is not in ``specs`` is left to the caller).

    Raises:
        ConfigError: The first such bound, with the metric's declared range.
    """
    declared = {s.name: s for s in specs}
    for rule in settings.rules:
        spec = declared.get(rule.metric)
        if spec is None:
            continue
        if rule.min is not None and rule.min > spec.high:
            kind, bound = "min", rule.min
        elif rule.max is not None and rule.max < spec.low:
            kind, bound = "max", rule.max
        else:
            continue
        raise ConfigError(
            f"gate: rules.{rule.metric}.{kind}={bound:g} is outside the metric's range "
            f"[{spec.low:g}, {spec.high:g}]: no mean can pass; give a {kind} within it"
        )


def check_baseline(tracking_uri: str, experiment: str, ref: str) -> None:
    """Refuse a baseline that is neither an alias of ``experiment`` (``rag-exp promote``) nor a
    run of the store (checked before any work, as :func:`resolve_baseline` reads it after).

    Raises:
        ConfigError: ``ref`` is no alias of ``experiment`` and no run id at ``tracking_uri``.
        TrackingError: The store cannot be read.
    """
    client = open_store(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    tags = exp.tags if exp is not None else {}
    if tags.get(ALIAS_TAG + ref):
        return
    try:
        client.get_run(ref)
    except MlflowException:
        aliases = sorted(k.removeprefix(ALIAS_TAG) for k in tags if k.startswith(ALIAS_TAG))
        raise ConfigError(
            f"gate.baseline={ref!r} is neither an alias of experiment {experiment!r} "
            f"(aliases: {', '.join(aliases) or 'none'}) nor a run at {client.tracking_uri}; "
            f"set it with `rag-exp promote <run id> --alias {ref}` or pass a run id"
        ) from None


def set_alias(tracking_uri: str, run_id: str, alias: str, retry_s: float = 120.0) -> str:
    """Point alias ``alias`` of the run's experiment at ``run_id`` (experiment tag
    ``rag_exp.alias.<alias>``; MLflow 3 has aliases for registered models only, so the
    experiment tag is the place for a run's). Returns the experiment's name.

    Raises:
        ConfigError: An alias that is empty, holds characters a tag key refuses, or is
            reserved (:data:`RESERVED_ALIASES`).
        TrackingError: The run is missing or the store refuses the tag.
    """
    if not alias or not all(c.isalnum() or c in "_-." for c in alias):
        raise ConfigError(f"alias {alias!r}: use letters, digits, '_', '-', '.' (e.g. production)")
    if alias.casefold() in RESERVED_ALIASES:
        raise ConfigError(
            f"alias {alias!r} is reserved: `{LAST}` means the newest finished run of the "
            "experiment; pick another name (e.g. production)"
        )
    client = open_store(tracking_uri)
    run = get_run(client, run_id)
    outage = Outage(resolve_tracking_uri(tracking_uri), retry_s)
    try:
        outage.call(
            "alias", client.set_experiment_tag, run.info.experiment_id, ALIAS_TAG + alias, run_id
        )
    except MlflowException as exc:
        raise TrackingError(f"cannot set alias {alias!r}: {exc.message}") from exc
    return client.get_experiment(run.info.experiment_id).name


def gate_runs(
    tracking_uri: str,
    candidate_id: str,
    baseline_ref: str | None,
    settings: GateSettings,
) -> GateResult:
    """Read both runs from the store and apply the rules (:func:`evaluate_tables`).

    Args:
        tracking_uri: Store holding both runs.
        candidate_id: The candidate run id.
        baseline_ref: A run id or an alias of the candidate's experiment; None for a gate of
            absolute bounds only.
        settings: The rules.

    Returns:
        The result; an unknown baseline (alias or run), ``max_drop`` rules without a
        baseline, a sweep parent or FAILED/KILLED run (:func:`no_results`), different
        questions or too few rows make it undecided (exit 2, the reason in ``problem`` or the
        rule's line), never an error (``rag-exp gate`` refuses the wrong inputs before, as
        one error line: :func:`check_gate_runs`).

    Raises:
        TrackingError: The candidate run or a run's table cannot be read.
        ConfigError: A rule's ``min``/``max`` lies outside its metric's range
            (:func:`check_bounds`).
    """
    client = open_store(tracking_uri)
    cand = get_run(client, candidate_id)
    result = GateResult(candidate_id, "", baseline_ref or "", alpha=settings.alpha)
    base = None
    try:
        if baseline_ref is None and settings.needs_baseline:
            raise ConfigError(
                "the rules have max_drop but no baseline was given: pass --baseline <run id | "
                "alias> (gate.baseline=… in a run)"
            )
        if baseline_ref:
            result.baseline = resolve_baseline(client, cand, baseline_ref)
            base = get_run(client, result.baseline)
    except (ConfigError, TrackingError) as exc:
        result.problem = str(exc)
    unusable = [why for why in (no_results(cand), base and no_results(base)) if why]
    if not result.problem and unusable:
        result.problem = unusable[0]
    elif base is not None and questions_digest(cand) != questions_digest(base):
        result.problem = (
            f"the runs evaluated different questions (dataset digest of candidate "
            f"{candidate_id}: {questions_digest(cand)} vs baseline {result.baseline}: "
            f"{questions_digest(base)}); gate runs of one dataset"
        )
    if result.problem:
        result.results = _all_undecided(settings, result.problem)
        return result
    base_id = result.baseline
    store = RunStore(str(client.tracking_uri))  # load_specs reads through the RunStore
    cand_specs = load_specs(store, candidate_id)
    check_bounds(settings, cand_specs)
    cand_table = read_table(client, candidate_id)
    base_table, noise, base_names = None, {}, None
    if base is not None:
        base_names = {s.name for s in load_specs(store, base_id)}
        base_table = read_table(client, base_id)
        for rule in settings.rules:
            pair = (_judge_sd(base, rule.metric), _judge_sd(cand, rule.metric))
            if pair[0] is not None and pair[1] is not None:
                noise[rule.metric] = pair
    try:
        result.results = evaluate_tables(
            cand_table, base_table, cand_specs, settings, noise=noise, baseline_metrics=base_names
        )
    except DatasetError as exc:  # no sample id in common
        result.problem = str(exc)
        result.results = _all_undecided(settings, result.problem)
    return result


def _all_undecided(settings: GateSettings, problem: str) -> list[RuleResult]:
    """Every rule's every limit undecided for one reason (the runs cannot be compared)."""
    return [
        RuleResult(r.metric, kind, limit, ALL, UNDECIDED, problem)
        for r in settings.rules
        for kind, limit in _limits(r)
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


def _limits(rule: Rule) -> list[tuple[str, float]]:
    """The rule's ``(kind, limit)`` pairs that are set, in the order min, max, max_drop."""
    pairs = (("min", rule.min), ("max", rule.max), ("max_drop", rule.max_drop))
    return [(kind, limit) for kind, limit in pairs if limit is not None]


def log_gate(tracking_uri: str, result: GateResult, retry_s: float = 120.0) -> None:
    """Log the result on the candidate run: tags ``gate.result`` (pass|fail|undecided),
    ``gate.baseline`` (run id), ``gate.baseline_ref`` (as named), ``gate.failed`` (the failed
    rules' names) and the artifacts ``gate/junit.xml``, ``gate/summary.md``,
    ``gate/gate.json``; calls retried through a tracking-server outage
    (:class:`~rag_experiments.tracking.resilience.Outage`).

    Raises:
        TrackingError: The store refuses the tags or artifacts.
    """
    client = open_store(tracking_uri)
    outage = Outage(resolve_tracking_uri(tracking_uri), retry_s)
    run_id = result.candidate
    tags = {
        "gate.result": result.status,
        "gate.baseline": result.baseline,
        "gate.baseline_ref": result.baseline_ref,
        "gate.failed": "; ".join(r.name for r in result.results if r.status == FAIL)[:5000],
    }
    try:
        for key, value in tags.items():
            outage.call(f"tag {key}", client.set_tag, run_id, key, value)
        outage.call("gate/junit.xml", client.log_text, run_id, result.junit_xml(), "gate/junit.xml")
        outage.call(
            "gate/summary.md", client.log_text, run_id, result.markdown(), "gate/summary.md"
        )
        outage.call(
            "gate/gate.json",
            client.log_text,
            run_id,
            json.dumps(result.to_json(), indent=2, ensure_ascii=False),
            "gate/gate.json",
        )
    except MlflowException as exc:
        raise TrackingError(f"cannot log the gate result on run {run_id}: {exc.message}") from exc


def run_gate(
    tracking_uri: str,
    candidate: str,
    baseline: str | None,
    settings: GateSettings,
    *,
    junit: str | None = None,
    markdown: str | None = None,
    log: bool = True,
    retry_s: float = 120.0,
) -> GateResult:
    """Gate ``candidate`` against ``baseline``: print one line per rule and the summary, write
    the JUnit XML and Markdown files asked for, log the result on the candidate run. A baseline
    that resolves to the candidate itself gets a warning line on stderr (decided as usual).

    Returns:
        The result (``.exit_code`` is the process exit code).

    Raises:
        TrackingError: The candidate cannot be read or the result cannot be logged.
        ConfigError: Unknown baseline alias, ``max_drop`` rules without a baseline.
    """
    result = gate_runs(tracking_uri, candidate, baseline, settings)
    if result.baseline == result.candidate:  # e.g. `gate last` right after `promote last`
        print(
            f"warning: the candidate is the baseline ({result.baseline_ref} is run "
            f"{result.candidate}): every max_drop rule compares the run with itself",
            file=sys.stderr,
            flush=True,
        )
    print("\n".join(result.lines()), flush=True)
    # the Markdown is appended: $GITHUB_STEP_SUMMARY is shared by a job's steps
    for path, text, mode in ((junit, result.junit_xml(), "w"), (markdown, result.markdown(), "a")):
        if path:
            out = Path(path)
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open(mode, encoding="utf-8") as f:
                f.write(text)
    if log:
        log_gate(tracking_uri, result, retry_s)
    return result


def _num(x: float, signed: bool = False) -> str:
    if math.isnan(x):
        return ""
    return f"{x:+.4f}" if signed else f"{x:.4f}"
