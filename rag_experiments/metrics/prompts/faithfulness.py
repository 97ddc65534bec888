"""Faithfulness prompt (one call): split the response into claims and name, for each, the
numbered context that states it (0 = none)."""

from __future__ import annotations

from pydantic import Field, create_model

from rag_experiments.common.memo import memo
from rag_experiments.llm.parsing import StructuredOutput, strict_choice
from rag_experiments.metrics.prompts.base import JudgePrompt

MAX_CLAIMS = 6
"""Most claims the judge may return: bounds the output so a small model cannot loop."""

CLAIM_CHARS = 120
"""Longest claim text accepted (characters)."""

PROMPT = JudgePrompt(
    name="faithfulness",
    version="v1",
    template=(
        "Context passages:\n\n{contexts}\n\n"
        "Question: {question}\n"
        "Answer: {answer}\n\n"
        "Task: split the Answer into short, self-contained factual claims (at most {max_claims}). "
        'For each claim give "context": the number of the passage that states it, or 0 if no '
        "passage states it. Use only the passages, not your own knowledge.\n"
        'JSON: {{"claims": [{{"claim": "...", "context": <0-{n}>}}]}}'
    ),
)


class Claim(StructuredOutput):
    """One claim and the number of the context that supports it (0 = none)."""

    claim: str = Field(min_length=1, max_length=CLAIM_CHARS)
    context: int = Field(ge=0)


class FaithfulnessOutput(StructuredOutput):
    """What the judge returns: the response's claims with their supporting context."""

    claims: list[Claim] = Field(max_length=MAX_CLAIMS)


@memo(maxsize=64)
def output_model(n_contexts: int, min_claims: int = 0) -> type[FaithfulnessOutput]:
    """:class:`FaithfulnessOutput` with ``context`` one of ``0..n_contexts`` (an enum in the
    JSON schema, so a grammar-constrained model cannot write another number; from any other
    model, another number is an invalid verdict, i.e. a parse error) and at least
    ``min_claims`` claims.

    The class keeps its name, so scripted fakes keyed by schema name still match.
    """
    numbers = strict_choice(*range(n_contexts + 1))  # an integer: true is not 1
    claim = create_model("Claim", __base__=Claim, context=(numbers, ...))
    return create_model(
        "FaithfulnessOutput",
        __base__=FaithfulnessOutput,
        claims=(list[claim], Field(min_length=min_claims, max_length=MAX_CLAIMS)),  # type: ignore[valid-type]
    )
