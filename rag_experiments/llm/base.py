"""The chat-model protocol every LLM-backed part goes through (generator, judge, dataset
generator), and the record of one completion."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel

from rag_experiments.common.memo import memo
from rag_experiments.common.usage import Usage
from rag_experiments.llm.messages import Message

__all__ = [
    "LANE",
    "ChatModel",
    "RepeatCall",
    "RepeatScope",
    "ChatModelBase",
    "Completion",
    "Message",
    "Usage",
    "schema_json",
]

LANE: ContextVar[int | None] = ContextVar("rag_experiments_llm_lane", default=None)
"""The scheduling lane (0 .. slots-1) of the calls made in this context, set by a scheduler
that keeps one question's calls on one lane; a model with ``slot_affinity`` sends it to the
server as the slot to use (``id_slot``). None = no lane."""


@dataclass(frozen=True)
class RepeatCall:
    """The repeat a judge call belongs to (``judge.repeats``, :mod:`rag_experiments.metrics.
    repeats`).

    Attributes:
        index: Repeat index, ``1 .. repeats - 1`` (repeat 0 enters no :class:`RepeatScope`).
        options: Call options this repeat varies (``{"seed": base + index}``, a
            ``temperature``); they override the caller's options.
    """

    index: int
    options: Mapping[str, Any] = field(default_factory=dict)


class RepeatScope:
    """Which judge repeat the calls made in the current context belong to (``judge.repeats``).

    One per job, made by the engine (``build.build``, on its
    :class:`~rag_experiments.metrics.repeats.JudgeRepeats`) and passed to the two things that
    use it: the judge scheduler enters it around a repeat ``>= 1``
    (:meth:`entered`), and the judge's response cache
    (:class:`~rag_experiments.llm.cache.CachedChat`, given it at build) reads it
    (:meth:`current`), merges the repeat's ``options`` into the call and puts its ``index`` in
    the cache key. Outside a repeat (repeat 0, every other role) :meth:`current` is None: the
    call as asked, under the key it always had.

    The value is per context (a :class:`~contextvars.ContextVar` the scope owns): concurrent
    repeats in worker threads each see their own; a thread started inside a repeat sees it
    only when it runs in a copy of the caller's context (:func:`contextvars.copy_context`).
    """

    def __init__(self) -> None:
        self._var: ContextVar[RepeatCall | None] = ContextVar(
            "rag_experiments_judge_repeat", default=None
        )

    def current(self) -> RepeatCall | None:
        """The repeat of the calls made now, None outside a repeat ``>= 1``."""
        return self._var.get()

    @contextmanager
    def entered(self, call: RepeatCall | None) -> Iterator[None]:
        """Make ``call`` the current repeat inside the block (None: leave it as it is)."""
        if call is None:
            yield
            return
        token = self._var.set(call)
        try:
            yield
        finally:
            self._var.reset(token)


@memo(maxsize=256)
def schema_json(schema: type[BaseModel]) -> dict[str, Any]:
    """``schema.model_json_schema()``, computed once per class (pydantic builds it anew on
    every call, which costs more than a whole request to a local server). Treat the result as
    read-only."""
    return schema.model_json_schema()


@dataclass
class Completion:
    """One model answer.

    Attributes:
        text: Raw generated text.
        parsed: The validated pydantic instance when a ``schema`` was given, else None.
        usage: Token counts of what was sent to the model for this completion (all 0 when it
            was served from the response cache: nothing was sent).
        latency_ms: Wall time of the call in milliseconds (0 for a cache hit).
        finish_reason: ``stop``, ``length`` (cut by the token limit) or the server's word.
        cached: True when served from the response cache, or shared with an identical
            request in flight at the same time (no model call made for it).
        model: Model id as reported/configured.
        cached_usage: For a ``cached`` completion, the token counts of the call that first
            produced it (shown apart from ``usage``); zeros otherwise.
        reasoning: What a reasoning model thought before its answer (the server's separate
            field, or inline ``<think>`` text cut out of ``text``); ``""`` without any
            (:mod:`rag_experiments.llm.reasoning`).
    """

    text: str
    parsed: BaseModel | None = None
    usage: Usage = field(default_factory=Usage)
    latency_ms: float = 0.0
    finish_reason: str = "stop"
    cached: bool = False
    model: str = ""
    cached_usage: Usage = field(default_factory=Usage)
    reasoning: str = ""


@runtime_checkable
class ChatModel(Protocol):
    """A local chat model.

    ``complete`` sends ``messages``; with ``schema`` (a pydantic model class) the model is
    constrained or asked to answer JSON of that shape, and ``Completion.parsed`` holds the
    validated instance. Failures raise :class:`~rag_experiments.errors.LLMError` subclasses.

    ``max_concurrency`` declares how many calls the model takes at once (1 for the embedded
    model, whose calls are serialised; for a server the requests kept in flight,
    ``in_flight``); schedulers size their pools by it. ``slots`` is how many the model
    computes at once (a server's parallel slots; ``max_concurrency`` elsewhere), and
    ``slot_affinity`` asks schedulers to keep the calls that share a prompt prefix on one
    lane of ``slots`` lanes (see :mod:`rag_experiments.metrics.scheduler`).

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
    slots: int
    slot_affinity: bool
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
            settings: The model's config node (the ``llm`` or ``judge`` node).
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
    slot_affinity: bool = False
    cacheable: bool = True
    context_window: int | None = None
    max_tokens: int
    caveat: ClassVar[str] = ""
    form_fields: ClassVar[tuple[str, ...]] = ()
    scripted: ClassVar[bool] = False

    @property
    def slots(self) -> int:
        """Calls the model computes at once: its ``max_concurrency`` unless it says more."""
        return int(self.max_concurrency)

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
