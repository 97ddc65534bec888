"""The gate's verdicts as text: the console lines (one per rule, then the summary), the JUnit
XML (one test case per rule and group, for CI test reports) and the Markdown summary (for
``$GITHUB_STEP_SUMMARY``)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from rag_experiments.analysis.gate.rules import FAIL, PASS, UNDECIDED
from rag_experiments.analysis.paired import CONFIDENCE

if TYPE_CHECKING:
    from rag_experiments.analysis.gate.results import GateResult, RuleResult


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
