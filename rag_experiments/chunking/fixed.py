"""Fixed-size character windows with overlap (the classic baseline chunker)."""

from __future__ import annotations

from rag_experiments.chunking.base import check_sizes, make_chunk
from rag_experiments.records import Chunk, Document


class FixedChunker:
    """Windows of at most ``size`` characters; each window starts ``overlap`` characters
    before the previous one ends.

    Window ends: a window that does not reach the end of the text is shortened to end at a word
    boundary (a cut right before a whitespace character) when one exists in its last 20 %
    (``size // 5`` characters); otherwise it is cut at exactly ``size`` characters, even inside
    a word. Chunks are exact slices, ``chunk.text == doc.text[chunk.start:chunk.end]``, not
    stripped, so consecutive chunks overlap by exactly ``overlap`` characters
    (``next.start == previous.end - overlap``), every chunk has at most ``size`` characters,
    and the chunks together cover the whole text. A window holding only whitespace is not
    emitted (it cannot occur in normalised text).

    Args:
        size: Maximum chunk length in characters, ``>= 1``.
        overlap: Characters shared by consecutive chunks, ``0 <= overlap < size``.

    Raises:
        ConfigError: ``size`` or ``overlap`` is out of range or not an integer.
    """

    def __init__(self, size: int = 512, overlap: int = 64) -> None:
        check_sizes(size, "overlap", overlap, "lower the overlap or raise the size")
        self.size = size
        self.overlap = overlap

    @property
    def config_id(self) -> str:
        """``f"fixed-size{size}-overlap{overlap}"``."""
        return f"fixed-size{self.size}-overlap{self.overlap}"

    def split(self, doc: Document) -> list[Chunk]:
        """Cut ``doc.text`` into overlapping windows (see the class docstring).

        Args:
            doc: The document; an empty or blank text gives ``[]``.

        Returns:
            Chunks in text order, positions ``0..n-1``.
        """
        text = doc.text
        n = len(text)
        if not text.strip():
            return []
        chunks: list[Chunk] = []
        pos = 0
        while True:
            end = min(pos + self.size, n)
            if end < n:
                end = self._word_boundary(text, pos, end)
            if text[pos:end].strip():
                chunks.append(make_chunk(doc, len(chunks), pos, end))
            if end >= n:
                return chunks
            pos = end - self.overlap

    def _word_boundary(self, text: str, pos: int, end: int) -> int:
        """Latest cut ``b`` in the window's last 20 % with ``text[b]`` whitespace, else ``end``.

        ``b`` stays above ``pos + overlap`` so the next window starts after ``pos``.
        """
        lowest = max(end - self.size // 5, pos + self.overlap + 1)
        for b in range(end, lowest - 1, -1):
            if text[b].isspace():
                return b
        return end
