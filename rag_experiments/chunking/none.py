"""The no-op chunker: one chunk per document."""

from __future__ import annotations

from rag_experiments.chunking.base import make_chunk, trimmed_span
from rag_experiments.records import Chunk, Document


class NoChunker:
    """Keeps every document whole: the chunk is the document text without its leading and
    trailing whitespace (``chunk.text == doc.text[chunk.start:chunk.end]``). A document with no
    text but whitespace gives no chunk."""

    @property
    def config_id(self) -> str:
        """``"none"``."""
        return "none"

    def split(self, doc: Document) -> list[Chunk]:
        """Return ``[]`` for a blank document, else one chunk at position 0."""
        start, end = trimmed_span(doc.text, 0, len(doc.text))
        if start == end:
            return []
        return [make_chunk(doc, 0, start, end)]
