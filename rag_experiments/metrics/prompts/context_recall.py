"""Context recall prompt (one call): split the reference answer into claims and name, for
each, the numbered context that states it (0 = none). The output model is faithfulness's, with
at least one claim (a non-blank reference always makes one)."""

from __future__ import annotations

from rag_experiments.metrics.prompts.base import JudgePrompt
from rag_experiments.metrics.prompts.faithfulness import MAX_CLAIMS, output_model

PROMPT = JudgePrompt(
    name="context_recall",
    version="v1",
    template=(
        "Context passages:\n\n{contexts}\n\n"
        "Question: {question}\n"
        "Reference answer: {reference}\n\n"
        "Task: split the Reference answer into short, self-contained factual claims (at most "
        '{max_claims}). For each claim give "context": the number of the passage that states '
        "it, or 0 if no passage states it.\n"
        'JSON: {{"claims": [{{"claim": "...", "context": <0-{n}>}}]}}'
    ),
)

__all__ = ["MAX_CLAIMS", "PROMPT", "output_model"]
