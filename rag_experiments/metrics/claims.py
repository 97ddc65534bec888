"""Claims as the claim-based metrics count them: a claim the judge lists more than once is one
claim.

``faithfulness`` (supported claims / claims) and ``context_recall`` (attributable reference
claims / reference claims) divide by the number of claims. A judge that lists the same claim
six times (a small model looping, or an answer that repeats one sentence) would otherwise
weigh that claim six times, and an answer that repeats one supported sentence would look more
faithful than one that states it once. So claims are first made unique:

* two claims are the same when their **normalised text** is equal: the word tokens of
  :func:`~rag_experiments.text.normalize.word_tokens` (Unicode NFKC, case-folded, runs of
  ``\\w``) joined by one space, so case, punctuation and spacing do not matter
  ("Form AR-1 is needed." = "form AR 1 is needed");
* the unique claim keeps the text and the context number of its **first** occurrence (the
  judge's first verdict on it), and counts its occurrences in ``repeats``;
* a claim with no word (only punctuation) is kept as its own claim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rag_experiments.text.normalize import word_tokens


class JudgedClaim(Protocol):
    """A claim as the judge returns it: its text and the number of the context that states it
    (0 = none)."""

    claim: str
    context: int


@dataclass(frozen=True)
class UniqueClaim:
    """One distinct claim.

    Attributes:
        claim: Text of its first occurrence.
        context: Context number of its first occurrence (0 = no context states it).
        repeats: How many times the judge listed it (≥ 1).
    """

    claim: str
    context: int
    repeats: int = 1

    @property
    def supported(self) -> bool:
        """True when a context states it (``context > 0``)."""
        return self.context > 0


def claim_key(text: str) -> str:
    """The normalised text that identifies a claim (module docstring); the stripped text
    itself when it has no word."""
    return " ".join(word_tokens(text)) or text.strip()


def unique_claims(claims: Sequence[JudgedClaim]) -> list[UniqueClaim]:
    """The distinct claims of a judge's list, in first-seen order (rules in the module
    docstring).

    Args:
        claims: The judge's claims, each with ``claim`` (text) and ``context`` (int ≥ 0).

    Returns:
        One :class:`UniqueClaim` per distinct normalised text; empty for no claims.
    """
    first: dict[str, UniqueClaim] = {}
    for c in claims:
        key = claim_key(c.claim)
        seen = first.get(key)
        first[key] = (
            UniqueClaim(c.claim, int(c.context))
            if seen is None
            else UniqueClaim(seen.claim, seen.context, seen.repeats + 1)
        )
    return list(first.values())
