"""Texts as the word-overlap matching rules see them, shared by the chunk-level context match
(:mod:`rag_experiments.metrics.context_match`) and the HTTP target's document matcher
(:mod:`rag_experiments.targets.doc_matcher`), so both compare the same words.

A text becomes its word tokens (:func:`~rag_experiments.text.normalize.word_tokens`: Unicode
NFKC, case-folded, ``\\w+``), kept twice: as a set (for token-share tests) and as one
space-padded string (for whole-word substring tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from rag_experiments.errors import ConfigError
from rag_experiments.text.normalize import word_tokens


@dataclass(frozen=True)
class NormalisedText:
    """A text as the matching rules see it.

    Attributes:
        tokens: Distinct word tokens.
        padded: Tokens in order, joined by single spaces, with one space on each side (so that
            substring tests match whole words only).
    """

    tokens: frozenset[str]
    padded: str

    @classmethod
    def of(cls, text: str) -> NormalisedText:
        """Normalise ``text`` (NFKC, case-folded, ``\\w+`` tokens)."""
        words = word_tokens(text)
        return cls(frozenset(words), f" {' '.join(words)} ")

    @property
    def empty(self) -> bool:
        """True when the text has no word token."""
        return not self.tokens


def check_overlap(
    min_overlap: float,
    key: str = "min_overlap",
    meaning: str = "share of a reference context's distinct words that a retrieved context "
    "must hold",
) -> float:
    """``min_overlap`` as a float, checked to lie in (0, 1].

    Args:
        min_overlap: The value to check.
        key: The config key named in the message.
        meaning: What the share is, for the message.

    Raises:
        ConfigError: The value is outside (0, 1].
    """
    if not 0.0 < min_overlap <= 1.0:
        raise ConfigError(f"{key} must be in (0, 1] ({meaning}), got {min_overlap}")
    return float(min_overlap)
