"""Faithfulness: the share of the response's claims that the retrieved contexts support.

``faithfulness`` ∈ [0, 1], higher is better::

    faithfulness = |{claims supported by a retrieved context}| / |claims of the response|

(distinct claims: a repeated claim counts once)

(the definition of RAGAS and DeepEval). Claims are judged against **all** retrieved contexts,
never a filtered subset.

**One call, not two.** RAGAS and DeepEval extract claims in one call and judge them in a
second. We ask for both in one call (prompt :mod:`~rag_experiments.metrics.prompts.faithfulness`):
the judge lists the response's claims and gives, for each, the *number* of the context that
states it (0 = none). Reasons: the four core metrics must cost at most 4 judge calls per
question, which leaves faithfulness one; a context number is a checkable verdict (a reader of
``judge_audit.jsonl`` opens context ``[k]`` and sees whether it says the claim), where a bare
yes/no is not; and there is no second list to keep aligned with the first, so claims and
verdicts cannot be misaligned. A number outside ``0..n_contexts`` is an invalid verdict: a
parse error, retried, never a score.

Edges (each a value or a reason, never a silent 0):

- target failed → NaN ``target_error``; no answer recorded (``RagResponse.no_response``) → NaN
  ``no_response``;
- the response is a refusal (:func:`~rag_experiments.metrics.refusal.is_refusal`) → NaN
  ``refusal`` (a refusal makes no claim to check; refusals are scored by ``refusal``);
- empty or whitespace response, or the judge finds no claim → NaN ``no_claims``;
- contexts ``[]`` or only blank texts → 0.0 flagged ``empty_context``, no judge call (nothing
  can be supported);
- judge failure → NaN with the failure's reason (``timeout``, ``parse_error``, ``truncated`` …).

Unanswerable samples are scored like the others: an answer to a question the corpus cannot
answer should still be grounded in the contexts, and a hallucinated one is exactly what this
metric catches (a refusal is left out, as above). At most ``MAX_CLAIMS`` (6) claims of at most
120 characters are judged: the bound keeps a small model from looping until the token limit.
A claim listed more than once (same normalised text) counts once, with its first verdict
(:mod:`~rag_experiments.metrics.claims`); the audit record lists each distinct claim with its
``repeats``.

**Shared claim layer** (``claim_layer: true``): the value is instead read from the claim layer
shared with the claim diagnostics (:mod:`~rag_experiments.metrics.claim_layer`: claims
extracted once per text, checked once against all retrieved chunks), as ``claim_faithfulness``
computes it — the same definition, and in a suite that also holds the diagnostics no extra
judge call. Off by default: alone, the one-call prompt above is cheaper.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.claims import unique_claims
from rag_experiments.metrics.definitions import (
    RAGAS,
    JudgeProbe,
    MetricDeclaration,
    MetricDefinition,
    three_way,
)
from rag_experiments.metrics.judge import JudgedMetric, has_context
from rag_experiments.metrics.prompts import faithfulness as prompt
from rag_experiments.metrics.prompts.base import format_contexts
from rag_experiments.metrics.refusal import compile_patterns, is_refusal
from rag_experiments.records import MetricValue, RagResponse, Sample


class Faithfulness(JudgedMetric):
    """Supported claims / claims of the response, one judge call per row.

    Args:
        judge: The judge chat model.
        max_retries: Retries of an invalid judge output.
        max_tokens: Completion limit per judge call.
        refusal_patterns: Extra refusal patterns (see :mod:`~rag_experiments.metrics.refusal`).
        prefix: Column-name prefix.
        claim_layer: Read the value from the shared claim layer (module docstring).
        examples: Graded few-shot examples for the prompt (:mod:`~rag_experiments.metrics.
            fewshot`; ``rag-exp align`` writes them).
    """

    name = "faithfulness"
    columns = ("faithfulness",)
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "faithfulness",
                True,
                0.0,
                1.0,
                "claims of the response supported by a retrieved context / claims of the response",
                f"{RAGAS}; DeepEval FaithfulnessMetric",
                key=70,
                labels=three_way("unfaithful", "partial", "faithful"),
            ),
        ),
        scorer=True,
        probe=JudgeProbe("faithfulness", ("faithful", "hallucinated"), prompt.PROMPT.id),
    )
    shows_contexts = True

    def __init__(
        self,
        judge: ChatModel | None = None,
        max_retries: int = 1,
        max_tokens: int = 320,
        refusal_patterns: Sequence[str] | None = None,
        prefix: str = "",
        claim_layer: bool = False,
        examples: Any = None,
    ) -> None:
        super().__init__(judge, max_retries, max_tokens, prefix, examples)
        self.refusal_patterns = compile_patterns(refusal_patterns)
        self.claim_layer = bool(claim_layer)

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if self.claim_layer:
            return self._from_claim_layer(sample, resp)
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        if is_refusal(resp.response, self.refusal_patterns):
            return self._nan_all("refusal")
        if not resp.response.strip():
            return self._nan_all("no_claims")
        contexts = list(resp.retrieved_contexts)
        if not has_context(contexts):
            return {"faithfulness": MetricValue(0.0, "empty_context")}, {"skipped": "empty_context"}
        fields = {
            "contexts": format_contexts(contexts),
            "question": sample.user_input,
            "answer": resp.response.strip(),
            "max_claims": prompt.MAX_CLAIMS,
            "n": len(contexts),
        }
        judgement, record = self._ask(prompt.PROMPT, fields, prompt.output_model(len(contexts)))
        if judgement.parsed is None:
            return {"faithfulness": MetricValue.nan(judgement.error or "judge_error")}, record
        claims = unique_claims(judgement.parsed.claims)  # type: ignore[attr-defined]
        record["claims"] = [
            {"claim": c.claim, "context": c.context, "supported": c.supported, "repeats": c.repeats}
            for c in claims
        ]
        if not claims:
            return {"faithfulness": MetricValue.nan("no_claims")}, record
        supported = sum(1 for c in claims if c.supported)
        return {"faithfulness": MetricValue(supported / len(claims))}, record

    def _from_claim_layer(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """The value as ``claim_faithfulness`` reads it from the shared claim layer."""
        from rag_experiments.metrics.diagnostics import ClaimFaithfulness  # imports this package

        shared = ClaimFaithfulness(judge=self.judge, max_retries=self.max_retries)
        values, record = shared._score(sample, resp)  # noqa: SLF001 - same family
        return {"faithfulness": values["claim_faithfulness"]}, record
