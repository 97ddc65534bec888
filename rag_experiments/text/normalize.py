"""Text normalisation applied to every extracted document.

The rules, in the order they run (the order matters for idempotence:
``normalize_text(normalize_text(x)) == normalize_text(x)`` for every string ``x``):

1. Line breaks: ``\\r\\n``, ``\\r``, vertical tab, form feed, NEL (U+0085) and the Unicode
   line/paragraph separators (U+2028, U+2029) become ``\\n``.
2. Invisible characters are removed: C0/C1 control characters (NUL included) except ``\\n`` and
   ``\\t``, zero-width space (U+200B), byte-order mark (U+FEFF), and soft hyphens (U+00AD).
   A soft hyphen right before a line break is first turned into ``-`` so that rule 6 can
   rejoin the word.
3. Unicode NFKC: ligatures ("ﬁ" → "fi"), full-width and compatibility forms, non-breaking and
   other Unicode spaces → ASCII space.
4. Every run of horizontal whitespace (spaces, tabs, other non-newline whitespace) becomes one
   space.
5. Each line is stripped of leading and trailing spaces (indentation is not kept).
6. Words hyphenated across a line break are rejoined: a letter, then ``-`` (or U+2010),
   then a line break, then a **lowercase** letter → the hyphen and the break are removed
   ("manage-\\nment" → "management"). A break followed by an uppercase letter, a digit or
   anything else is kept ("Wi-\\nFi", "COVID-\\n19" stay as they are), and hyphens inside a
   line are never touched ("follow-up"). The rule cannot tell a line-wrapped compound from a
   hyphenated word: "e-\\nmail" → "email" and "self-\\nservice" → "selfservice".
7. Runs of blank lines collapse to a single blank line (at most ``\\n\\n``).
8. Leading and trailing whitespace of the whole text is removed.
"""

from __future__ import annotations

import re
import unicodedata

_NEWLINES = re.compile(r"\r\n|[\r\x0b\x0c\x85\u2028\u2029]")
_SOFT_HYPHEN_AT_BREAK = re.compile(r"\u00ad[^\S\n]*\n")
# Cc (C0 and C1 controls) except \t (\x09) and \n (\x0a), plus invisible format characters.
_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b\ufeff]")
_HSPACE = re.compile(r"[^\S\n]+")
_SPACE_AROUND_NEWLINE = re.compile(r" ?\n ?")
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])[-\u2010]\n(?=[^\W\d_])")
_BLANK_RUNS = re.compile(r"\n{3,}")
_WORD = re.compile(r"\w+")


def _join_hyphenated(match: re.Match[str]) -> str:
    """Drop the hyphen and line break when the next character is a lowercase letter."""
    following = match.string[match.end()]
    return "" if following.islower() else match.group(0)


def normalize_text(text: str) -> str:
    """Normalise extracted text (see the module docstring for the exact rules).

    Args:
        text: Raw text from an extractor (any string, possibly with NULs, ``\\r\\n``,
            ligatures, hyphenated line breaks).

    Returns:
        The normalised text: NFKC, no control characters but ``\\n``, single spaces, no
        leading/trailing spaces on any line, at most one blank line in a row, no leading or
        trailing whitespace. Applying the function again returns the same string.
    """
    text = _NEWLINES.sub("\n", text)
    text = _SOFT_HYPHEN_AT_BREAK.sub("-\n", text)
    text = _INVISIBLE.sub("", text)
    text = unicodedata.normalize("NFKC", text)
    text = _HSPACE.sub(" ", text)
    text = _SPACE_AROUND_NEWLINE.sub("\n", text)
    text = _HYPHEN_BREAK.sub(_join_hyphenated, text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip()


def word_tokens(text: str) -> list[str]:
    """The word tokens of ``text`` as the matching rules compare them: Unicode NFKC,
    case-folded, then runs of ``\\w`` (Python ``re``, Unicode-aware), in order.

    Used by the chunk-level context match, the HTTP target's document matcher, keyword
    faithfulness and the dataset generator's grounding filters.
    """
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
