"""Local chat models behind one protocol."""

from rag_experiments.llm.base import ChatModel, Completion, Usage

__all__ = ["ChatModel", "Completion", "Usage"]
