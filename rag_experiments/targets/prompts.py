"""The baseline generator's prompt."""

from __future__ import annotations

from rag_experiments.llm.base import Message

ANSWER_PROMPT_VERSION = "answer-v1"


def format_contexts(contexts: list[str]) -> str:
    """Number contexts from 1: ``[1] text`` blocks separated by blank lines."""
    return "\n\n".join(f"[{i}] {c.strip()}" for i, c in enumerate(contexts, start=1))


def answer_messages(system_prompt: str, question: str, contexts: list[str]) -> list[Message]:
    """Chat messages asking for an answer to ``question`` grounded in ``contexts``."""
    user = f"Context passages:\n\n{format_contexts(contexts)}\n\nQuestion: {question}\nAnswer:"
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user}]
