"""Helpers shared by the chunkers: building a :class:`~rag_experiments.records.Chunk` from a
span of a document."""

from __future__ import annotations

from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.records import Chunk, Document


def make_chunk(doc: Document, position: int, start: int, end: int) -> Chunk:
    """Build the chunk ``doc.text[start:end]``.

    Args:
        doc: The parent document.
        position: 0-based index of the chunk within the document.
        start: Start offset in ``doc.text`` (inclusive), ``0 <= start < end``.
        end: End offset in ``doc.text`` (exclusive), ``end <= len(doc.text)``.

    Returns:
        A chunk with id ``f"{doc.id}#{position}"``, ``text == doc.text[start:end]`` and
        metadata ``title`` (the document title), ``page`` (1-based page of ``start``, only when
        the document has ``page_starts``) and ``source`` (when the document has one).
    """
    metadata: dict[str, Any] = {"title": doc.title}
    page = doc.page_at(start)
    if page is not None:
        metadata["page"] = page
    if "source" in doc.metadata:
        metadata["source"] = doc.metadata["source"]
    return Chunk(
        id=f"{doc.id}#{position}",
        doc_id=doc.id,
        text=doc.text[start:end],
        position=position,
        start=start,
        end=end,
        metadata=metadata,
    )


def trimmed_span(text: str, start: int, end: int) -> tuple[int, int]:
    """Shrink ``[start, end)`` so that ``text[start:end]`` has no leading or trailing whitespace.

    Returns:
        The new ``(start, end)``; ``start == end`` when the span holds only whitespace.
    """
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def check_sizes(size: int, name: str, value: int, fix: str) -> None:
    """Check a sized chunker's arguments: ``size`` ≥ 1 and ``0 <= value < size``, both
    integers (``name`` is the second argument's config key: ``overlap``, ``min_size``).

    Raises:
        ConfigError: Either is not an integer or out of range; ``fix`` says what to change.
    """
    for key, given in (("size", size), (name, value)):
        if isinstance(given, bool) or not isinstance(given, int):
            raise ConfigError(f"chunker.{key} must be an integer, got {given!r}.")
    if size < 1:
        raise ConfigError(f"chunker.size must be >= 1, got {size}.")
    if not 0 <= value < size:
        raise ConfigError(
            f"chunker.{name} must satisfy 0 <= {name} < size, got {name}={value} "
            f"with size={size}; {fix}."
        )
