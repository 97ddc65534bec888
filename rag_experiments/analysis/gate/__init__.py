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

The package, one concern a module: :mod:`~.rules` (the rules and their parsing),
:mod:`~.statistics` (each rule's verdict from two per-query tables), :mod:`~.results` and
:mod:`~.rendering` (the verdicts as data and as console text, JUnit XML, Markdown),
:mod:`~.store_io` (every MLflow call of the gate) and :mod:`~.engine` (the gate of two logged
runs as one step). The names below are the ones other modules import.
"""

from __future__ import annotations

from rag_experiments.analysis.gate.engine import (
    JUDGE_REPEATS_PARAM,
    JUDGE_SD,
    QUESTIONS_DIGEST_TAG,
    SWEEP_PARENT_TAG,
    check_gate_runs,
    gate_runs,
    judge_sd,
    log_gate,
    no_results,
    questions_digest,
    run_gate,
)
from rag_experiments.analysis.gate.results import GateResult, RuleResult
from rag_experiments.analysis.gate.rules import (
    EXIT_CODES,
    FAIL,
    LAST,
    PASS,
    RESERVED_ALIASES,
    UNDECIDED,
    GateSettings,
    Rule,
    check_alias_name,
    check_bounds,
    check_rule_metrics,
    parse_settings,
)
from rag_experiments.analysis.gate.statistics import (
    SHOWN_METRICS,
    evaluate_tables,
    judge_noise_of_diff,
    noninferiority_p,
)
from rag_experiments.analysis.gate.store_io import (
    ALIAS_TAG,
    check_baseline,
    resolve_baseline,
    resolve_run,
    set_alias,
)

__all__ = [
    "ALIAS_TAG",
    "EXIT_CODES",
    "FAIL",
    "JUDGE_REPEATS_PARAM",
    "JUDGE_SD",
    "LAST",
    "PASS",
    "QUESTIONS_DIGEST_TAG",
    "RESERVED_ALIASES",
    "SHOWN_METRICS",
    "SWEEP_PARENT_TAG",
    "UNDECIDED",
    "GateResult",
    "GateSettings",
    "Rule",
    "RuleResult",
    "check_alias_name",
    "check_baseline",
    "check_bounds",
    "check_gate_runs",
    "check_rule_metrics",
    "evaluate_tables",
    "gate_runs",
    "judge_noise_of_diff",
    "judge_sd",
    "log_gate",
    "no_results",
    "noninferiority_p",
    "parse_settings",
    "questions_digest",
    "resolve_baseline",
    "resolve_run",
    "run_gate",
    "set_alias",
]
