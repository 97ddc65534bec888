"""Any OpenAI-compatible chat server (vLLM, llama.cpp's server, LM Studio, Ollama's ``/v1``)
through ``/v1/chat/completions``.

Structured output degrades step by step, because servers differ in what they accept: first
``response_format = {"type": "json_schema", …}`` (OpenAI, vLLM, LM Studio), then
``{"type": "json_object", "schema": …}`` (llama-cpp-python's server, which refuses
``json_schema``), then plain ``{"type": "json_object"}``, then no ``response_format`` at all. In
the last two the schema is appended to the last message as an instruction, and tolerant parsing
does the rest. The first step a server accepts is remembered for the object's lifetime.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from typing import Any

from pydantic import BaseModel

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, bearer_headers
from rag_experiments.errors import LLMError
from rag_experiments.llm.base import LANE, Message, Usage, schema_json
from rag_experiments.llm.errors import ContextOverflowError, LLMHTTPError, ModelNotFoundError
from rag_experiments.llm.reasoning import openai_fields
from rag_experiments.llm.remote import RemoteChat, Reply
from rag_experiments.llm.transport import JsonHttp

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"

FORMAT_MODES: tuple[str, ...] = ("json_schema", "json_object_schema", "json_object", "text")
"""Structured-output requests, most to least constrained."""

SCHEMA_INSTRUCTION = "\n\nReply with one JSON object that matches this JSON schema:\n{schema}"

_OVERFLOW = re.compile(r"context|too long|maximum.*tokens", re.IGNORECASE)
_WINDOW = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_REQUESTED = re.compile(r"requested (\d+) tokens(?: \((\d+) in the messages)?", re.IGNORECASE)
_FORMAT_WORDS = re.compile(r"response_format|json_schema|json_object|grammar", re.IGNORECASE)


def check_listed_model(
    http: JsonHttp, model: str, where: str, key_field: str
) -> dict[str, Any] | None:
    """The check of an OpenAI-compatible server: ``GET /models`` answers; the entry that
    lists ``model``, or None when the list does not have it.

    Args:
        http: The server's client.
        model: The configured model name.
        where: Names the model in messages.
        key_field: The config key of the API key variable (for the 401/403 fix).

    Raises:
        LLMUnreachableError: Nothing answers at ``http.base_url``.
        LLMTimeoutError: No answer within the check's limit.
        LLMHTTPError: The key is refused (401/403), or the server is not an OpenAI-compatible
            ``/v1`` root.
    """
    try:
        data = http.probe("GET", "/models")
    except LLMHTTPError as exc:
        if exc.status in (401, 403):
            fix = f"set {key_field} to the environment variable holding the key"
        else:
            fix = f"is {http.base_url} an OpenAI-compatible /v1 root? {http.unreachable_hint}"
        raise LLMHTTPError(
            f"{where}: {http.base_url}/models refused the request: {fix}",
            status=exc.status,
            body=exc.body,
        ) from None
    rows = data.get("data") if isinstance(data, dict) else None
    for entry in rows or []:
        if isinstance(entry, dict) and entry.get("id") == model:
            return entry
    return None


def reported_window(entry: dict[str, Any]) -> int | None:
    """The context window a ``/models`` entry reports: vLLM ``max_model_len``, LM Studio
    ``max_context_length``, llama.cpp ``meta.n_ctx_train``; None when it reports none."""
    meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
    for value in (
        entry.get("max_model_len"),
        entry.get("max_context_length"),
        meta.get("n_ctx_train"),
    ):
        if isinstance(value, int) and value > 0:
            return value
    return None


def reported_usage(data: dict[str, Any]) -> Usage:
    """Token counts of a ``/chat/completions`` answer: ``usage.prompt_tokens`` and
    ``completion_tokens``, and the prompt tokens the server took from its prompt cache:
    ``usage.prompt_tokens_details.cached_tokens`` (OpenAI, vLLM, recent ``llama-server``) or
    llama.cpp's ``timings.cache_n``; 0 for what a server does not report (llama-cpp-python's
    server reports no cache use); and the reasoning tokens of
    ``usage.completion_tokens_details.reasoning_tokens`` (0 when not reported: the model then
    estimates them from the reasoning text)."""
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("prompt_tokens_details")
    timings = data.get("timings")
    cached = 0
    if isinstance(details, dict) and details.get("cached_tokens"):
        cached = int(details["cached_tokens"])
    elif isinstance(timings, dict) and timings.get("cache_n"):
        cached = int(timings["cache_n"])
    completion = usage.get("completion_tokens_details")
    reasoning = completion.get("reasoning_tokens") if isinstance(completion, dict) else None
    return Usage(
        int(usage.get("prompt_tokens") or 0),
        int(usage.get("completion_tokens") or 0),
        cached,
        int(reasoning or 0),
    )


class _FormatRejected(LLMError):
    """The server refused this ``response_format`` (internal: triggers the next mode)."""

    reason = "format_rejected"


class OpenAICompatChat(RemoteChat):
    """A model behind an OpenAI-compatible server.

    Args:
        model: Model name as the server knows it (llama.cpp's server accepts any).
        base_url: API root including ``/v1`` (``http://127.0.0.1:8080/v1``).
        api_key_env: Name of the environment variable that holds the API key, or None for
            servers without one. The key is read once, sent as ``Authorization: Bearer``, and
            never logged, tagged or put in a message.
        api_key: The key itself (prefer ``api_key_env``); not both.
        context_window: The model's window in tokens, if known: prompts estimated above it
            fail before the call. None = leave the check to the server.
        max_tokens: Default completion limit.
        temperature: Default sampling temperature.
        seed: Default sampling seed.
        retry: How long one attempt may take and how failed ones (timeouts, connection errors,
            HTTP 429/5xx) are retried (:class:`~rag_experiments.common.http.RetryPolicy`).
        parse_retries: Repair attempts for structured replies that do not validate.
        max_concurrency: The server's parallel slots (see :class:`RemoteChat`).
        in_flight: Requests kept in flight (None = twice ``max_concurrency``; see
            :mod:`rag_experiments.llm.gate`).
        slot_affinity: Send each request to its lane's slot: ``id_slot`` (the lane of
            :data:`~rag_experiments.llm.base.LANE`) and ``cache_prompt: true``, which
            llama.cpp's ``llama-server`` reads; other servers ignore unknown fields
            (llama-cpp-python's server has one model state and no slots: it reuses the
            prefix of the previous request, and with ``--cache true`` any cached prefix).
        reasoning: ``auto`` (send nothing) or ``off``/``on``/``low``/``medium``/``high``, sent
            as ``chat_template_kwargs.enable_thinking`` and/or ``reasoning_effort`` by
            ``reasoning_style`` (:func:`~rag_experiments.llm.reasoning.openai_fields`); the
            reasoning comes back in ``message.reasoning`` (vLLM), ``reasoning_content``
            (llama.cpp, older vLLM) or inline in the content (``<think>``, harmony markers).
        reasoning_budget: Tokens added to each call's limit when reasoning is asked for
            (None = the level's default).
        reasoning_style: ``both``, ``kwargs`` or ``effort``
            (:data:`~rag_experiments.llm.reasoning.REASONING_STYLES`).

    Raises:
        ConfigError: ``api_key_env`` names a variable that is not set, or both it and
            ``api_key`` are set.
    """

    provider = "openai"

    def __init__(
        self,
        model: str = "default",
        base_url: str = DEFAULT_BASE_URL,
        api_key_env: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
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
        super().__init__(
            model,
            base_url,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            retry=retry,
            parse_retries=parse_retries,
            max_concurrency=max_concurrency,
            in_flight=in_flight,
            slot_affinity=slot_affinity,
            reasoning=reasoning,
            reasoning_budget=reasoning_budget,
            reasoning_style=reasoning_style,
        )
        headers = bearer_headers(api_key_env, self.where, api_key=api_key)
        self.api_key_env = api_key_env
        self._window = context_window
        self.http = JsonHttp(
            self.base_url,
            self.retry.timeout_s,
            where=self.where,
            headers=headers,
            max_connections=max(10, self.gate.limit),
            unreachable_hint="start the server (e.g. `python -m llama_cpp.server --model "
            "<file.gguf>`, `vllm serve <model>`) or set llm.base_url (judge.base_url for the "
            "judge)",
        )
        self._mode = 0
        self._mode_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAICompatChat(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def context_window(self) -> int | None:
        """The configured window (None = unknown)."""
        return self._window

    def check(self) -> None:
        """``GET /models``: the server answers (and accepts the key) and lists the model.

        A server that does not list the model (llama.cpp's server answers for any name;
        vLLM refuses unknown names) is sent one 1-token completion: a "model not found"
        answer fails the check. When ``context_window`` is not set, the window the server
        reports (vLLM ``max_model_len``, llama.cpp ``meta.n_ctx_train``) is logged, or a
        warning says the window is unknown.

        Raises:
            LLMUnreachableError: Nothing answers at ``base_url``.
            LLMTimeoutError: No answer within the check's limit.
            ModelNotFoundError: The server does not have the model.
            LLMHTTPError: The key is refused (401/403) or ``base_url`` is not an
                OpenAI-compatible ``/v1`` root.
        """
        entry = check_listed_model(
            self.http, self.model, self.where, "llm.api_key_env (judge.api_key_env for the judge)"
        )
        if entry is None:
            try:
                self._attempt(
                    [{"role": "user", "content": "ping"}], None, self._options({"max_tokens": 1})
                )
            except ModelNotFoundError:
                raise
            except LLMError as exc:
                log.warning(
                    "%s: the server does not list the model and a 1-token test "
                    "call failed (%s); going on",
                    self.where,
                    exc,
                )
        if self._window is None:
            window = reported_window(entry or {})
            if window:
                log.info(
                    "%s: the server reports a context window of %d tokens; set "
                    "context_window: %d to refuse longer prompts before the call",
                    self.where,
                    window,
                    window,
                )
            else:
                log.warning(
                    "%s: context window unknown; prompts over it are left to the "
                    "server. Set context_window (llm/judge config) to check them first",
                    self.where,
                )

    @property
    def format_mode(self) -> str:
        """The structured-output mode in use (the first one the server accepted)."""
        return FORMAT_MODES[self._mode]

    def _specialise(self, exc: LLMHTTPError, with_format: bool) -> LLMError:
        body = exc.body
        if exc.status == 404 and "model" in body.lower():
            return ModelNotFoundError(
                f"{self.where}: the server has no model {self.model!r}; set llm.model / "
                f"judge.model to one listed by GET {self.base_url}/models"
            )
        if exc.status in (400, 413, 422) and (
            "context_length_exceeded" in body or _OVERFLOW.search(body) and "token" in body
        ):
            window = _WINDOW.search(body)
            requested = _REQUESTED.search(body)
            prompt = None
            if requested:
                prompt = int(requested.group(2) or requested.group(1))
            return ContextOverflowError(
                f"{self.where}: the prompt does not fit the context window (server: "
                f"{' '.join(body.split())[:200]}); retrieve fewer or shorter contexts, lower "
                "max_tokens, start the server with a larger context, or set "
                "target.truncate_contexts=true",
                prompt_tokens=prompt,
                context_window=int(window.group(1)) if window else None,
            )
        if with_format and (
            exc.status in (400, 415, 422) or (exc.status >= 500 and _FORMAT_WORDS.search(body))
        ):
            return _FormatRejected(str(exc))
        return exc

    def _payload(
        self,
        messages: list[Message],
        schema: type[BaseModel] | None,
        opts: dict[str, Any],
        mode: str,
    ) -> dict[str, Any]:
        extra = {k: v for k, v in opts.items() if k not in ("max_tokens", "temperature", "seed")}
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": int(opts["max_tokens"]),
            "temperature": float(opts["temperature"]),
            "seed": int(opts["seed"]),
            "stream": False,
            **openai_fields(self.reasoning, self.reasoning_style),
            **extra,
        }
        if self.slot_affinity:
            payload["cache_prompt"] = True
            lane = LANE.get()
            if lane is not None:
                payload["id_slot"] = lane % self.slots
        if schema is None:
            return payload
        js = schema_json(schema)
        if mode == "json_schema":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": js},
            }
        elif mode == "json_object_schema":
            payload["response_format"] = {"type": "json_object", "schema": js}
        else:
            if mode == "json_object":
                payload["response_format"] = {"type": "json_object"}
            last = dict(messages[-1])
            last["content"] = (last.get("content") or "") + SCHEMA_INSTRUCTION.format(
                schema=json.dumps(js)
            )
            payload["messages"] = [*messages[:-1], last]
        return payload

    def _attempt(
        self, messages: list[Message], schema: type[BaseModel] | None, opts: dict[str, Any]
    ) -> Reply:
        while True:
            mode_index = self._mode
            payload = self._payload(messages, schema, opts, FORMAT_MODES[mode_index])
            with_format = schema is not None and "response_format" in payload
            try:
                data = self.http.request("POST", "/chat/completions", payload)
            except LLMHTTPError as exc:
                err = self._specialise(exc, with_format)
                if isinstance(err, _FormatRejected):
                    with self._mode_lock:
                        if self._mode == mode_index:
                            self._mode = mode_index + 1
                    log.info(
                        "%s: response_format %s refused; trying %s",
                        self.where,
                        FORMAT_MODES[mode_index],
                        FORMAT_MODES[self._mode],
                    )
                    continue
                raise err from exc
            break
        try:
            choice = data["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            reasoning = message.get("reasoning") or message.get("reasoning_content") or ""
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMHTTPError(
                f"{self.where}: the answer has no choices[0].message.content; "
                "is base_url an OpenAI-compatible /v1 root?",
                status=200,
                body=json.dumps(data)[:1000],
            ) from exc
        return Reply(
            text=str(text),
            finish_reason=str(choice.get("finish_reason") or "stop"),
            usage=reported_usage(data),
            model=str(data.get("model") or self.model),
            reasoning=str(reasoning),
        )

    def describe(self) -> dict[str, str]:
        """Provider, model, base_url and the options that change outputs. OpenAI-compatible
        servers report no digest, so ``digest`` is ``""``; the key is never included."""
        return {
            "provider": self.provider,
            "model": self.model,
            "digest": "",
            "base_url": self.base_url,
            "max_tokens": str(self.max_tokens),
            "temperature": str(self.temperature),
            "seed": str(self.seed),
            "context_window": str(self._window or ""),
            **self.reasoning_identity(),
            **({"reasoning_style": self.reasoning_style} if self.reasoning != "auto" else {}),
        }
