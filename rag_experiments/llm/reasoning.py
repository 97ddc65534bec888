"""Reasoning ("thinking") models as chat models: the ``reasoning`` setting of every chat role,
how each server is asked for it, how a reply's reasoning is told apart from its answer, and the
error of a reply cut while the model was still reasoning.

**The setting** (``llm.reasoning``, ``judge.reasoning``, the question generator's
``llm.reasoning``): one of :data:`REASONING_LEVELS`. ``auto`` (the default) sends nothing: the
server and the model's chat template decide. The other values map to each server's own knob:

=======================  ===========================  =======================================
server                   field sent                   values
=======================  ===========================  =======================================
Ollama ``/api/chat``     ``think``                    off → ``false``, on → ``true``,
                                                      low/medium/high → the string (gpt-oss)
OpenAI-compatible        ``chat_template_kwargs``     off → ``{"enable_thinking": false}``,
(vLLM, llama.cpp)        ``.enable_thinking``         any other → ``true`` (Qwen3 templates)
                         ``reasoning_effort``         low/medium/high (gpt-oss), on → medium
=======================  ===========================  =======================================

``reasoning_style`` (OpenAI-compatible only) picks the fields: ``both`` (default), ``kwargs``
(``chat_template_kwargs`` only) or ``effort`` (``reasoning_effort`` only; cannot say ``off``).
Field names as in the servers' code: Ollama ``api/types.go`` (``ChatRequest.Think``,
``Message.Thinking``), vLLM ``entrypoints/openai/protocol.py`` (``chat_template_kwargs``,
``reasoning_effort``; replies ``message.reasoning``, formerly ``reasoning_content``),
llama.cpp ``tools/server`` (``chat_template_kwargs``, ``--reasoning-format``; replies
``message.reasoning_content``).

**Replies.** The reasoning is read from the server's separate field when there is one, and
otherwise cut out of the text by :func:`split_reasoning` (``<think>…</think>``, a ``</think>``
whose opening tag was in the prompt, an unterminated ``<think>`` at the end of a cut reply, and
the gpt-oss "harmony" channel markers); the JSON of a judge is parsed from what remains.

**Budget.** A completion's ``max_tokens`` covers the reasoning and the answer. With reasoning
asked for (not ``off``/``auto``), each call's limit grows by ``reasoning_budget`` tokens
(default :data:`DEFAULT_BUDGET` for the level), and the model says so once in the log. A reply
cut while reasoning (the token limit reached with reasoning and no answer) fails as
:class:`ReasoningTruncatedError` (reason ``reasoning_truncated``), with :data:`HINT`.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from dataclasses import dataclass
from typing import Any

from rag_experiments.common.usage import Usage
from rag_experiments.errors import ConfigError
from rag_experiments.llm.context import CHARS_PER_TOKEN
from rag_experiments.llm.parsing import LLMTruncatedError

log = logging.getLogger(__name__)

REASONING_LEVELS: tuple[str, ...] = ("auto", "off", "on", "low", "medium", "high")
"""Values of a chat role's ``reasoning`` setting; ``auto`` = leave the server's default."""

EFFORT_LEVELS: tuple[str, ...] = ("low", "medium", "high")
"""The levels that name an effort (Ollama ``think: "<level>"``, ``reasoning_effort``)."""

REASONING_STYLES: tuple[str, ...] = ("both", "kwargs", "effort")
"""How an OpenAI-compatible server is asked (``reasoning_style``): ``both`` sends
``chat_template_kwargs.enable_thinking`` and, for a level, ``reasoning_effort``; ``kwargs``
only the former; ``effort`` only the latter."""

DEFAULT_BUDGET: dict[str, int] = {"low": 1024, "on": 2048, "medium": 2048, "high": 4096}
"""Tokens added to every call's ``max_tokens`` per level when ``reasoning_budget`` is not set
(``off`` and ``auto`` add none)."""

HINT = (
    "a reasoning model spent the whole token budget thinking: raise judge.max_tokens (or "
    "judge.reasoning_budget) or set judge.reasoning=off (llm.* for the generator)"
)
"""The one-line fix printed once per model when a reply is cut while reasoning."""

RATIONALE_CHARS = 400
"""Characters of a judge's reasoning kept as its rationale (the rest is cut with ``…``)."""

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_HARMONY_FINAL = re.compile(
    r"<\|channel\|>final<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|$)", re.DOTALL
)
_HARMONY_ANALYSIS = re.compile(
    r"<\|channel\|>(?:analysis|commentary)<\|message\|>(.*?)(?:<\|end\|>|$)", re.DOTALL
)
_HARMONY_BARE = re.compile(r"^\s*analysis(.*?)assistantfinal(.*)$", re.DOTALL)


class ReasoningTruncatedError(LLMTruncatedError):
    """The token limit cut the reply while the model was still reasoning: there is no answer.
    Reason ``reasoning_truncated``; not retried (the same limit would cut the retry)."""

    reason = "reasoning_truncated"


def check_reasoning(level: str, where: str, style: str = "both") -> str:
    """``level`` when it is one of :data:`REASONING_LEVELS` and ``style`` can send it.

    Raises:
        ConfigError: An unknown level or style, or ``off`` with ``style=effort``
            (``reasoning_effort`` has no "off").
    """
    if level not in REASONING_LEVELS:
        raise ConfigError(
            f"{where}: reasoning={level!r} is not one of {', '.join(REASONING_LEVELS)}"
        )
    if style not in REASONING_STYLES:
        raise ConfigError(
            f"{where}: reasoning_style={style!r} is not one of {', '.join(REASONING_STYLES)}"
        )
    if level == "off" and style == "effort":
        raise ConfigError(
            f"{where}: reasoning=off cannot be sent as reasoning_effort; set "
            "reasoning_style=kwargs or both (chat_template_kwargs.enable_thinking=false)"
        )
    return level


def reasoning_budget(level: str, budget: int | None) -> int:
    """Tokens added to each call's ``max_tokens`` for reasoning: ``budget`` when set, else
    :data:`DEFAULT_BUDGET` of ``level`` (0 for ``off`` and ``auto``).

    Raises:
        ConfigError: A negative ``budget``.
    """
    if budget is not None and int(budget) < 0:
        raise ConfigError(f"reasoning_budget must be >= 0, got {budget}")
    if level in ("off", "auto"):
        return 0
    return int(budget) if budget is not None else DEFAULT_BUDGET[level]


def ollama_think(level: str) -> bool | str | None:
    """Ollama's ``think`` for ``level``: None (not sent) for ``auto``."""
    if level == "auto":
        return None
    if level in EFFORT_LEVELS:
        return level
    return level == "on"


def openai_fields(level: str, style: str = "both") -> dict[str, Any]:
    """The request fields of an OpenAI-compatible server for ``level`` (``{}`` for ``auto``):
    ``chat_template_kwargs: {"enable_thinking": bool}`` and/or ``reasoning_effort``."""
    if level == "auto":
        return {}
    out: dict[str, Any] = {}
    if style in ("both", "kwargs"):
        out["chat_template_kwargs"] = {"enable_thinking": level != "off"}
    if style in ("both", "effort") and level != "off":
        out["reasoning_effort"] = level if level in EFFORT_LEVELS else "medium"
    return out


@dataclass(frozen=True)
class Split:
    """A reply told apart into answer and reasoning.

    Attributes:
        answer: The text after the reasoning (what a judge's JSON is parsed from).
        reasoning: The reasoning text (``""`` when there was none).
        open: The reply ended inside the reasoning (an unterminated ``<think>`` or an
            analysis channel with no final one).
    """

    answer: str
    reasoning: str
    open: bool = False


def split_reasoning(text: str) -> Split:
    """Cut inline reasoning out of ``text``.

    Recognised: ``<think>…</think>`` (several, anywhere); a ``</think>`` with no opening tag
    before it (the chat template opened it in the prompt: Qwen3, DeepSeek-R1), everything
    before it being reasoning; an unterminated ``<think>`` (the rest is reasoning, ``open``);
    gpt-oss harmony markers ``<|channel|>analysis<|message|>…<|end|>`` and
    ``<|start|>assistant<|channel|>final<|message|>…`` (also with the special tokens dropped:
    ``analysis…assistantfinal…``).

    Args:
        text: The model's raw text.

    Returns:
        The :class:`Split`; ``answer`` is ``text`` unchanged when there was no reasoning.
    """
    if "<|channel|>" in text:
        final = _HARMONY_FINAL.search(text)
        thoughts = [m.group(1).strip() for m in _HARMONY_ANALYSIS.finditer(text)]
        if final is not None:
            return Split(final.group(1).strip(), "\n".join(thoughts))
        if thoughts:
            return Split("", "\n".join(thoughts), open=True)
    bare = _HARMONY_BARE.match(text)
    if bare is not None:
        return Split(bare.group(2).strip(), bare.group(1).strip())
    reasoning: list[str] = []
    close = text.find(_THINK_CLOSE)
    opened = text.find(_THINK_OPEN)
    if close >= 0 and (opened < 0 or close < opened):
        reasoning.append(text[:close].strip())
        text = text[close + len(_THINK_CLOSE) :]
    while True:
        start = text.find(_THINK_OPEN)
        if start < 0:
            break
        end = text.find(_THINK_CLOSE, start)
        if end < 0:
            reasoning.append(text[start + len(_THINK_OPEN) :].strip())
            return Split(text[:start].strip(), "\n".join(reasoning), open=True)
        reasoning.append(text[start + len(_THINK_OPEN) : end].strip())
        text = text[:start] + text[end + len(_THINK_CLOSE) :]
    if not reasoning:
        return Split(text, "")
    return Split(text.strip(), "\n".join(r for r in reasoning if r))


def reasoning_tokens(reported: int | None, reasoning: str, completion_tokens: int = 0) -> int:
    """Reasoning tokens of one reply: what the server reported
    (``usage.completion_tokens_details.reasoning_tokens``) when it did, else estimated from
    the reasoning text as prompts are (``ceil(characters / 4)``,
    :data:`~rag_experiments.llm.context.CHARS_PER_TOKEN`), at most the reply's
    ``completion_tokens`` when the server reported those (the reasoning is part of them); 0
    without reasoning."""
    if reported:
        return int(reported)
    estimate = math.ceil(len(reasoning) / CHARS_PER_TOKEN)
    return min(estimate, completion_tokens) if completion_tokens else estimate


def shorten(reasoning: str, chars: int = RATIONALE_CHARS) -> str:
    """``reasoning`` on one line, cut to ``chars`` characters with ``…``."""
    flat = " ".join(reasoning.split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def cut_while_reasoning(split: Split, finish_reason: str) -> bool:
    """Whether a reply was cut while reasoning: the token limit was reached (``length``) and
    the reasoning never closed, or there was reasoning and no answer at all."""
    if finish_reason != "length":
        return False
    return split.open or (bool(split.reasoning) and not split.answer.strip())


STOP_AFTER = 8
"""Replies in a row cut while reasoning, with no answered reply yet, after which a model stops
calling its server (:class:`ReasoningWatch`)."""


class ReasoningWatch:
    """Per model: prints :data:`HINT` once, whatever thread hits it first, and stops calling
    a server whose replies are all cut while reasoning. After :data:`STOP_AFTER` such replies
    in a row with no answered reply since the model was built, every later call fails at once
    as :class:`ReasoningTruncatedError` without a request (the same budget would cut it
    again), as a dead judge fails fast: the run then ends on its ``max_failure_rate`` check
    with everything computed logged, instead of spending the budget on every question. One
    answered reply disarms the stop for good (a model that can answer within the budget is
    only cut on some questions; those rows stay NaN ``reasoning_truncated``)."""

    def __init__(self, stop_after: int = STOP_AFTER) -> None:
        self.stop_after = int(stop_after)
        self._cut = 0
        self._answered = False
        self._hinted = False
        self._lock = threading.Lock()

    def check(self, where: str) -> None:
        """Raise when the stop is set (before a request).

        Raises:
            ReasoningTruncatedError: :data:`STOP_AFTER` replies in a row were cut while
                reasoning and none was answered.
        """
        with self._lock:
            stopped = not self._answered and self._cut >= self.stop_after
        if stopped:
            raise ReasoningTruncatedError(
                f"{where}: not called: the first {self.stop_after} replies were all cut while "
                f"reasoning and none was answered; {HINT}",
                raw="",
            )

    def cut(self, where: str) -> None:
        """Count one reply cut while reasoning; log :data:`HINT` the first time."""
        with self._lock:
            self._cut += 1
            first, self._hinted = not self._hinted, True
            stop = not self._answered and self._cut == self.stop_after
        if first:
            log.warning("%s: reply cut while reasoning; %s", where, HINT)
        if stop:
            log.warning(
                "%s: the first %d replies were all cut while reasoning: no more calls to it in "
                "this run (each fails as reasoning_truncated)",
                where,
                self.stop_after,
            )

    def answered(self) -> None:
        """Note one reply that was not cut while reasoning (disarms the stop)."""
        if not self._answered:
            with self._lock:
                self._answered = True


def with_reasoning_tokens(usage: Usage, tokens: int) -> Usage:
    """``usage`` with its ``reasoning_tokens`` set to ``tokens``."""
    return Usage(usage.prompt_tokens, usage.completion_tokens, usage.cached_prompt_tokens, tokens)
