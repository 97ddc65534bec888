"""Context precision (rank-aware), or context utilization when there is no reference.

One judge call per row (prompts in :mod:`~rag_experiments.metrics.prompts.context_precision`)
returns one verdict per retrieved context, in rank order: is the context useful for arriving at
the reference answer (``context_precision``, RAGAS ``LLMContextPrecisionWithReference``) — or,
for a sample without a reference, at the response (``context_utilization``, RAGAS
``ContextUtilization``). With rel_k ∈ {0, 1} the verdict of the context at rank k and K the
number of contexts, the score is the average precision::

    AP = Σ_{k=1..K} (precision@k · rel_k) / |{k : rel_k = 1}|,   precision@k = Σ_{i≤k} rel_i / k

and 0 when no context is relevant. Relevant contexts at ranks 1–2 of 4 give 1.0; at ranks 3–4,
(1/3 + 2/4) / 2 = 0.4167.

The verdicts must be exactly K values ``"yes"``/``"no"``: another count, or another value, is a
parse error (retried with feedback, ``max_retries``), never a misaligned or partial list.

Each row has a value in exactly one of the two columns; the other is NaN with ``has_reference``
(precision was computed) or ``no_reference`` (utilization was computed). Edges:

- target failed → both NaN ``target_error``;
- unanswerable sample → the applicable column NaN ``unanswerable`` (no context can be relevant
  to it), the other ``has_reference``/``no_reference`` as on every row;
- contexts ``[]`` or only blank texts → the applicable column 0.0 flagged ``empty_context``,
  no judge call;
- no reference and an empty response → ``context_utilization`` NaN ``empty_answer``
  (``no_response`` when no answer was recorded);
- judge failure → NaN with its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rag_experiments.metrics.definitions import RAGAS, MetricDeclaration, MetricDefinition
from rag_experiments.metrics.judge import InvalidVerdictError, JudgedMetric, has_context
from rag_experiments.metrics.prompts import context_precision as prompt
from rag_experiments.metrics.prompts.base import format_contexts
from rag_experiments.records import MetricValue, RagResponse, Sample


def average_precision(relevant: Sequence[bool]) -> float:
    """Average precision of a ranked list of binary verdicts (formula in the module docstring).

    Args:
        relevant: Verdict per rank, best first.

    Returns:
        AP in [0, 1]; 0.0 when nothing is relevant (or the list is empty).
    """
    hits = 0
    total = 0.0
    for k, rel in enumerate(relevant, start=1):
        if rel:
            hits += 1
            total += hits / k
    return total / hits if hits else 0.0


class ContextPrecision(JudgedMetric):
    """Rank-aware precision of the retrieved contexts, one judge call per row.

    Args:
        judge: The judge chat model.
        max_retries: Retries of an invalid judge output (wrong count, invalid verdict).
        max_tokens: Completion limit per judge call (raised to ``8 · n_contexts + 16`` when that
            is larger, so any number of contexts fits).
        prefix: Column-name prefix.
        examples: Graded few-shot examples for the prompt (:mod:`~rag_experiments.metrics.
            fewshot`; ``rag-exp align`` writes them).
    """

    name = "context_precision"
    example_fields = ("question", "contexts", "reference")
    columns = ("context_precision", "context_utilization")
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "context_precision",
                True,
                0.0,
                1.0,
                "average precision of the contexts judged useful for the reference answer",
                f"{RAGAS} (LLMContextPrecisionWithReference)",
                key=90,
            ),
            MetricDefinition(
                "context_utilization",
                True,
                0.0,
                1.0,
                "average precision of the contexts judged useful for the response (no reference)",
                f"{RAGAS} (ContextUtilization)",
            ),
        ),
        scorer=True,
    )
    shows_contexts = True

    def __init__(
        self,
        judge: Any = None,
        max_retries: int = 1,
        max_tokens: int = 96,
        prefix: str = "",
        examples: Any = None,
    ) -> None:
        super().__init__(judge, max_retries, max_tokens, prefix, examples)

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if resp.error is not None:
            return self._nan_all("target_error")
        reference = sample.reference.strip()
        column, other, other_reason = (
            ("context_precision", "context_utilization", "has_reference")
            if reference
            else ("context_utilization", "context_precision", "no_reference")
        )
        # The other column is not this row's metric whatever happens to the row: its reason
        # says so on every row (an unanswerable row of a dataset with references too, so
        # context_utilization reads "has_reference" on all of that dataset's rows).
        out = {other: MetricValue.nan(other_reason)}
        if not sample.answerable:
            out[column] = MetricValue.nan("unanswerable")
            return out, {"skipped": "unanswerable"}
        contexts = list(resp.retrieved_contexts)
        if not reference and resp.no_response:  # context_utilization reads the answer
            out[column] = MetricValue.nan("no_response")
            return out, {"skipped": "no_response"}
        if not reference and not resp.response.strip():
            out[column] = MetricValue.nan("empty_answer")
            return out, {"skipped": "empty_answer"}
        if not has_context(contexts):
            out[column] = MetricValue(0.0, "empty_context")
            return out, {"skipped": "empty_context"}
        n = len(contexts)
        fields: dict[str, Any] = {
            "contexts": format_contexts(contexts),
            "question": sample.user_input,
            "n": n,
        }
        if reference:
            fields["reference"] = reference
            chosen = prompt.PRECISION_PROMPT
        else:
            fields["answer"] = resp.response.strip()
            chosen = prompt.UTILIZATION_PROMPT

        def check(parsed: Any) -> None:
            if len(parsed.verdicts) != n:
                raise InvalidVerdictError(
                    f"{len(parsed.verdicts)} verdicts for {n} contexts; give exactly {n}",
                    raw="",
                )

        limit = max(self.max_tokens, 8 * n + 16)  # room for n verdicts, whatever top_k is
        judgement, record = self._ask(chosen, fields, prompt.output_model(n), check, limit)
        if judgement.parsed is None:
            out[column] = MetricValue.nan(judgement.error or "judge_error")
            return out, record
        relevant = [v == "yes" for v in judgement.parsed.verdicts]  # type: ignore[attr-defined]
        record["verdicts"] = [{"rank": k, "relevant": r} for k, r in enumerate(relevant, start=1)]
        out[column] = MetricValue(average_precision(relevant))
        return out, record
