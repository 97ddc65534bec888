"""Sentence boundaries: the one rule the semantic chunker, the refusal detector's first-sentence
rule and the fake model's sentence picker use.

A sentence ends after a run of sentence terminals (Unicode's ``Sentence_Terminal`` property,
UAX #29 STerm and ATerm: ``.`` ``!`` ``?`` and the terminals of other scripts, :data:`TERMINALS`)
and any closing quotes and brackets after them (UAX #29 Close: Unicode categories Pe and Pf,
plus ``"`` and ``'``):

- followed by white space or the end of the text, for every terminal (``3.5`` and ``e.g.x``
  are not ends);
- followed by anything, for the terminals of scripts written without spaces between
  sentences (:data:`UNSPACED_TERMINALS`: ``。！？｡．`` of Chinese and Japanese, the Myanmar and
  Ethiopic full stops), so ``第一句。第二句。`` is two sentences.

Abbreviations are not recognised (``Dr. Smith`` ends a sentence after ``Dr.``): the rule is
about where a text may be cut, and a cut after an abbreviation costs little.

Source: Unicode Standard Annex #29, *Unicode Text Segmentation*, section 5 (Sentence
Boundaries), rules SB8-SB11, simplified as above; terminals from ``PropList.txt``
(``Sentence_Terminal``), the characters in common use.
"""

from __future__ import annotations

import re

UNSPACED_TERMINALS = (
    "\u3002"  # 。 ideographic full stop
    "\uff01"  # ！ fullwidth exclamation mark
    "\uff1f"  # ？ fullwidth question mark
    "\uff61"  # ｡ halfwidth ideographic full stop
    "\uff0e"  # ． fullwidth full stop
    "\ufe52"  # ﹒ small full stop
    "\ufe56"  # ﹖ small question mark
    "\ufe57"  # ﹗ small exclamation mark
    "\u104b"  # ။ Myanmar section
    "\u1362"  # ። Ethiopic full stop
)
"""Terminals of scripts written without a space between sentences: they end a sentence
whatever follows."""

TERMINALS = (
    ".!?"
    "\u0589"  # ։ Armenian full stop
    "\u061f"  # ؟ Arabic question mark
    "\u06d4"  # ۔ Arabic full stop
    "\u0700\u0701\u0702"  # Syriac end of paragraph, supralinear and sublinear full stops
    "\u0964\u0965"  # । ॥ Devanagari danda, double danda
    "\u1367\u1368"  # ፧ ፨ Ethiopic question mark, paragraph separator
    "\u166e"  # ᙮ Canadian syllabics full stop
    "\u2024"  # ․ one dot leader
    "\u203c\u203d"  # ‼ ‽
    "\u2047\u2048\u2049"  # ⁇ ⁈ ⁉
    "\ua4ff"  # ꓿ Lisu punctuation full stop
    "\ua60e\ua60f"  # ꘎ ꘏ Vai full stop, question mark
    "\ua9c8\ua9c9" + UNSPACED_TERMINALS  # ꧈ ꧉ Javanese pada lingsa, pada lungsi
)
"""Every sentence terminal this module knows (a superset of :data:`UNSPACED_TERMINALS`)."""

CLOSERS = (
    "\"')]}"
    "\u2019\u201d\u00bb\u203a"  # ’ ” » ›
    "\u300d\u300f\u3011\u3015\u3009\u300b\uff09\uff3d\uff5d"  # 」』】〕〉》）］｝
)
"""Closing quotes and brackets that may follow a terminal inside the sentence."""

_T = re.escape(TERMINALS)
_U = re.escape(UNSPACED_TERMINALS)
_C = re.escape(CLOSERS)
_SENTENCE_END = re.compile(rf"[{_T}]*[{_U}][{_C}]*|[{_T}]+[{_C}]*(?=\s|$)")
"""A sentence end (terminals, then closers); its ``end()`` is where the next sentence may
start."""


def sentence_ends(text: str, start: int = 0, end: int | None = None) -> list[int]:
    """Offsets just after each sentence end in ``text[start:end]`` (see the module docs).

    Args:
        text: Any text.
        start: Where to start looking (offset into ``text``).
        end: Where to stop (exclusive; default ``len(text)``). A terminal right before
            ``end`` counts as an end.

    Returns:
        Increasing offsets into ``text``, each after the terminals and closers of one end.
    """
    stop = len(text) if end is None else end
    return [m.end() for m in _SENTENCE_END.finditer(text, start, stop)]


def split_sentences(text: str) -> list[str]:
    """``text`` cut at every sentence end, each piece stripped of surrounding white space;
    empty pieces are dropped.

    Args:
        text: Any text.

    Returns:
        The sentences in order (``[]`` for a blank text); a text without a terminal is one
        sentence.
    """
    pieces = []
    cut = 0
    for bound in [*sentence_ends(text), len(text)]:
        piece = text[cut:bound].strip()
        cut = bound
        if piece:
            pieces.append(piece)
    return pieces


def ends_sentence(text: str) -> bool:
    """True when ``text``, ignoring trailing white space, closing quotes and brackets, ends
    with a sentence terminal."""
    stripped = text.rstrip().rstrip(CLOSERS)
    return bool(stripped) and stripped[-1] in TERMINALS
