"""The chat message type shared by the model protocol (:mod:`rag_experiments.llm.base`) and the
context-window arithmetic (:mod:`rag_experiments.llm.context`), in its own module so that
neither of the two imports the other's module to name it."""

from __future__ import annotations

Message = dict[str, str]
"""``{"role": "system" | "user" | "assistant", "content": str}``."""
