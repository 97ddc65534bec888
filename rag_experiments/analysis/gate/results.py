"""The gate's verdicts as data: :class:`RuleResult` (one rule on one question group) and
:class:`GateResult` (every rule, the overall status and exit code, the JSON of
``gate/gate.json``); and their text forms: console lines, JUnit XML, Markdown."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_experiments.analysis.gate.rules import EXIT_CODES, FAIL, PASS, UNDECIDED
from rag_experiments.analysis.paired import CONFIDENCE, strict_json
from rag_experiments.config.stats_defaults import ALPHA


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
            (``max_drop``, :func:`~.statistics.noninferiority_p`), else NaN.
        judge_noise: The judge noise of the diff when known
            (:func:`~.statistics.judge_noise_of_diff`), else NaN.
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
        """The console line: ``FAIL  <name>: <message>`` (:func:`rule_line`)."""
        return rule_line(self)


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
        """One line: the result and the counts (:func:`summary_line`)."""
        return summary_line(self)

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
        """JUnit XML of the result (:func:`junit_xml`)."""
        return junit_xml(self)

    def markdown(self) -> str:
        """A Markdown summary of the result (:func:`markdown`)."""
        return markdown(self)


# --- text forms -----------------------------------------------------------------------------
def rule_line(r: RuleResult) -> str:
    """The console line of one rule: ``FAIL  <name>: <message>``."""
    return f"{r.status.upper():<9} {r.name}: {r.message}"


def summary_line(result: GateResult) -> str:
    """One line: the result and the counts."""
    counts = {s: sum(r.status == s for r in result.results) for s in (PASS, FAIL, UNDECIDED)}
    against = f" against baseline {result.baseline_ref}" if result.baseline_ref else ""
    if result.baseline and result.baseline_ref != result.baseline:
        against += f" ({result.baseline})"
    text = (
        f"gate {result.status.upper()}: run {result.candidate}{against}: {counts[PASS]} passed, "
        f"{counts[FAIL]} failed, {counts[UNDECIDED]} undecided (exit {result.exit_code})"
    )
    return text + (f"; {result.problem}" if result.problem else "")


def junit_xml(result: GateResult) -> str:
    """JUnit XML: one ``<testcase>`` per rule and group in one ``<testsuite name="rag-exp
    gate">``; a failed rule has a ``<failure>``, an undecided one an ``<error>`` (the gate
    could not decide, which GitLab and Jenkins show as an error), with the line as message.
    """
    failures = sum(r.status == FAIL for r in result.results)
    errors = sum(r.status == UNDECIDED for r in result.results)
    suites = ET.Element("testsuites", name="rag-exp gate")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="rag-exp gate",
        tests=str(len(result.results)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time="0",
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (("candidate", result.candidate), ("baseline", result.baseline)):
        ET.SubElement(props, "property", name=key, value=value)
    for r in result.results:
        case = ET.SubElement(
            suite, "testcase", classname=f"rag_exp.gate.{r.metric}", name=r.name, time="0"
        )
        if r.status == FAIL:
            ET.SubElement(case, "failure", message=r.message, type="GateRuleFailed").text = r.line()
        elif r.status == UNDECIDED:
            ET.SubElement(case, "error", message=r.message, type="GateUndecided").text = r.line()
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def markdown(result: GateResult) -> str:
    """A Markdown summary (for ``$GITHUB_STEP_SUMMARY``): the result, then a table."""
    icon = {PASS: "✅", FAIL: "❌", UNDECIDED: "⚠️"}
    out = [
        f"## {icon[result.status]} rag-exp gate: {result.status}",
        "",
        f"Candidate run `{result.candidate}`"
        + (f", baseline `{result.baseline_ref}`" if result.baseline_ref else "")
        + (f" (`{result.baseline}`)" if result.baseline not in ("", result.baseline_ref) else "")
        + f"; α = {result.alpha:g} (Holm), {CONFIDENCE:.0%} paired bootstrap CI.",
        "",
    ]
    if result.problem:
        out += [f"**Could not decide:** {result.problem}", ""]
    out += [
        "| result | metric | rule | group | n | candidate | baseline | diff | 95% CI "
        "| p (Holm) | note |",
        "|---|---|---|---|---:|---:|---:|---:|---|---:|---|",
    ]  # fmt: skip
    for r in result.results:
        ci = "" if math.isnan(r.ci_low) else f"[{r.ci_low:+.4f}, {r.ci_high:+.4f}]"
        out.append(
            f"| {icon[r.status]} {r.status} | `{r.metric}` | {r.kind} {r.limit:g} | "
            f"{r.group} | {r.n} | {_num(r.candidate)} | {_num(r.baseline)} | "
            f"{_num(r.diff, signed=True)} | {ci} | {_num(r.p_holm)} | "
            f"{r.message.replace('|', '/')} |"
        )
    return "\n".join(out) + "\n"


def _num(x: float, signed: bool = False) -> str:
    if math.isnan(x):
        return ""
    return f"{x:+.4f}" if signed else f"{x:.4f}"
