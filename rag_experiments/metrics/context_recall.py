"""Context recall: the share of the reference answer's claims that the retrieved contexts hold.

``context_recall`` ∈ [0, 1], higher is better::

    context_recall = |{reference claims attributable to at least one retrieved context}|
                     / |reference claims|

(RAGAS ``LLMContextRecall``). One judge call (prompt
:mod:`~rag_experiments.metrics.prompts.context_recall`): the judge splits the reference into
claims and gives, for each, the number of the context that states it (0 = none), the same
checkable verdict as faithfulness. A number outside ``0..n_contexts``, or no claim at all for a
non-blank reference, is a parse error (retried), never a score. A claim listed more than once
(same normalised text) counts once (:mod:`~rag_experiments.metrics.claims`).

Edges:

- target failed → NaN ``target_error``;
- unanswerable sample → NaN ``unanswerable`` (its reference says the corpus has no answer:
  there is nothing to recall);
- reference ``""`` (or blank) → NaN ``no_reference``;
- contexts ``[]`` or only blank texts → 0.0 flagged ``empty_context``, no judge call;
- judge failure → NaN with its reason.

**Shared claim layer** (``claim_layer: true``): the value is instead read from the claim layer
shared with the claim diagnostics (:mod:`~rag_experiments.metrics.claim_layer`: claims
extracted once per text, checked once against all retrieved chunks), as ``context_claim_recall``
computes it — the same definition, and in a suite that also holds the diagnostics no extra
judge call. Off by default: alone, the one-call prompt above is cheaper.
"""

from __future__ import annotations

from typing import Any

from rag_experiments.metrics.claims import unique_claims
from rag_experiments.metrics.definitions import (
    RAGAS,
    MetricDeclaration,
    MetricDefinition,
    three_way,
)
from rag_experiments.metrics.judge import JudgedMetric, has_context
from rag_experiments.metrics.prompts import context_recall as prompt
from rag_experiments.metrics.prompts.base import format_contexts
from rag_experiments.records import MetricValue, RagResponse, Sample


class ContextRecall(JudgedMetric):
    """Attributable reference claims / reference claims, one judge call per row.

    Args:
        judge: The judge chat model.
        max_retries: Retries of an invalid judge output.
        max_tokens: Completion limit per judge call.
        prefix: Column-name prefix.
        claim_layer: Read the value from the shared claim layer (module docstring).
        examples: Graded few-shot examples for the prompt (:mod:`~rag_experiments.metrics.
            fewshot`; ``rag-exp align`` writes them).
    """

    name = "context_recall"
    example_fields = ("question", "contexts", "reference")
    columns = ("context_recall",)
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "context_recall",
                True,
                0.0,
                1.0,
                "claims of the reference attributable to a retrieved context / claims of the "
                "reference",
                f"{RAGAS} (LLMContextRecall)",
                key=100,
                labels=three_way("missing", "partial", "complete"),
            ),
        ),
        scorer=True,
    )
    shows_contexts = True

    def __init__(
        self,
        judge: Any = None,
        max_retries: int = 1,
        max_tokens: int = 320,
        prefix: str = "",
        claim_layer: bool = False,
        examples: Any = None,
    ) -> None:
        super().__init__(judge, max_retries, max_tokens, prefix, examples)
        self.claim_layer = bool(claim_layer)

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if self.claim_layer:
            return self._from_claim_layer(sample, resp)
        if resp.error is not None:
            return self._nan_all("target_error")
        if not sample.answerable:
            return self._nan_all("unanswerable")
        if not sample.reference.strip():
            return self._nan_all("no_reference")
        contexts = list(resp.retrieved_contexts)
        if not has_context(contexts):
            value = MetricValue(0.0, "empty_context")
            return {"context_recall": value}, {"skipped": "empty_context"}
        fields = {
            "contexts": format_contexts(contexts),
            "question": sample.user_input,
            "reference": sample.reference.strip(),
            "max_claims": prompt.MAX_CLAIMS,
            "n": len(contexts),
        }
        schema = prompt.output_model(len(contexts), min_claims=1)
        judgement, record = self._ask(prompt.PROMPT, fields, schema)
        if judgement.parsed is None:
            return {"context_recall": MetricValue.nan(judgement.error or "judge_error")}, record
        claims = unique_claims(judgement.parsed.claims)  # type: ignore[attr-defined]
        record["claims"] = [
            {
                "claim": c.claim,
                "context": c.context,
                "attributed": c.supported,
                "repeats": c.repeats,
            }
            for c in claims
        ]
        attributed = sum(1 for c in claims if c.supported)
        return {"context_recall": MetricValue(attributed / len(claims))}, record

    def _from_claim_layer(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """The value as ``context_claim_recall`` reads it from the shared claim layer."""
        from rag_experiments.metrics.diagnostics import RetrieverClaims  # imports this package

        shared = RetrieverClaims(judge=self.judge, max_retries=self.max_retries)
        values, record = shared._score(sample, resp)  # noqa: SLF001 - same family
        return {"context_recall": values["context_claim_recall"]}, record
