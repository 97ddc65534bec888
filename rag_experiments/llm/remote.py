"""What the HTTP chat providers share: option defaults, the context-window check, retries of
transport failures, and repair retries of structured output.

A subclass (:class:`~rag_experiments.llm.ollama.OllamaChat`,
:class:`~rag_experiments.llm.openai_compat.OpenAICompatChat`) implements one attempt,
:meth:`RemoteChat._attempt`, and its identity.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from pydantic import BaseModel

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, TakesRetry, bearer_headers
from rag_experiments.errors import ConfigError, SettingMissingError
from rag_experiments.llm.base import ChatModelBase, Completion, Message, Usage
from rag_experiments.llm.errors import ContextOverflowError
from rag_experiments.llm.gate import EndpointGate
from rag_experiments.llm.parsing import LLMParseError, LLMTruncatedError, parse_structured
from rag_experiments.llm.reasoning import (
    ReasoningTruncatedError,
    ReasoningWatch,
    Split,
    check_reasoning,
    cut_while_reasoning,
    reasoning_tokens,
    shorten,
    split_reasoning,
    with_reasoning_tokens,
)
from rag_experiments.llm.reasoning import reasoning_budget as reasoning_budget_of

log = logging.getLogger(__name__)

IN_FLIGHT_PER_SLOT = 2
"""Requests kept in flight per server slot when ``in_flight`` is not set: one computing, one
waiting in the server's queue (``bench/judge_throughput.py``, issue 25: at 1 per slot the slots
idle while the client turns each call round, 1.30x the ideal time at 32 slots; at 2 per slot
1.16x with the old client, 1.07-1.09x with this one)."""

REPAIR_PROMPT = (
    "Your previous reply could not be used: {error}. Reply again with only one JSON object "
    "that matches the requested schema, and no other text."
)
"""Sent after an unparsable structured reply (the reply itself goes back as the assistant
turn), as instructor and similar libraries do: the model sees what was wrong, which helps even
at temperature 0, where a plain resend would return the same text."""


@dataclass(frozen=True)
class Reply:
    """One raw answer of a server.

    Attributes:
        text: Generated text.
        finish_reason: ``stop``, ``length`` or the server's word.
        usage: Token counts the server reported.
        model: Model id the server reported.
        reasoning: The reasoning the server returned apart from the text (Ollama
            ``message.thinking``, OpenAI-compatible ``message.reasoning`` /
            ``reasoning_content``); ``""`` when none (inline reasoning is still in ``text``).
    """

    text: str
    finish_reason: str
    usage: Usage
    model: str
    reasoning: str = ""


class RemoteChat(ChatModelBase, TakesRetry):
    """Base of the HTTP chat providers.

    Args:
        model: Model name on the server.
        base_url: Server root.
        max_tokens: Default completion limit in tokens.
        temperature: Default sampling temperature (0 = greedy).
        seed: Default sampling seed.
        retry: How long one attempt may take and how failed ones (timeouts, connection errors,
            HTTP 429/5xx) are retried (:class:`~rag_experiments.common.http.RetryPolicy`).
        parse_retries: Repair attempts after a structured reply that does not validate.
        max_concurrency: The server's parallel slots: requests it computes at once (llama.cpp
            ``--parallel``, Ollama ``OLLAMA_NUM_PARALLEL``, vLLM ``--max-num-seqs``).
        in_flight: Requests this client keeps in flight, from every thread
            (:class:`~rag_experiments.llm.gate.EndpointGate`: a request refused with HTTP
            429/503 retried after its ``Retry-After``, failing fast once the server is gone).
            None = twice
            ``max_concurrency``: the extra requests wait in the server's queue, so a slot
            that finishes one request starts the next at once instead of idling while the
            client turns a call round (:data:`IN_FLIGHT_PER_SLOT`).
        slot_affinity: Prefix-aware scheduling for a compute-bound server: the judge
            scheduler runs each question's calls one after another on one lane (lanes =
            ``max_concurrency``), and each request names its lane's slot (``id_slot``, with
            ``cache_prompt: true``; llama.cpp's ``llama-server``), so the server reuses the
            question's prompt prefix instead of computing it again on another slot.
        reasoning: Ask a reasoning model to think or not (one of
            :data:`~rag_experiments.llm.reasoning.REASONING_LEVELS`; ``auto`` sends nothing);
            each provider maps it to its server's field (:mod:`rag_experiments.llm.reasoning`).
        reasoning_budget: Tokens added to every call's ``max_tokens`` when reasoning is asked
            for (``max_tokens`` covers reasoning and answer); None = the level's default
            (:data:`~rag_experiments.llm.reasoning.DEFAULT_BUDGET`).

    Raises:
        ConfigError: A negative or zero setting, or an unknown reasoning level.
    """

    provider = "remote"
    form_fields: ClassVar[tuple[str, ...]] = ("model", "base_url")
    model_hint: ClassVar[str] = "as the server lists it"
    """How to find the model name (in the message when none is set)."""

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any], role: str) -> None:
        """A model name and a base URL are set, and the API-key variable, when one is
        named (``api_key_env``), is set; no request is made.

        Args:
            settings: The model's config node.
            role: ``generator``, ``judge`` … (named in the message).

        Raises:
            SettingMissingError: No model name or no base URL.
            ConfigError: ``api_key_env`` names an environment variable that is not set.
        """
        model = str(settings.get("model") or "").strip()
        url = str(settings.get("base_url") or "").strip().rstrip("/")
        if not model:
            raise SettingMissingError(
                f"no {role} model name is set: enter the model to use ({cls.model_hint})"
            )
        if not url:
            raise SettingMissingError(
                f"no base URL is set for the {role} model {model!r}: enter the server's URL"
            )
        api_key_env = settings.get("api_key_env")
        bearer_headers(
            str(api_key_env) if api_key_env else None,
            f"the {role} model at {url}",
            "llm.api_key_env",
            api_key=settings.get("api_key") or None,
        )

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        seed: int = 0,
        retry: RetryPolicy = DEFAULT_RETRY,
        parse_retries: int = 2,
        max_concurrency: int = 8,
        in_flight: int | None = None,
        slot_affinity: bool = False,
        reasoning: str = "auto",
        reasoning_budget: int | None = None,
        reasoning_style: str = "both",
    ) -> None:
        if not model:
            raise ConfigError(f"{self.provider}: model is empty; set llm.model (or judge.model)")
        if max_tokens < 1 or parse_retries < 0:
            raise ConfigError(
                f"{self.provider} {model}: max_tokens must be >= 1 and parse_retries >= 0 "
                f"(got {max_tokens}, {parse_retries})"
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.parse_retries = parse_retries
        self.retry = retry
        if int(max_concurrency) < 1 or (in_flight is not None and int(in_flight) < 1):
            raise ConfigError(
                f"{self.where}: max_concurrency (server slots) and in_flight must be >= 1 "
                f"(got {max_concurrency}, {in_flight})"
            )
        self._slots = int(max_concurrency)
        self.slot_affinity = bool(slot_affinity)
        limit = IN_FLIGHT_PER_SLOT * self._slots if in_flight is None else int(in_flight)
        self.gate = EndpointGate(limit, where=self.where)
        self.reasoning = check_reasoning(str(reasoning), self.where, str(reasoning_style))
        self.reasoning_style = str(reasoning_style)
        self.reasoning_budget = reasoning_budget_of(self.reasoning, reasoning_budget)
        self._watch = ReasoningWatch()
        if self.reasoning_budget:
            log.info(
                "%s: reasoning=%s: each call's max_tokens grows by %d tokens for the reasoning "
                "(max_tokens covers reasoning + answer; set reasoning_budget to change it)",
                self.where,
                self.reasoning,
                self.reasoning_budget,
            )

    @property
    def max_concurrency(self) -> int:
        """Calls this model takes at once from this client: ``in_flight`` (what schedulers
        size their pools by; the server's slots are :attr:`slots`)."""
        return self.gate.limit

    @property
    def slots(self) -> int:
        """The server's parallel slots (the ``max_concurrency`` setting)."""
        return self._slots

    # --- to implement -------------------------------------------------------------------
    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens, when known (None = not checked)."""
        return None

    def _attempt(
        self, messages: list[Message], schema: type[BaseModel] | None, opts: dict[str, Any]
    ) -> Reply:
        """Send one request (no retry). Raises typed :class:`LLMError` s."""
        raise NotImplementedError

    def describe(self) -> dict[str, str]:
        """Identity: provider, model, digest, base_url and the options that change outputs."""
        raise NotImplementedError

    # --- shared -------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """``"<provider> <model> at <base_url>"`` for messages."""
        return f"{self.provider} {self.model} at {self.base_url}"

    def _options(self, options: dict[str, Any]) -> dict[str, Any]:
        opts = {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}
        opts.update(options)
        opts["max_tokens"] = int(opts["max_tokens"]) + self.reasoning_budget
        return opts

    def reasoning_identity(self) -> dict[str, str]:
        """``{"reasoning": …, "reasoning_budget": …}`` for :meth:`describe` (so tags and the
        response cache key carry them); ``{}`` for ``auto``, so the keys of runs without the
        setting stay as they were."""
        if self.reasoning == "auto":
            return {}
        return {"reasoning": self.reasoning, "reasoning_budget": str(self.reasoning_budget)}

    def _answer(self, reply: Reply, usage: Usage, opts: dict[str, Any]) -> tuple[Reply, Usage]:
        """``reply`` with inline reasoning cut out of its text and the reasoning in its
        ``reasoning`` (the server's field, else the inline text), and ``usage`` plus the
        reply's tokens (reasoning tokens as reported, else estimated).

        Raises:
            ReasoningTruncatedError: The reply was cut while reasoning (the hint is logged
                once per model).
        """
        split = split_reasoning(reply.text)
        reasoning = "\n".join(r for r in (reply.reasoning, split.reasoning) if r)
        tokens = reasoning_tokens(
            reply.usage.reasoning_tokens, reasoning, reply.usage.completion_tokens
        )
        usage = usage + with_reasoning_tokens(reply.usage, tokens)
        if cut_while_reasoning(Split(split.answer, reasoning, split.open), reply.finish_reason):
            self._watch.cut(self.where)
            raise ReasoningTruncatedError(
                f"{self.where}: the reply was cut by the token limit while the model was still "
                f"reasoning (max_tokens={opts['max_tokens']}, {len(reasoning)} characters of "
                "reasoning, no answer); raise max_tokens or set reasoning=off",
                raw=reply.text or shorten(reasoning),
                usage=usage,
            )
        self._watch.answered()
        return replace(reply, text=split.answer, reasoning=reasoning), usage

    def _check_window(self, messages: list[Message]) -> None:
        window = self.context_window
        if window is None:
            return
        estimate = self.count_prompt_tokens(messages)
        if estimate > window:
            raise ContextOverflowError(
                f"{self.where}: the prompt is about {estimate} tokens (characters / 4) but the "
                f"context window is {window} tokens; raise the window (num_ctx / context_window "
                "in the llm/judge config), retrieve fewer or shorter contexts, or set "
                "target.truncate_contexts=true",
                prompt_tokens=estimate,
                context_window=window,
            )

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        """Generate a reply; with ``schema`` the server is asked for JSON of that shape.

        Transport failures are retried by :attr:`retry`; a structured reply that does not
        validate is sent back with :data:`REPAIR_PROMPT` up to ``parse_retries`` times (usage
        and latency of every attempt are summed). A reply cut by the token limit is not
        repaired: it fails as ``truncated``.

        Args:
            messages: Chat messages.
            schema: Optional pydantic model class the reply must validate against.
            **options: ``max_tokens``, ``temperature``, ``seed`` override the defaults; other
                keys are passed to the server as they are.

        Returns:
            The completion (``parsed`` set when ``schema`` is given).

        Raises:
            ContextOverflowError: The prompt exceeds the context window (estimated before the
                call, or reported by the server).
            LLMTruncatedError: Structured output cut by ``max_tokens``.
            LLMParseError: Still invalid after ``parse_retries`` repairs (carries the raw text).
            LLMError: Timeout, unreachable, model not found, HTTP error (after retries).
        """
        opts = self._options(options)
        self._check_window(messages)
        self._watch.check(self.where)
        started = time.perf_counter()
        usage = Usage()
        convo = list(messages)
        attempt = 0
        while True:
            reply = self.retry.call(
                lambda c=convo: self.gate.call(lambda: self._attempt(c, schema, opts)), self.where
            )
            reply, usage = self._answer(reply, usage, opts)
            parsed = None
            if schema is not None:
                try:
                    parsed = parse_structured(reply.text, schema, finish_reason=reply.finish_reason)
                except LLMTruncatedError as exc:
                    raise LLMTruncatedError(
                        f"{self.where}: {exc} (max_tokens={opts['max_tokens']})",
                        raw=exc.raw,
                        usage=usage,
                    ) from exc
                except LLMParseError as exc:
                    if attempt == self.parse_retries:
                        raise LLMParseError(
                            f"{self.where}: {exc} after {attempt + 1} attempt(s); use a larger "
                            "model or raise parse_retries",
                            raw=exc.raw,
                            usage=usage,
                        ) from exc
                    attempt += 1
                    log.warning(
                        "%s: unusable structured reply (%s); asking for a repair (%d of %d)",
                        self.where,
                        exc,
                        attempt,
                        self.parse_retries,
                    )
                    convo = [
                        *messages,
                        {"role": "assistant", "content": reply.text},
                        {"role": "user", "content": REPAIR_PROMPT.format(error=exc)},
                    ]
                    continue
            return Completion(
                text=reply.text,
                parsed=parsed,
                usage=usage,
                latency_ms=(time.perf_counter() - started) * 1000.0,
                finish_reason=reply.finish_reason,
                model=reply.model or self.model,
                reasoning=reply.reasoning,
            )
