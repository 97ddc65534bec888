"""Chunkers: split a :class:`~rag_experiments.records.Document` into retrievable chunks."""

from __future__ import annotations

from rag_experiments.chunking.fixed import FixedChunker
from rag_experiments.chunking.none import NoChunker
from rag_experiments.chunking.semantic import SemanticChunker

__all__ = ["FixedChunker", "NoChunker", "SemanticChunker"]
