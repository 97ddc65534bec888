"""Paragraph- and heading-aware chunking.

The text is cut into *units* that are never split further, then units are packed greedily
into chunks.

Units, from coarse to fine (a piece longer than ``size`` goes to the next level):

1. **Segments**: text separated by blank lines, further cut before every heading line inside
   a block (so a section "heading + its paragraphs" is one unit when it fits); a heading
   line followed by a blank line stays with the block after it.
2. **Lines** (single ``\\n``): this is what splits DOCX text, which has one paragraph per line
   and no blank lines, and PDF text, whose pages are single blocks.
3. **Sentences**: a line is cut at every sentence end of
   :func:`rag_experiments.text.sentences.sentence_ends` (``.``, ``!``, ``?`` and the other
   Unicode sentence terminals, plus closing quotes/brackets, followed by whitespace; ``。！？``
   of Chinese and Japanese whatever follows).
4. **Words** (runs of non-whitespace), and a word longer than ``size`` is cut every ``size``
   characters.

Heading lines (rule):

- a Markdown heading: ``#`` to ``######`` then a space (the DOCX extractor writes ``Heading N``
  paragraphs this way); or
- a *short title line*: at most 80 characters, starts with an uppercase letter or a digit,
  holds two letters in a row, does not end with ``.``, ``,``, ``;``, ``:`` or ``!`` (``?`` is
  allowed: FAQ questions are titles), is not a table row (no ``" | "``), and the next
  non-empty line is longer, and it comes first in the text, after a blank line, after a line
  ending a sentence (:func:`~rag_experiments.text.sentences.ends_sentence`) or after another
  heading line. The last condition
  keeps the short line of a wrapped PDF paragraph from counting as a heading.

Packing: units are added to the current chunk while the chunk (from its first unit's start
to its last unit's end, separators included) stays within ``size`` characters. Then:

- a heading unit starts a new chunk when the current one already has ``min_size`` characters;
- when a unit does not fit, the chunk is closed at the latest *good break* that keeps at least
  ``min_size`` characters in it (after a unit that ends a sentence, a paragraph, a section or a
  table row), and the units after that break move to the next chunk; a heading at the end of
  a closed chunk also moves to the next chunk when it fits there;
- the last chunk of a document, when shorter than ``min_size``, is merged into the previous
  chunk if the merged chunk has at most ``1.2 * size`` characters.

So every chunk has at most ``size`` characters, except the merged last chunk
(``<= 1.2 * size``). Chunks are exact, stripped slices (``chunk.text ==
doc.text[chunk.start:chunk.end]``, no leading or trailing whitespace), do not overlap, and
every non-whitespace character of the document lies in exactly one chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag_experiments.chunking.base import check_sizes, make_chunk, trimmed_span
from rag_experiments.records import Chunk, Document
from rag_experiments.text.sentences import ends_sentence, sentence_ends

HEADING_MAX_CHARS = 80
"""Longest line the short-title-line rule accepts as a heading."""

_LINE = re.compile(r"[^\n]+")
_MD_HEADING = re.compile(r"#{1,6}(?:[ \t]|$)")
_WORD = re.compile(r"\S+")
_LETTERS = re.compile(r"[^\W\d_]{2}")
_NO_TITLE_END = ".,;:!"


@dataclass(frozen=True)
class _Line:
    start: int
    end: int
    blank_before: bool
    heading: bool = False


@dataclass(frozen=True)
class _Unit:
    """An unsplittable span; ``good_break`` means a chunk may well end after it."""

    start: int
    end: int
    heading: bool = False
    good_break: bool = False


class SemanticChunker:
    """Chunks along blank lines, headings, lines and sentences (see the module docstring).

    Args:
        size: Maximum chunk length in characters, ``>= 1``.
        min_size: Length a chunk needs before a heading may start a new one, and below which
            the last chunk is merged back; ``0 <= min_size < size``.

    Raises:
        ConfigError: ``size`` or ``min_size`` is out of range or not an integer.
    """

    def __init__(self, size: int = 800, min_size: int = 200) -> None:
        check_sizes(size, "min_size", min_size, "lower min_size or raise size")
        self.size = size
        self.min_size = min_size

    @property
    def config_id(self) -> str:
        """``f"semantic-size{size}-min{min_size}"``."""
        return f"semantic-size{self.size}-min{self.min_size}"

    def split(self, doc: Document) -> list[Chunk]:
        """Split ``doc.text`` into chunks (see the module docstring).

        Args:
            doc: The document; an empty or blank text gives ``[]``.

        Returns:
            Chunks in text order, positions ``0..n-1``.
        """
        units = self._units(doc.text)
        spans = self._merge_tail(self._pack(units))
        return [make_chunk(doc, i, start, end) for i, (start, end) in enumerate(spans)]

    # -- units -------------------------------------------------------------------------------

    def _units(self, text: str) -> list[_Unit]:
        lines = _mark_headings(text, _lines(text))
        units: list[_Unit] = []
        segment: list[_Line] = []
        for i, line in enumerate(lines):
            starts_block = (line.blank_before and not segment[-1].heading) if segment else True
            if segment and (starts_block or line.heading):
                self._segment_units(text, segment, units)
                segment = []
            segment.append(line)
            if i == len(lines) - 1:
                self._segment_units(text, segment, units)
        return units

    def _segment_units(self, text: str, segment: list[_Line], out: list[_Unit]) -> None:
        """One unit for a segment that fits, else its lines (split further when too long)."""
        start, end = segment[0].start, segment[-1].end
        if end - start <= self.size:
            out.append(_Unit(start, end, heading=segment[0].heading, good_break=True))
            return
        for i, line in enumerate(segment):
            last = i == len(segment) - 1
            good = (
                last
                or _ends_sentence(text, line.start, line.end)
                or " | " in text[line.start : line.end]
            )
            if line.end - line.start <= self.size:
                out.append(_Unit(line.start, line.end, heading=line.heading, good_break=good))
                continue
            pieces = self._long_line_units(text, line.start, line.end)
            out.extend(pieces[:-1])
            tail = pieces[-1]
            out.append(_Unit(tail.start, tail.end, good_break=good or tail.good_break))

    def _long_line_units(self, text: str, start: int, end: int) -> list[_Unit]:
        """Sentences of a line longer than ``size``; words, then hard cuts, for long ones."""
        units: list[_Unit] = []
        cut = start
        bounds = [*sentence_ends(text, start, end), end]
        for bound in bounds:
            s, e = trimmed_span(text, cut, bound)
            cut = bound
            if s == e:
                continue
            if e - s <= self.size:
                units.append(_Unit(s, e, good_break=_ends_sentence(text, s, e)))
                continue
            for word in _WORD.finditer(text, s, e):
                for w in range(word.start(), word.end(), self.size):
                    units.append(_Unit(w, min(w + self.size, word.end())))
        return units

    # -- packing -----------------------------------------------------------------------------

    def _pack(self, units: list[_Unit]) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        a = b = 0  # the current chunk is units[a:b]
        while b < len(units):
            unit = units[b]
            if a == b:
                b += 1
                continue
            current = units[b - 1].end - units[a].start
            if unit.heading and current >= self.min_size:
                spans.append((units[a].start, units[b - 1].end))
                a = b
            elif unit.end - units[a].start <= self.size:
                b += 1
            else:
                k = self._close_at(units, a, b)
                spans.append((units[a].start, units[k - 1].end))
                a = k
        if a < b:
            spans.append((units[a].start, units[b - 1].end))
        return spans

    def _close_at(self, units: list[_Unit], a: int, b: int) -> int:
        """Where to close ``units[a:b]`` when ``units[b]`` does not fit: index ``k`` in
        ``(a, b]``; ``units[k:b]`` move to the next chunk."""
        last = units[b - 1]
        if b - 1 > a and last.heading and units[b].end - last.start <= self.size:
            return b - 1
        for k in range(b, a, -1):
            if units[k - 1].end - units[a].start < self.min_size:
                break
            if units[k - 1].good_break:
                return k
        return b

    def _merge_tail(self, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if len(spans) >= 2:
            (prev_start, _), (last_start, last_end) = spans[-2], spans[-1]
            if last_end - last_start < self.min_size and last_end - prev_start <= 1.2 * self.size:
                spans = spans[:-2] + [(prev_start, last_end)]
        return spans


def _lines(text: str) -> list[_Line]:
    """Non-blank lines as stripped spans, each flagged when a blank line (or the text start)
    precedes it."""
    lines: list[_Line] = []
    previous_end = 0
    for match in _LINE.finditer(text):
        start, end = trimmed_span(text, match.start(), match.end())
        if start == end:
            continue
        blank_before = not lines or text.count("\n", previous_end, start) >= 2
        lines.append(_Line(start, end, blank_before))
        previous_end = end
    return lines


def _mark_headings(text: str, lines: list[_Line]) -> list[_Line]:
    """Return ``lines`` with :attr:`_Line.heading` set by the module's heading rule."""
    marked: list[_Line] = []
    for i, line in enumerate(lines):
        body = text[line.start : line.end]
        heading = bool(_MD_HEADING.match(body))
        if not heading and i + 1 < len(lines):
            after_break = (
                i == 0
                or line.blank_before
                or marked[i - 1].heading
                or _ends_sentence(text, lines[i - 1].start, lines[i - 1].end)
            )
            following = lines[i + 1]
            heading = (
                after_break
                and len(body) <= HEADING_MAX_CHARS
                and (body[0].isupper() or body[0].isdigit())
                and body[-1] not in _NO_TITLE_END
                and " | " not in body
                and _LETTERS.search(body) is not None
                and following.end - following.start > len(body)
            )
        marked.append(_Line(line.start, line.end, line.blank_before, heading))
    return marked


def _ends_sentence(text: str, start: int, end: int) -> bool:
    """True when ``text[start:end]`` ends a sentence
    (:func:`~rag_experiments.text.sentences.ends_sentence`)."""
    return ends_sentence(text[start:end])
