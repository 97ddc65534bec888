"""The prompt record shared by every judge prompt, and the context block they show."""

from __future__ import annotations

from dataclasses import dataclass

from rag_experiments.llm.base import Message

SYSTEM = "You are a strict grader of answers from a document search system. Reply with JSON only."
"""System message of every judge prompt (identical, so a server can reuse the prefix)."""

EMPTY_CONTEXT_TEXT = "(empty)"
"""What a blank context is shown as, so numbering stays aligned with the retrieved list."""


def format_contexts(contexts: list[str]) -> str:
    """Number contexts from 1 as ``[i] text`` blocks separated by blank lines; a blank
    context is shown as ``(empty)``, never dropped, so ``[i]`` is always the i-th retrieved
    context."""
    return "\n\n".join(
        f"[{i}] {c.strip() or EMPTY_CONTEXT_TEXT}" for i, c in enumerate(contexts, start=1)
    )


@dataclass(frozen=True)
class JudgePrompt:
    """One versioned judge prompt.

    Attributes:
        name: The metric it serves (``faithfulness``).
        version: Bumped whenever the wording changes (``v1``).
        template: The user message, a :meth:`str.format` template.
    """

    name: str
    version: str
    template: str

    @property
    def id(self) -> str:
        """``<name>-<version>``, logged with every judgement."""
        return f"{self.name}-{self.version}"

    def messages(self, **fields: str) -> list[Message]:
        """The chat messages: :data:`SYSTEM` and the filled template.

        Args:
            **fields: Values of the template's fields.

        Returns:
            ``[system, user]`` messages.
        """
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": self.template.format(**fields)},
        ]
