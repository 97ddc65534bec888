"""Token counts of one model call: a plain value shared by the model layer and the error
classes (a failed call's tokens travel on its :class:`~rag_experiments.errors.LLMError`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the model (0 when the server reports none).

    Attributes:
        prompt_tokens: Prompt tokens of the request.
        completion_tokens: Tokens generated.
        cached_prompt_tokens: Of ``prompt_tokens``, those the server says it did not compute
            again but took from its prompt (KV) cache: OpenAI's
            ``usage.prompt_tokens_details.cached_tokens`` (vLLM, llama.cpp's ``llama-server``)
            or llama.cpp's ``timings.cache_n``; 0 when the server does not say.
        reasoning_tokens: Of ``completion_tokens``, those spent reasoning: the server's
            ``usage.completion_tokens_details.reasoning_tokens``, else estimated from the
            reasoning text (:func:`~rag_experiments.llm.reasoning.reasoning_tokens`); 0
            without reasoning.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_prompt_tokens + other.cached_prompt_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )
