"""The chat-model protocol every LLM-backed part goes through (generator, judge, dataset
generator), and the record of one completion."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

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

    What else a model declares (defaults in :class:`ChatModelBase`):

    - ``provider``, ``model``: identity for messages and the response cache.
    - ``context_window``: tokens it reads at most, None when unknown; with
      :meth:`prompt_budget` and :meth:`count_prompt_tokens` the baseline fits its contexts.
    - ``cacheable``: False keeps it out of the response cache (the free fake).

    Declared on the class, read from a config node before anything is built
    (:mod:`rag_experiments.build`):

    - ``caveat``: a note every run or generation using the model carries (the bundled
      small model's "not trustworthy for decisions"); ``{what}`` in it is replaced by what
      the model produced (``Answers``, ``Judgements`` …) and ``{fix}`` by the overrides that
      replace it (:func:`rag_experiments.build.run_caveat`); empty for none.
    - ``form_fields``: the config keys the review page's generate form sets for it.
    - ``scripted``: answers come from a script, not a model (the review page's dry run).
    - :meth:`check_settings`: the settings a user must fill in are there.
    """

    max_concurrency: int
    provider: str
    model: str
    cacheable: bool
    caveat: ClassVar[str]
    form_fields: ClassVar[tuple[str, ...]]
    scripted: ClassVar[bool]

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any], role: str) -> None:
        """Refuse a config node (``settings``) that leaves a required value blank, before
        the model is built (no request is made).

        Args:
            settings: The model's config node (``cfg.llm``, ``cfg.judge``).
            role: ``generator``, ``judge`` … (named in the message).

        Raises:
            SettingMissingError: A required value (model name, server URL) is blank.
            ConfigError: Another setting cannot be used (an API-key variable that is unset).
        """
        ...

    @property
    def context_window(self) -> int | None: ...

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens of ``messages`` (the model's tokenizer, or an estimate)."""
        ...

    def prompt_budget(self, **options: Any) -> int | None:
        """Tokens a prompt may use: context window minus the completion's ``max_tokens``;
        None when the window is unknown."""
        ...

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


class ChatModelBase:
    """Defaults of :class:`ChatModel`'s declarations; a provider states only what differs.

    A model without a known window (``context_window`` None) has no prompt budget; one with
    a window also sets ``max_tokens`` (its default completion limit).
    """

    provider: str = "unknown"
    model: str = ""
    max_concurrency: int = 1
    cacheable: bool = True
    context_window: int | None = None
    max_tokens: int
    caveat: ClassVar[str] = ""
    form_fields: ClassVar[tuple[str, ...]] = ()
    scripted: ClassVar[bool] = False

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any], role: str) -> None:
        """Nothing to fill in (see :meth:`ChatModel.check_settings`)."""

    def check(self) -> None:
        """Always ready (nothing to reach)."""

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """Estimated prompt tokens (:func:`~rag_experiments.llm.context.estimate_tokens`)."""
        from rag_experiments.llm.context import estimate_tokens

        return estimate_tokens(messages)

    def prompt_budget(self, **options: Any) -> int | None:
        """Tokens a prompt may use: ``context_window`` minus the completion's ``max_tokens``
        (the call's, else the model's), at least 0; None when the window is unknown."""
        window = self.context_window
        if window is None:
            return None
        return max(0, window - int(options.get("max_tokens", self.max_tokens)))
