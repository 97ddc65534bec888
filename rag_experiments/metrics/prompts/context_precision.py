"""Context precision / utilization prompts (one call): one yes/no verdict per context, in
rank order, for reaching the reference answer (precision) or the response (utilization)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, create_model

from rag_experiments.common.memo import memo
from rag_experiments.llm.parsing import StructuredOutput
from rag_experiments.metrics.prompts.base import JudgePrompt

MAX_CONTEXTS = 50
"""Most contexts judged in one call."""

_TASK = (
    'Task: for each of the {n} passages, in order, answer "yes" if it is useful for '
    'arriving at the {target}, else "no". Give exactly {n} verdicts.\n'
    'JSON: {{"verdicts": ["yes" or "no", ...]}}'
)

PRECISION_PROMPT = JudgePrompt(
    name="context_precision",
    version="v1",
    template=(
        "Context passages:\n\n{contexts}\n\n"
        "Question: {question}\n"
        "Reference answer: {reference}\n\n" + _TASK.replace("{target}", "Reference answer")
    ),
)

UTILIZATION_PROMPT = JudgePrompt(
    name="context_utilization",
    version="v1",
    template=(
        "Context passages:\n\n{contexts}\n\n"
        "Question: {question}\n"
        "Answer: {answer}\n\n" + _TASK.replace("{target}", "Answer")
    ),
)


class ContextVerdicts(StructuredOutput):
    """What the judge returns: one verdict per context, in rank order."""

    verdicts: list[Literal["yes", "no"]] = Field(min_length=1, max_length=MAX_CONTEXTS)


@memo(maxsize=64)
def output_model(n_contexts: int) -> type[ContextVerdicts]:
    """:class:`ContextVerdicts` with exactly ``n_contexts`` verdicts (a grammar-constrained
    model cannot return another count; others get a parse error and a retry)."""
    return create_model(
        "ContextVerdicts",
        __base__=ContextVerdicts,
        verdicts=(
            list[Literal["yes", "no"]],
            Field(min_length=n_contexts, max_length=n_contexts),
        ),
    )
