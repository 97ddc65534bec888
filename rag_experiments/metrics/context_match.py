"""Which reference context a retrieved context covers: the matching rule of chunk-level metrics.

Chunk-level retrieval metrics (``chunk.nDCG@10``, ``chunk.R@5`` …, see
:class:`~rag_experiments.metrics.retrieval.RetrievalMetrics`) need to know whether a retrieved
context holds one of a sample's ``reference_contexts``. Chunk ids cannot tell (they change with
the chunker, and black-box endpoints return only texts), so the match is made on the texts:

1. **Normalisation.** Both texts are Unicode NFKC-normalised, case-folded and split into word
   tokens ``\\w+`` (Python ``re``, Unicode-aware): punctuation, whitespace, line breaks and
   case do not matter. ``"Form AR-1, within 2 days."`` → ``form ar 1 within 2 days``.
2. **Coverage.** A retrieved context *covers* reference context ``j`` when

   - at least ``min_overlap`` of ``j``'s distinct tokens occur in the context (token-set
     containment: ``|T(ref_j) ∩ T(ctx)| / |T(ref_j)| ≥ min_overlap``), or
   - one normalised text (its tokens joined by single spaces) contains the other as a run of
     whole words: the context holds the whole reference, or the context is a piece of the
     reference (a reference split across two chunks is covered by each chunk that is a
     verbatim slice of it, whatever its length).

   A context or reference with no word token at all covers / is covered by nothing.
3. **Assignment.** Retrieved contexts are taken in rank order; a context that covers several
   references is assigned to the first one, in reference order, that no better-ranked context
   has been assigned yet. A context whose covered references are all found already is assigned
   nothing: each reference is found once, like a relevant document in trec_eval.

Both rules are generous, on purpose (a chunk boundary must not hide a found passage), and
should be read with that in mind:

- every word counts, stop words included, so a short reference made of common words ("must be
  approved in writing by the Head of IT") can share half its words with an unrelated
  context. On the bundled sample (fixed 512/64 chunks), 0.5 — the default — lets many
  references match chunks of other documents; 0.7 separates them from the right chunks
  (one stray match, none missed). Raise ``min_overlap`` for a stricter match;
- a retrieved context that is a verbatim piece of a reference (even a heading) covers it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from rag_experiments.text.overlap import NormalisedText, check_overlap

__all__ = [
    "check_overlap",
    "context_matches",
    "has_words",
    "match_contexts",
    "normalised_texts",
]

normalised_texts = functools.lru_cache(maxsize=4096)(NormalisedText.of)
""":meth:`NormalisedText.of`, memoised: a run matches the same chunk and reference texts for many
questions, and the result is an immutable function of the text alone. A caller that matches a
whole run clears it after (:func:`~rag_experiments.common.memo.forgetting`)."""


def _covers(reference: NormalisedText, context: NormalisedText, min_overlap: float) -> bool:
    if reference.empty or context.empty:
        return False
    shared = len(reference.tokens & context.tokens)
    if shared / len(reference.tokens) >= min_overlap:
        return True
    return reference.padded in context.padded or context.padded in reference.padded


def context_matches(reference: str, context: str, min_overlap: float = 0.7) -> bool:
    """Whether a retrieved context covers a reference context (rule in the module docstring).

    Args:
        reference: One of the sample's reference contexts.
        context: One retrieved context text.
        min_overlap: Share in (0, 1] of the reference's distinct word tokens that the context
            must hold.

    Returns:
        True when the token share reaches ``min_overlap`` or one normalised text contains the
        other; False when either text has no word token.

    Raises:
        ConfigError: ``min_overlap`` outside (0, 1].
    """
    min_overlap = check_overlap(min_overlap)
    return _covers(normalised_texts(reference), normalised_texts(context), min_overlap)


def match_contexts(
    references: Sequence[str], contexts: Sequence[str], min_overlap: float = 0.7
) -> list[int | None]:
    """Assign each retrieved context to the reference context it covers.

    Args:
        references: The sample's ``reference_contexts``, in their order.
        contexts: Retrieved context texts, best first.
        min_overlap: As in :func:`context_matches`.

    Returns:
        One entry per retrieved context (same order): the index ``j`` into ``references`` of
        the first reference it covers that no better-ranked context was assigned, or None.
        Every index appears at most once.

    Raises:
        ConfigError: ``min_overlap`` outside (0, 1].
    """
    min_overlap = check_overlap(min_overlap)
    refs = [normalised_texts(r) for r in references]
    found: set[int] = set()
    out: list[int | None] = []
    for text in contexts:
        ctx = normalised_texts(text)
        hit = next(
            (j for j, ref in enumerate(refs) if j not in found and _covers(ref, ctx, min_overlap)),
            None,
        )
        if hit is not None:
            found.add(hit)
        out.append(hit)
    return out


def has_words(text: str) -> bool:
    """Whether ``text`` holds at least one word token (a reference without one is unmatchable).

    Args:
        text: Any text.

    Returns:
        True when NFKC + casefold + ``\\w+`` finds a token.
    """
    return not normalised_texts(text).empty
