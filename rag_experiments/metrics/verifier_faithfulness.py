"""Faithfulness scored by a verifier model instead of a chat judge (``metrics=verifier``).

The response is split into sentences (:func:`~rag_experiments.text.sentences.split_sentences`,
the package's one sentence rule); each distinct sentence is a claim (same text after case and
white-space folding counts once). Every claim is scored against every non-blank retrieved
context by the verifier (:class:`~rag_experiments.protocols.Verifier`: P(context supports
claim), a long context windowed to the model's length with overlap, max over windows), in one
batched call per row::

    p(claim)              = max over contexts c of P(c supports claim)
    faithfulness          = |{claims with p(claim) >= threshold}| / |claims|
    faithfulness_prob     = mean over claims of p(claim)

``faithfulness`` is the definition RAGAS and DeepEval use (supported claims / claims) with the
verifier's verdict at the declared ``threshold`` (default 0.5) in place of the judge's; the
mean probability is the threshold-free second column. The max over contexts is the rule of
RAGAS's ``FaithfulnesswithHHEM`` and TruLens's NLI groundedness (each statement against its
best source).

Edges, with the reasons of :mod:`~rag_experiments.metrics.faithfulness` (each a value or a
reason, never a silent 0):

- target failed → NaN ``target_error``; no answer recorded → NaN ``no_response``;
- a refusal (:func:`~rag_experiments.metrics.refusal.is_refusal`) → NaN ``refusal``;
- an empty or blank response → NaN ``no_claims``;
- contexts ``[]`` or only blank texts → 0.0 flagged ``empty_context`` in both columns, no
  verifier call;
- a served verifier that fails (after its retries) → NaN with its reason (``timeout``,
  ``unreachable``, ``http_error``, ``bad_response``).

The audit record lists each claim with its probability and the best context (1-based) and
counts one verifier call per row (``judge_calls``; 0 with no pair to score); the row's
rationale lines read ``✓ claim (context 2, p=0.91)``.

The metric runs on the judge scheduler (:mod:`~rag_experiments.metrics.scheduler`) as a judged
metric: its ``judge`` attribute is the verifier, whose ``max_concurrency`` sizes the pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.metrics.audit import RATIONALE_KEY, USAGE_KEYS
from rag_experiments.metrics.definitions import (
    JudgeProbe,
    MetricDeclaration,
    MetricDefinition,
)
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.judge import has_context
from rag_experiments.metrics.refusal import compile_patterns, is_refusal
from rag_experiments.metrics.scheduler import JudgedRowMetric
from rag_experiments.protocols import Verifier
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.text.sentences import split_sentences

PROMPT_ID = "verifier-faithfulness-v1"
"""Identity of the scoring rule (sentence claims, max over contexts), as a judge prompt's id:
part of a ``judge-check`` qualification."""


def sentence_claims(response: str) -> list[str]:
    """The distinct sentences of ``response`` in order (a sentence equal to an earlier one
    after case and white-space folding is left out)."""
    seen: dict[str, str] = {}
    for sentence in split_sentences(response):
        seen.setdefault(" ".join(sentence.split()).casefold(), sentence)
    return list(seen.values())


class VerifierFaithfulness(JudgedRowMetric):
    """Share of the response's sentences a verifier finds supported by a retrieved context.

    Args:
        verifier: The verifier (``build.build`` injects the ``verifier`` config's).
        threshold: Probability at or above which a claim is supported, in [0, 1].
        refusal_patterns: Extra refusal patterns (see :mod:`~rag_experiments.metrics.refusal`).
        prefix: Column-name prefix (``verifier.`` beside the judge's ``faithfulness``).

    Raises:
        ConfigError: ``threshold`` outside [0, 1].
    """

    name = "verifier_faithfulness"
    requires: ClassVar[frozenset[str]] = frozenset({"verifier"})
    shows_contexts = True
    declaration = MetricDeclaration(
        outputs=(
            Faithfulness.declaration.outputs[0],  # the same definition: one column, two scorers
            MetricDefinition(
                "faithfulness_prob",
                True,
                0.0,
                1.0,
                "mean over the response's sentences of the verifier's probability that the best "
                "retrieved context supports it",
                "RAGAS FaithfulnesswithHHEM; TruLens groundedness (NLI)",
            ),
        ),
        probe=JudgeProbe("faithfulness", ("faithful", "hallucinated"), PROMPT_ID),
    )
    columns = ("faithfulness", "faithfulness_prob")

    def __init__(
        self,
        verifier: Verifier | None = None,
        threshold: float = 0.5,
        refusal_patterns: Sequence[str] | None = None,
        prefix: str = "",
    ) -> None:
        if not 0.0 <= float(threshold) <= 1.0:
            raise ConfigError(
                f"metrics.suite.{self.name}.threshold must be in [0, 1], got {threshold}"
            )
        self.judge = verifier  # the scheduler pools rows by this model
        self.verifier = verifier
        self.threshold = float(threshold)
        self.refusal_patterns = compile_patterns(refusal_patterns)
        self.prefix = prefix

    def specs(self) -> list[MetricSpec]:
        """``faithfulness`` and ``faithfulness_prob``, prefixed."""
        return [self.declaration.output(c).spec(self.prefix) for c in self.columns]

    def score_row(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Score one row (formula and edges in the module docstring).

        Returns:
            ``({column: MetricValue}, audit record)``.

        Raises:
            ConfigError: No verifier was given.
        """
        values, record = self._score(resp)
        for key in USAGE_KEYS:
            record.setdefault(key, 0)
        record[RATIONALE_KEY] = [
            f"{'✓' if c['supported'] else '✗'} {c['claim']} "
            f"(context {c['context']}, p={c['probability']:.2f})"
            for c in record.get("claims", [])
        ] or ([record["error_message"]] if record.get("error_message") else [])
        return {self.prefix + k: v for k, v in values.items()}, record

    def _nan_all(self, reason: str) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        return {c: MetricValue.nan(reason) for c in self.columns}, {"skipped": reason}

    def _score(self, resp: RagResponse) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if self.verifier is None:
            raise ConfigError(
                f"metric {self.name} needs a verifier: run it with verifier=local "
                "verifier.path=<model folder> or verifier=tei verifier.url=<TEI server>"
            )
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        if is_refusal(resp.response, self.refusal_patterns):
            return self._nan_all("refusal")
        claims = sentence_claims(resp.response)
        if not claims:
            return self._nan_all("no_claims")
        contexts = [c for c in resp.retrieved_contexts if c.strip()]
        if not has_context(contexts):
            flagged = MetricValue(0.0, "empty_context")
            return {c: flagged for c in self.columns}, {"skipped": "empty_context"}
        ranks = [i + 1 for i, c in enumerate(resp.retrieved_contexts) if c.strip()]
        pairs = [(context, claim) for claim in claims for context in contexts]
        record: dict[str, Any] = {"verifier": self.verifier.id, "judge_calls": 1}
        try:
            probs = self.verifier.score(pairs)
        except LLMError as exc:
            record.update(error=exc.reason, error_message=str(exc))
            return {c: MetricValue.nan(exc.reason) for c in self.columns}, record
        best = []
        for k, claim in enumerate(claims):
            row = probs[k * len(contexts) : (k + 1) * len(contexts)]
            j = max(range(len(row)), key=row.__getitem__)
            best.append(row[j])
            record.setdefault("claims", []).append(
                {
                    "claim": claim,
                    "context": ranks[j],
                    "probability": round(float(row[j]), 6),
                    "supported": row[j] >= self.threshold,
                }
            )
        supported = sum(p >= self.threshold for p in best)
        return {
            "faithfulness": MetricValue(supported / len(claims)),
            "faithfulness_prob": MetricValue(sum(best) / len(best)),
        }, record
