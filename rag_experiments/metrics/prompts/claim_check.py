"""Prompts of the shared claim layer (:mod:`~rag_experiments.metrics.claim_layer`): split a
text into claims (one call per text), and check a claim set against numbered passages (one call
for all passages: for each claim, the numbers of the passages that entail it)."""

from __future__ import annotations

from pydantic import Field, create_model

from rag_experiments.common.memo import memo
from rag_experiments.llm.parsing import StructuredOutput, strict_choice
from rag_experiments.metrics.prompts.base import JudgePrompt

MAX_CLAIMS = 8
"""Most claims extracted from one text: bounds the output so a small model cannot loop."""

CLAIM_CHARS = 160
"""Longest claim text accepted (characters)."""

EXTRACT = JudgePrompt(
    name="claim_extract",
    version="v1",
    template=(
        "Text: {text}\n\n"
        "Task: split the Text into short, self-contained factual claims (at most {max_claims}); "
        "each claim must be understandable without the Text (replace pronouns by names). "
        "Leave out greetings, hedges and refusals. Question it answers, for context only: "
        "{question}\n"
        'JSON: {{"claims": ["...", "..."]}}'
    ),
)

CHECK = JudgePrompt(
    name="claim_check",
    version="v1",
    template=(
        "Passages:\n\n{passages}\n\n"
        "Claims:\n{claims}\n\n"
        "Task: for each claim, in order, list the numbers of the passages that entail it (the "
        "passage states it or it follows from the passage alone); [] when none does. Use only "
        "the passages, not your own knowledge.\n"
        'JSON: {{"entailed_by": [[<1-{n}>, ...], ...]}} with exactly {n_claims} lists'
    ),
)


class ClaimList(StructuredOutput):
    """What the judge returns for an extraction: the text's claims."""

    claims: list[str] = Field(max_length=MAX_CLAIMS)


class ClaimSupport(StructuredOutput):
    """What the judge returns for a check: per claim, the passages (1-based) entailing it."""

    entailed_by: list[list[int]]


@memo(maxsize=256)
def support_model(n_claims: int, n_passages: int) -> type[ClaimSupport]:
    """:class:`ClaimSupport` with exactly ``n_claims`` lists of passage numbers in
    ``1..n_passages`` (an enum in the JSON schema; another number is a parse error). Keeps
    its class name, so scripted fakes keyed by schema name match."""
    numbers = strict_choice(*range(1, n_passages + 1))
    return create_model(
        "ClaimSupport",
        __base__=ClaimSupport,
        entailed_by=(
            list[list[numbers]],  # type: ignore[valid-type]
            Field(min_length=n_claims, max_length=n_claims),
        ),
    )


def numbered(items: list[str]) -> str:
    """``[1] a`` / ``[2] b`` lines, one per item."""
    return "\n".join(f"[{i}] {t.strip()}" for i, t in enumerate(items, start=1))
