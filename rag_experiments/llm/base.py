"""The chat-model protocol every LLM-backed part goes through (generator, judge, dataset
generator), and the record of one completion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

Message = dict[str, str]
"""``{"role": "system" | "user" | "assistant", "content": str}``."""


@dataclass(frozen=True)
class Usage:
    """Token counts reported by the model (0 when the server reports none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Completion:
    """One model answer.

    Attributes:
        text: Raw generated text.
        parsed: The validated pydantic instance when a ``schema`` was given, else None.
        usage: Token counts.
        latency_ms: Wall time of the call in milliseconds (0 for a cache hit).
        finish_reason: ``stop``, ``length`` (cut by the token limit) or the server's word.
        cached: True when served from the response cache (no model call made).
        model: Model id as reported/configured.
    """

    text: str
    parsed: BaseModel | None = None
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    finish_reason: str = "stop"
    cached: bool = False
    model: str = ""


@runtime_checkable
class ChatModel(Protocol):
    """A local chat model.

    ``complete`` sends ``messages``; with ``schema`` (a pydantic model class) the model is
    constrained or asked to answer JSON of that shape, and ``Completion.parsed`` holds the
    validated instance. Failures raise :class:`~rag_experiments.errors.LLMError` subclasses.

    ``max_concurrency`` declares how many calls the model takes at once (1 for the embedded
    model, whose calls are serialised; the configured bound for a server); schedulers size
    their pools by it.
    """

    max_concurrency: int

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion: ...

    def describe(self) -> dict[str, str]:
        """Identity for tags and cache keys: provider, model, digest, base_url, options."""
        ...

    def check(self) -> None:
        """Make sure the model can be used now, before a job answers anything: its server
        answers, it has the model, its context window is known (or said to be unknown).

        Quick: a request or two with a short limit
        (:data:`~rag_experiments.llm.transport.CHECK_TIMEOUT_S`), a refused connection is
        not retried.

        Raises:
            LLMError: ``unreachable``, ``timeout``, ``model_not_found`` or ``http_error``; the
                message names the fix.
            ConfigError: The model cannot be loaded (a missing file or package).
        """
        ...
