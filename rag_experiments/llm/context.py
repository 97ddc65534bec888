"""Context-window arithmetic: estimate a prompt's tokens before the call, and trim retrieved
contexts to fit (the baseline target's ``truncate_contexts`` option)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_experiments.llm.messages import Message

CHARS_PER_TOKEN = 4
"""Rule of thumb for English text with BPE tokenizers of the GPT/Llama families: one token is
about 4 characters (OpenAI, "What are tokens and how to count them", help center). It
underestimates code and most non-English text, so servers' reported counts are checked too."""

TOKENS_PER_MESSAGE = 4
"""Chat-template overhead per message (role markers, separators); OpenAI's cookbook counts 3-4
("How to count tokens with tiktoken")."""

TOKENS_REPLY_PRIMING = 3
"""Tokens the template adds to start the assistant's reply (same source)."""


def estimate_tokens(messages: Sequence[Message], count: Callable[[str], int] | None = None) -> int:
    """A chat prompt's size in tokens: each content's tokens plus the chat template's
    overhead, ``sum over messages of (count(content) + 4) + 3``.

    Args:
        messages: Chat messages.
        count: Tokens of one text (a model's tokenizer); None = the estimate without one,
            ``ceil(len(text) / 4)`` (see :data:`CHARS_PER_TOKEN`).

    Returns:
        Prompt tokens (>= 3).
    """
    count = count or _estimate_text_tokens
    return TOKENS_REPLY_PRIMING + sum(
        TOKENS_PER_MESSAGE + count(m.get("content") or "") for m in messages
    )


def _estimate_text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class FitReport:
    """What :func:`fit_contexts` removed.

    Attributes:
        dropped: Contexts removed from the end of the ranking.
        chars_cut: Characters cut from the end of the last kept context.
        prompt_tokens: The final prompt's size in tokens (by the model's counter).
        budget: The token budget the prompt had to fit.
    """

    dropped: int = 0
    chars_cut: int = 0
    prompt_tokens: int = 0
    budget: int = 0

    @property
    def trimmed(self) -> bool:
        """True when anything was removed."""
        return self.dropped > 0 or self.chars_cut > 0


def fit_contexts(
    contexts: Sequence[str],
    build: Callable[[list[str]], list[Message]],
    count: Callable[[list[Message]], int],
    budget: int,
) -> tuple[list[str], FitReport]:
    """Trim ranked contexts until the prompt built from them fits ``budget`` tokens.

    Lowest-ranked contexts go first (whole); when only the top context is left and the prompt
    is still too long, that context is cut from its end. If even the prompt with an empty
    context does not fit, the result still holds an empty top context and the caller's call
    fails with a context-overflow error as it should.

    Args:
        contexts: Retrieved contexts, best first.
        build: Makes the chat messages from a list of contexts.
        count: Counts a prompt's tokens (the model's tokenizer or :func:`estimate_tokens`).
        budget: Tokens the prompt may use (context window minus the completion's
            ``max_tokens``).

    Returns:
        ``(contexts that fit, report)``.
    """
    kept = list(contexts)
    tokens = count(build(kept))
    if tokens <= budget:
        return kept, FitReport(prompt_tokens=tokens, budget=budget)
    dropped = 0
    while len(kept) > 1 and tokens > budget:
        kept.pop()
        dropped += 1
        tokens = count(build(kept))
    chars_cut = 0
    if tokens > budget and kept:
        top = kept[0]
        lo, hi = 0, len(top)  # binary search of the longest prefix that fits
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(build([top[:mid]])) <= budget:
                lo = mid
            else:
                hi = mid - 1
        chars_cut = len(top) - lo
        kept = [top[:lo]]
        tokens = count(build(kept))
    return kept, FitReport(dropped, chars_cut, tokens, budget)
