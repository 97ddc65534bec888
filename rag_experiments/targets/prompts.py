"""The baseline generator's prompt."""

from __future__ import annotations

from rag_experiments.llm.base import Message

ANSWER_PROMPT_VERSION = "answer-v1"


CITE_INSTRUCTION = (
    "After each sentence of your answer, cite the passages that support it by their numbers in "
    "square brackets, e.g. [1] or [1][3]; cite only passages that state what the sentence says."
)
"""Appended to the system prompt when the baseline is asked to cite (``target.cite=true``);
the markers are what :mod:`~rag_experiments.metrics.citations` reads (ALCE's format)."""


def cited_system_prompt(system_prompt: str) -> str:
    """``system_prompt`` followed by :data:`CITE_INSTRUCTION`."""
    return f"{system_prompt.rstrip()} {CITE_INSTRUCTION}".strip()


def format_contexts(contexts: list[str]) -> str:
    """Number contexts from 1: ``[1] text`` blocks separated by blank lines."""
    return "\n\n".join(f"[{i}] {c.strip()}" for i, c in enumerate(contexts, start=1))


def answer_messages(system_prompt: str, question: str, contexts: list[str]) -> list[Message]:
    """Chat messages asking for an answer to ``question`` grounded in ``contexts``."""
    user = f"Context passages:\n\n{format_contexts(contexts)}\n\nQuestion: {question}\nAnswer:"
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]
