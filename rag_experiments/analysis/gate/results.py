"""The gate's verdicts as data: :class:`RuleResult` (one rule on one question group) and
:class:`GateResult` (every rule, the overall status and exit code, the JSON of
``gate/gate.json``); their text forms are :mod:`~rag_experiments.analysis.gate.rendering`'s."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_experiments.analysis.defaults import ALPHA
from rag_experiments.analysis.gate import rendering
from rag_experiments.analysis.gate.rules import EXIT_CODES, FAIL, PASS, UNDECIDED
from rag_experiments.analysis.paired import strict_json


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
        """The console line: ``FAIL  <name>: <message>`` (:func:`~.rendering.rule_line`)."""
        return rendering.rule_line(self)


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
        """One line: the result and the counts (:func:`~.rendering.summary_line`)."""
        return rendering.summary_line(self)

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
        """JUnit XML of the result (:func:`~.rendering.junit_xml`)."""
        return rendering.junit_xml(self)

    def markdown(self) -> str:
        """A Markdown summary of the result (:func:`~.rendering.markdown`)."""
        return rendering.markdown(self)
