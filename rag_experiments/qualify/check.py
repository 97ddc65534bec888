"""Run a judge through our own metric prompts on labeled pairs and measure its agreement.

Probes (each builds the metric object with the judge and calls its public
``evaluate(samples, responses)`` and ``audit()``):

- ``faithfulness`` — :class:`~rag_experiments.metrics.faithfulness.Faithfulness` on every
  labeled pair. **Verdict**: faithful when the score (supported claims / claims) is
  ``≥ threshold``, default **1.0**: a pair is labeled hallucinated when *any* statement of the
  answer is unsupported, so the verdict that matches the label's definition is "every claim
  supported"; a lower threshold (0.5) forgives a judge that splits a faithful answer into a
  claim it cannot place, and lets through answers with one bad claim in two.
- any other declared metric with a ``probe`` (:class:`~rag_experiments.metrics.definitions.
  JudgeProbe`), named as the metric: scored like faithfulness on every pair, verdict = score ≥
  the probe's threshold (default ``threshold``), compared with the faithful label. A metric
  that requires a verifier (``verifier_faithfulness``) is built with the check's ``verifier``:
  the same pairs, verdicts and statistics qualify a verifier model as they do a judge.
- ``answer_relevancy`` — :class:`~rag_experiments.metrics.answer_relevancy.AnswerRelevancy`
  on the faithful pairs: each question with its own answer (relevant) and with the answer of
  the next faithful pair in the subset (swapped: irrelevant). Relevant when the score is
  ``≥ relevancy_threshold`` (default 0.5; the score is a clipped cosine of the configured
  embedder, so the threshold depends on it). The prompt shows only the answer, so the two
  pairs of an answer ask the judge the same thing (a response-cache hit when the cache is on)
  and differ in the cosine with their question.
- ``context_relevance`` — :class:`~rag_experiments.metrics.context_precision.ContextPrecision`
  with the faithful answer as reference and one context: the pair's supporting passages
  (relevant) or the next pair's (swapped). With one context the score is the judge's yes/no
  verdict (1 or 0); relevant when ``≥ 0.5``.
- ``position_bias`` — faithfulness again on the pairs with at least two contexts, the
  contexts in reverse order; reported: the share of pairs whose verdict changes (both
  verdicts valid), with a bootstrap interval
  (:func:`~rag_experiments.metrics.aggregate.bootstrap_ci`).

A pair whose score is NaN (judge failure, no claims, a refusal…) has no verdict: it is
counted in ``n_failed`` with its reason and left out of the agreement statistics
(:mod:`~rag_experiments.qualify.stats`), whose ``n`` is the pairs that got a verdict.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.aggregate import bootstrap_ci
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.definitions import LiveMapping, LiveSequence, declared_metrics
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.prompts import answer_relevancy as answer_relevancy_prompt
from rag_experiments.metrics.prompts import context_precision as context_precision_prompt
from rag_experiments.metrics.prompts import faithfulness as faithfulness_prompt
from rag_experiments.qualify.pairs import LabeledPair
from rag_experiments.qualify.stats import BinaryAgreement, binary_agreement
from rag_experiments.records import MetricValue, RagResponse, Sample

SPECIAL_PROBES = ("answer_relevancy", "context_relevance", "position_bias")
"""The probes that build their own pairs (swapped answers or contexts, reversed contexts);
they run after the labeled-pair probes."""


def labeled_probes() -> dict[str, type[Any]]:
    """Probe name → metric class of every declared metric with a ``probe``
    (:class:`~rag_experiments.metrics.definitions.JudgeProbe`; built in: ``faithfulness``), in
    declaration order: each scores every labeled pair's answer against its contexts."""
    return {c.name: c for c in declared_metrics() if c.declaration.probe is not None}


PROBES: Sequence[str] = LiveSequence(lambda: (*labeled_probes(), *SPECIAL_PROBES))
"""Every probe, in the order they run: the declared labeled-pair probes, then
:data:`SPECIAL_PROBES`."""

PROMPT_IDS: Mapping[str, str] = LiveMapping(
    lambda: {
        **{name: c.declaration.probe.prompt for name, c in labeled_probes().items()},
        "answer_relevancy": answer_relevancy_prompt.PROMPT.id,
        "context_relevance": context_precision_prompt.PRECISION_PROMPT.id,
        "position_bias": faithfulness_prompt.PROMPT.id,
    }
)
"""The prompt (id with version) each probe asks; part of a qualification's identity."""

CONTEXT_THRESHOLD = 0.5
"""One context: the context-precision score is the verdict itself (1 or 0)."""


@dataclass
class AgreementResult:
    """Outcome of one labeled probe.

    Attributes:
        probe: Probe name (:data:`PROBES`).
        labels: Names of the positive and negative label (``faithful``, ``hallucinated``).
        agreement: Statistics over the pairs that got a verdict.
        n_failed: Pairs without a verdict (NaN score).
        failures: Their NaN reasons and counts.
        threshold: Score at or above which the verdict is positive.
        judge_calls: Judge calls made (retries included; from the metric's audit).
        wall_s: Wall time of the metric's ``evaluate`` in seconds.
        verdicts: Per pair id, the verdict (None = failed).
    """

    probe: str
    labels: tuple[str, str]
    agreement: BinaryAgreement
    n_failed: int
    failures: dict[str, int]
    threshold: float
    judge_calls: int
    wall_s: float
    verdicts: dict[str, bool | None] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary; ``ci_low``/``ci_high`` are kappa's interval."""
        a = self.agreement
        pos, neg = self.labels
        (tp, fn), (fp, tn) = a.confusion
        return {
            "n": a.n,
            "n_failed": self.n_failed,
            "failures": self.failures,
            "accuracy": a.accuracy,
            "accuracy_ci_low": a.accuracy_ci[0],
            "accuracy_ci_high": a.accuracy_ci[1],
            "balanced_accuracy": a.balanced_accuracy,
            "balanced_accuracy_ci_low": a.balanced_accuracy_ci[0],
            "balanced_accuracy_ci_high": a.balanced_accuracy_ci[1],
            "kappa": a.kappa,
            "ci_low": a.kappa_ci[0],
            "ci_high": a.kappa_ci[1],
            "confusion": {f"label_{pos}": {pos: tp, neg: fn}, f"label_{neg}": {pos: fp, neg: tn}},
            "threshold": self.threshold,
            "judge_calls": self.judge_calls,
            "wall_s": round(self.wall_s, 3),
            "prompt": PROMPT_IDS[self.probe],
        }

    def format(self) -> str:
        """One console line; the failed pairs' reasons follow their count (``failed 4
        (parse_error 4)``), so a row of NaN statistics says why."""
        a = self.agreement
        why = ", ".join(f"{r} {c}" for r, c in sorted(self.failures.items(), key=lambda x: -x[1]))
        return (
            f"  {self.probe:<18} n={a.n:<4} acc {a.accuracy:.3f}  bal.acc "
            f"{a.balanced_accuracy:.3f} [{a.balanced_accuracy_ci[0]:.3f}, "
            f"{a.balanced_accuracy_ci[1]:.3f}]  kappa {a.kappa:.3f} [{a.kappa_ci[0]:.3f}, "
            f"{a.kappa_ci[1]:.3f}]  failed {self.n_failed}{f' ({why})' if why else ''}  "
            f"calls {self.judge_calls}  {self.wall_s:.1f} s"
        )


@dataclass
class PositionBiasResult:
    """Outcome of the position probe.

    Attributes:
        n: Pairs whose verdict is valid in both orders.
        changed: Of those, pairs whose verdict changed.
        ci: Bootstrap interval of ``changed / n``.
        n_failed: Pairs without a verdict in the reversed order.
        judge_calls: Judge calls of the reversed pass.
        wall_s: Its wall time in seconds.
    """

    n: int
    changed: int
    ci: tuple[float, float]
    n_failed: int
    judge_calls: int
    wall_s: float

    @property
    def share_changed(self) -> float:
        """``changed / n`` in [0, 1]; NaN when ``n = 0``."""
        return self.changed / self.n if self.n else math.nan

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "n": self.n,
            "changed": self.changed,
            "share_changed": self.share_changed,
            "ci_low": self.ci[0],
            "ci_high": self.ci[1],
            "n_failed": self.n_failed,
            "judge_calls": self.judge_calls,
            "wall_s": round(self.wall_s, 3),
            "prompt": PROMPT_IDS["position_bias"],
        }

    def format(self) -> str:
        """One console line."""
        return (
            f"  {'position_bias':<18} n={self.n:<4} verdicts changed by reversing the "
            f"contexts: {self.share_changed:.3f} [{self.ci[0]:.3f}, {self.ci[1]:.3f}]  "
            f"failed {self.n_failed}  calls {self.judge_calls}  {self.wall_s:.1f} s"
        )


def _evaluate(
    metric: Any, column: str, samples: list[Sample], responses: list[RagResponse]
) -> tuple[list[MetricValue], int, float]:
    """Scores of ``column``, judge calls (from the audit) and wall time of one evaluation."""
    started = time.perf_counter()
    rows = metric.evaluate(samples, responses)
    wall = time.perf_counter() - started
    calls = sum(int(record.get("judge_calls", 0)) for record in metric.audit())
    return [row[column] for row in rows], calls, wall


def _swapped(items: Sequence[LabeledPair]) -> list[LabeledPair]:
    """Each item's partner: the next item (cyclically)."""
    return [items[(i + 1) % len(items)] for i in range(len(items))]


class JudgeCheck:
    """Measure a judge's agreement with labeled pairs (probes in the module docstring).

    Args:
        judge: The judge chat model (None: only probes that need no judge can run).
        embedder: The embedder of ``answer_relevancy`` (needed for that probe only).
        threshold: Faithfulness score at or above which an answer is judged faithful.
        relevancy_threshold: Answer-relevancy score at or above which it is judged relevant.
        seed: Bootstrap seed.
        verifier: The verifier of probes whose metric requires one
            (:class:`~rag_experiments.protocols.Verifier`), else None.

    Raises:
        ConfigError: A threshold outside [0, 1].
    """

    def __init__(
        self,
        judge: ChatModel | None,
        embedder: Any = None,
        threshold: float = 1.0,
        relevancy_threshold: float = 0.5,
        seed: int = 0,
        verifier: Any = None,
    ) -> None:
        for key, value in (("threshold", threshold), ("relevancy_threshold", relevancy_threshold)):
            if not 0.0 <= float(value) <= 1.0:
                raise ConfigError(f"judge_check.{key} must be in [0, 1], got {value}")
        self.judge = judge
        self.embedder = embedder
        self.threshold = float(threshold)
        self.relevancy_threshold = float(relevancy_threshold)
        self.seed = int(seed)
        self.verifier = verifier

    def run(
        self, pairs: Sequence[LabeledPair], probes: Sequence[str] = PROBES
    ) -> dict[str, AgreementResult | PositionBiasResult]:
        """Run ``probes`` on ``pairs``.

        Returns:
            ``{probe: result}`` in :data:`PROBES` order.

        Raises:
            ConfigError: An unknown probe, or ``answer_relevancy`` without an embedder.
            DatasetError: Fewer than 2 faithful pairs for a relevance probe.
        """
        unknown = sorted(set(probes) - set(PROBES))
        if unknown:
            raise ConfigError(
                f"judge_check.probes: unknown {', '.join(unknown)}; choose from {', '.join(PROBES)}"
            )
        out: dict[str, AgreementResult | PositionBiasResult] = {}
        faithful = None
        if "faithfulness" in probes or "position_bias" in probes:
            faithful = self.faithfulness(pairs)
            if "faithfulness" in probes:
                out["faithfulness"] = faithful
        for name, cls in labeled_probes().items():
            if name in probes and name != "faithfulness":
                out[name] = self.labeled(cls, pairs)
        if "answer_relevancy" in probes:
            out["answer_relevancy"] = self.answer_relevancy(pairs)
        if "context_relevance" in probes:
            out["context_relevance"] = self.context_relevance(pairs)
        if "position_bias" in probes and faithful is not None:
            out["position_bias"] = self.position_bias(pairs, faithful)
        return out

    def _result(
        self,
        probe: str,
        labels: tuple[str, str],
        ids: list[str],
        truth: list[bool],
        values: list[MetricValue],
        threshold: float,
        calls: int,
        wall: float,
    ) -> AgreementResult:
        verdicts = {
            i: (v.value >= threshold if v.is_valid else None)
            for i, v in zip(ids, values, strict=True)
        }
        kept = [
            (t, verdicts[i]) for i, t in zip(ids, truth, strict=True) if verdicts[i] is not None
        ]
        failures = Counter(v.reason or "nan" for v in values if not v.is_valid)
        return AgreementResult(
            probe,
            labels,
            binary_agreement([t for t, _ in kept], [bool(v) for _, v in kept], seed=self.seed),
            n_failed=sum(failures.values()),
            failures=dict(failures),
            threshold=threshold,
            judge_calls=calls,
            wall_s=wall,
            verdicts=verdicts,
        )

    def faithfulness(self, pairs: Sequence[LabeledPair]) -> AgreementResult:
        """The faithfulness probe on every pair (positive label: faithful)."""
        return self.labeled(Faithfulness, pairs)

    def labeled(self, metric: type[Any], pairs: Sequence[LabeledPair]) -> AgreementResult:
        """The probe declared by ``metric`` (its ``declaration.probe``) on every pair: the
        pair's answer with its contexts is scored, and the verdict (score ≥ the probe's
        threshold, else :attr:`threshold`) is compared with the pair's label (positive:
        faithful).

        Args:
            metric: A declared judged metric class with a probe; built with the judge (and
                the embedder when it requires one).
            pairs: The labeled pairs.

        Returns:
            The probe's :class:`AgreementResult`, named as the metric.
        """
        probe = metric.declaration.probe
        shared = {"judge": self.judge, "embedder": self.embedder, "verifier": self.verifier}
        built = metric(**{part: shared[part] for part in metric.requires})
        samples = [Sample(id=p.id, user_input=p.question) for p in pairs]
        responses = [
            RagResponse(response=p.answer, retrieved_contexts=list(p.contexts)) for p in pairs
        ]
        values, calls, wall = _evaluate(built, probe.column, samples, responses)
        return self._result(
            metric.name,
            probe.labels,
            [p.id for p in pairs],
            [p.faithful for p in pairs],
            values,
            self.threshold if probe.threshold is None else probe.threshold,
            calls,
            wall,
        )

    def _faithful_items(self, pairs: Sequence[LabeledPair]) -> list[LabeledPair]:
        items = [p for p in pairs if p.faithful]
        if len(items) < 2:
            raise DatasetError(
                f"the relevance probes need at least 2 faithful pairs, got {len(items)}: raise n"
            )
        return items

    def answer_relevancy(self, pairs: Sequence[LabeledPair]) -> AgreementResult:
        """Own answer (relevant) vs the next faithful pair's answer (irrelevant)."""
        if self.embedder is None:
            raise ConfigError("the answer_relevancy probe needs an embedder (embedder=…)")
        items = self._faithful_items(pairs)
        samples, responses, ids, truth = [], [], [], []
        for item, other in zip(items, _swapped(items), strict=True):
            for suffix, answer, relevant in (
                ("own", item.answer, True),
                ("swapped", other.answer, False),
            ):
                ids.append(f"{item.id}-{suffix}")
                samples.append(Sample(id=ids[-1], user_input=item.question))
                responses.append(RagResponse(response=answer))
                truth.append(relevant)
        metric = AnswerRelevancy(judge=self.judge, embedder=self.embedder)
        values, calls, wall = _evaluate(metric, "answer_relevancy", samples, responses)
        return self._result(
            "answer_relevancy",
            ("relevant", "irrelevant"),
            ids,
            truth,
            values,
            self.relevancy_threshold,
            calls,
            wall,
        )

    def context_relevance(self, pairs: Sequence[LabeledPair]) -> AgreementResult:
        """Own supporting passages (relevant) vs the next faithful pair's (irrelevant)."""
        items = self._faithful_items(pairs)
        samples, responses, ids, truth = [], [], [], []
        for item, other in zip(items, _swapped(items), strict=True):
            for suffix, context, relevant in (
                ("own", item.relevant_text, True),
                ("swapped", other.relevant_text, False),
            ):
                ids.append(f"{item.id}-{suffix}")
                samples.append(Sample(id=ids[-1], user_input=item.question, reference=item.answer))
                responses.append(RagResponse(retrieved_contexts=[context]))
                truth.append(relevant)
        values, calls, wall = _evaluate(
            ContextPrecision(judge=self.judge), "context_precision", samples, responses
        )
        return self._result(
            "context_relevance",
            ("relevant", "irrelevant"),
            ids,
            truth,
            values,
            CONTEXT_THRESHOLD,
            calls,
            wall,
        )

    def position_bias(
        self, pairs: Sequence[LabeledPair], first: AgreementResult
    ) -> PositionBiasResult:
        """Faithfulness with the contexts reversed, compared with ``first``'s verdicts."""
        probed = [p for p in pairs if len(p.contexts) >= 2]
        samples = [Sample(id=p.id, user_input=p.question) for p in probed]
        responses = [
            RagResponse(response=p.answer, retrieved_contexts=list(p.contexts)[::-1])
            for p in probed
        ]
        values, calls, wall = _evaluate(
            Faithfulness(judge=self.judge), "faithfulness", samples, responses
        )
        changed: list[float] = []
        for p, v in zip(probed, values, strict=True):
            before = first.verdicts.get(p.id)
            if v.is_valid and before is not None:
                changed.append(float((v.value >= self.threshold) != before))
        return PositionBiasResult(
            n=len(changed),
            changed=int(sum(changed)),
            ci=bootstrap_ci(changed, seed=self.seed),
            n_failed=sum(not v.is_valid for v in values),
            judge_calls=calls,
            wall_s=wall,
        )
