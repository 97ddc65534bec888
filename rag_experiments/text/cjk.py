"""Overlapping bigrams of CJK text, as Lucene's ``CJKAnalyzer`` indexes languages written
without spaces (Chinese, Japanese, Korean).

Lucene's ``CJKBigramFilter`` (``lucene/analysis/common/.../cjk/CJKBigramFilter.java``) takes the
CJK tokens of ``StandardTokenizer`` (types ``<IDEOGRAPHIC>``, ``<HIRAGANA>``, ``<KATAKANA>``,
``<HANGUL>``) and, as long as each starts where the previous one ended, forms the bigrams of
adjacent characters: ``ABC`` → ``AB BC``. A CJK character with no CJK neighbour (the whole
run is one character, or it stands between spaces, punctuation or Latin letters) is emitted
alone (``outputUnigrams=false``, the analyzer's default). Every non-CJK token passes through.

Here a *run* is a maximal sequence of characters of :data:`CJK_CHARS` (Han, Hiragana, Katakana,
Hangul): a space, a punctuation mark (``。``, ``、``) or a Latin letter ends it, as an offset gap
or a non-CJK token ends Lucene's buffer. Not reproduced: ``CJKWidthFilter`` (full-width ASCII →
ASCII), and a Hangul syllable glued to Latin letters (Lucene types ``한국abc`` ``<ALPHANUM>`` and
does not bigram it; here ``한국`` is a run).
"""

from __future__ import annotations

import re

CJK_CHARS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana (with the prolonged sound mark ー)
    "\u3130-\u318f"  # Hangul Compatibility Jamo
    "\u31f0-\u31ff"  # Katakana Phonetic Extensions
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul Syllables
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uff66-\uff9f"  # Half-width Katakana
    "\U00020000-\U0003134f"  # CJK Unified Ideographs Extensions B–G
)
"""Character ranges bigrammed (the scripts of Lucene's ``CJKBigramFilter`` flags HAN | HIRAGANA |
KATAKANA | HANGUL)."""

_RUN = re.compile(f"[{CJK_CHARS}]+")


def has_cjk(text: str) -> bool:
    """True when ``text`` holds at least one character of :data:`CJK_CHARS`."""
    return _RUN.search(text) is not None


def bigrams(run: str) -> list[str]:
    """The tokens of one CJK run: its overlapping bigrams, or the run itself when it is one
    character (``"检索模型"`` → ``["检索", "索模", "模型"]``; ``"中"`` → ``["中"]``)."""
    if len(run) < 2:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def spaced_bigrams(text: str) -> str:
    """``text`` with every CJK run replaced by its :func:`bigrams` between spaces, so a
    word-character tokenizer (``\\w+``) then yields Lucene's CJK tokens and leaves every other
    token as it was: ``"BM25检索模型。"`` → ``"BM25 检索 索模 模型 。"``. A text without CJK
    characters is returned unchanged (the same object)."""
    if not has_cjk(text):
        return text
    return _RUN.sub(lambda m: " " + " ".join(bigrams(m.group())) + " ", text)
