"""Ollama through its native API (``/api/chat``), with the JSON schema as ``format``.

Ollama silently cuts a prompt longer than its context window (``num_ctx``, 2048 or 4096 by
default depending on the version) and answers anyway. This client always sends ``num_ctx``,
refuses a prompt estimated over it before the call, and fails a call whose reported
``prompt_eval_count`` reached ``num_ctx`` (the sign that the server truncated the prompt).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, bearer_headers
from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.base import Message, Usage, schema_json
from rag_experiments.llm.errors import ContextOverflowError, LLMHTTPError, ModelNotFoundError
from rag_experiments.llm.reasoning import EFFORT_LEVELS, ollama_think
from rag_experiments.llm.remote import RemoteChat, Reply
from rag_experiments.llm.transport import JsonHttp

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:11434"


def canonical_model_name(name: str) -> str:
    """``llama3.1`` → ``llama3.1:latest``: Ollama's implicit tag made explicit."""
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def tagged_digest(tags: Mapping[str, Any], model: str) -> str | None:
    """The digest of ``model`` in a ``GET /api/tags`` reply, or None when it is not listed.

    Names are compared with Ollama's implicit ``:latest`` tag made explicit
    (:func:`canonical_model_name`), on each entry's ``name`` and ``model``.
    """
    wanted = canonical_model_name(model)
    for entry in tags.get("models") or []:
        if not isinstance(entry, Mapping):
            continue
        names = {canonical_model_name(str(entry.get(k) or "")) for k in ("name", "model")}
        if wanted in names:
            return str(entry.get("digest") or "")
    return None


def unreachable_hint(field: str = "llm.base_url") -> str:
    """The fix for "cannot connect to Ollama"."""
    return f"start it with `ollama serve` or set {field} (judge.base_url for the judge)"


def not_found_error(where: str, model: str) -> ModelNotFoundError:
    """The "model not pulled" error with its fix."""
    return ModelNotFoundError(
        f"{where}: the model is not on this server; run `ollama pull {model}` (or set "
        "llm.model / judge.model to one that `ollama list` shows)"
    )


def check_ollama_model(http: JsonHttp, model: str, where: str) -> None:
    """The check of an Ollama model (chat or embedding): ``GET /api/tags`` answers and lists
    ``model``.

    Raises:
        LLMUnreachableError: Nothing answers at ``http.base_url``.
        LLMTimeoutError: No answer within the check's limit.
        ModelNotFoundError: The model is not pulled (the message lists those that are).
        LLMHTTPError: The server answered an error.
    """
    try:
        tags = http.probe("GET", "/api/tags")
    except LLMHTTPError as exc:
        raise LLMHTTPError(
            f"{http.base_url}/api/tags failed: is {http.base_url} an Ollama "
            f"server? {unreachable_hint()}",
            status=exc.status,
            body=exc.body,
        ) from None
    tags = tags if isinstance(tags, Mapping) else {}
    if tagged_digest(tags, model) is None:
        names = {
            str(m.get(k))
            for m in tags.get("models") or []
            for k in ("name", "model")
            if isinstance(m, Mapping) and m.get(k)
        }
        raise ModelNotFoundError(
            f"{where}: the model {model!r} is not available (the server has: "
            f"{', '.join(sorted(names)) or 'none'}); run `ollama pull {model}` or choose another"
        )


THINKING_LEVEL_FAMILIES = frozenset({"gptoss", "gpt-oss"})
"""Model families whose ``think`` takes a level (``"low"``/``"medium"``/``"high"``) instead
of true/false (Ollama's ``api/types.go``: levels are for gpt-oss)."""


def thinking_values(show: Mapping[str, Any]) -> list[str] | None:
    """The ``reasoning`` values a model supports, from its ``/api/show`` answer: ``auto`` and
    ``off`` always; ``on`` when ``capabilities`` holds ``thinking``; and ``low``, ``medium``,
    ``high`` instead of ``on`` for the families of :data:`THINKING_LEVEL_FAMILIES`. None when
    the answer has no ``capabilities`` (an older Ollama: it cannot tell)."""
    caps = show.get("capabilities")
    if not isinstance(caps, list):
        return None
    values = ["auto", "off"]
    if "thinking" in caps:
        family = str((show.get("details") or {}).get("family") or "").lower()
        values += list(EFFORT_LEVELS) if family in THINKING_LEVEL_FAMILIES else ["on"]
    return values


def specialise_http_error(exc: LLMHTTPError, where: str, model: str) -> LLMError:
    """Turn Ollama's 404 "model … not found" into :class:`ModelNotFoundError`."""
    if exc.status == 404 and "not found" in exc.body.lower() and "model" in exc.body.lower():
        return not_found_error(where, model)
    return exc


class OllamaChat(RemoteChat):
    """A model served by Ollama.

    Args:
        model: Ollama model name (``llama3.1:8b``; no tag = ``:latest``).
        base_url: Ollama's root URL.
        num_ctx: Context window in tokens, sent with every request.
        max_tokens: Default completion limit, sent as ``num_predict``.
        temperature: Default sampling temperature.
        seed: Default sampling seed.
        keep_alive: How long Ollama keeps the model loaded after a call (``"5m"``, ``"-1"``).
        retry: How long one attempt may take and how failed ones (timeouts, connection errors,
            HTTP 429/5xx) are retried (:class:`~rag_experiments.common.http.RetryPolicy`).
        parse_retries: Repair attempts for structured replies that do not validate.
        max_concurrency: The server's parallel slots (``OLLAMA_NUM_PARALLEL``; see
            :class:`~rag_experiments.llm.remote.RemoteChat`).
        in_flight: Requests kept in flight (None = twice ``max_concurrency``).
        slot_affinity: Keep one question's judge calls on one lane (prefix reuse).
        options: Other Ollama ``options`` (``top_k``, ``repeat_penalty`` …), sent as given.
        api_key_env: Environment variable holding a key for an Ollama behind an
            authenticating proxy (sent as ``Authorization: Bearer``), or None.
        api_key: The key itself (prefer ``api_key_env``); not both.
        reasoning: ``auto`` (send nothing), ``off``/``on`` (``think: false/true``) or
            ``low``/``medium``/``high`` (``think: "<level>"``, gpt-oss); the reasoning comes
            back in ``message.thinking`` (:mod:`rag_experiments.llm.reasoning`). :meth:`check`
            refuses a setting the model does not support (``/api/show`` ``capabilities``).
        reasoning_budget: Tokens added to each call's limit when reasoning is asked for
            (None = the level's default).

    Raises:
        ConfigError: ``num_ctx`` < 1, an unset ``api_key_env``, an unknown reasoning level or
            a bad shared setting.
    """

    provider = "ollama"
    model_hint = "e.g. llama3.1:8b"

    def __init__(
        self,
        model: str = "llama3.1:8b",
        base_url: str = DEFAULT_BASE_URL,
        num_ctx: int = 8192,
        max_tokens: int = 512,
        temperature: float = 0.0,
        seed: int = 0,
        keep_alive: str = "5m",
        retry: RetryPolicy = DEFAULT_RETRY,
        parse_retries: int = 2,
        max_concurrency: int = 8,
        in_flight: int | None = None,
        slot_affinity: bool = False,
        options: dict[str, Any] | None = None,
        api_key_env: str | None = None,
        api_key: str | None = None,
        reasoning: str = "auto",
        reasoning_budget: int | None = None,
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
        )
        if num_ctx < 1:
            raise ConfigError(f"{self.where}: num_ctx must be >= 1, got {num_ctx}")
        self.num_ctx = num_ctx
        self.keep_alive = keep_alive
        self.extra_options = dict(options or {})
        self.http = JsonHttp(
            self.base_url,
            self.retry.timeout_s,
            where=self.where,
            headers=bearer_headers(api_key_env, self.where, "llm.api_key_env", api_key=api_key),
            unreachable_hint=unreachable_hint(),
            max_connections=max(10, self.gate.limit),
        )
        self._identity: dict[str, str] | None = None
        self._identity_lock = threading.Lock()

    @property
    def context_window(self) -> int:
        """``num_ctx``."""
        return self.num_ctx

    def _attempt(
        self, messages: list[Message], schema: type[BaseModel] | None, opts: dict[str, Any]
    ) -> Reply:
        options = {
            **self.extra_options,
            "num_ctx": self.num_ctx,
            "num_predict": int(opts["max_tokens"]),
            "temperature": float(opts["temperature"]),
            "seed": int(opts["seed"]),
        }
        options.update(
            {k: v for k, v in opts.items() if k not in ("max_tokens", "temperature", "seed")}
        )
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": False,
            "options": options,
            "keep_alive": self.keep_alive,
        }
        if schema is not None:
            payload["format"] = schema_json(schema)
        think = ollama_think(self.reasoning)
        if think is not None:
            payload["think"] = think
        try:
            data = self.http.request("POST", "/api/chat", payload)
        except LLMHTTPError as exc:
            raise specialise_http_error(exc, self.where, self.model) from exc
        message = data.get("message") or {}
        prompt_eval = int(data.get("prompt_eval_count") or 0)
        if prompt_eval >= self.num_ctx:
            raise ContextOverflowError(
                f"{self.where}: the server evaluated {prompt_eval} prompt tokens, the whole "
                f"context window num_ctx={self.num_ctx}: it truncated the prompt silently. Raise "
                "num_ctx in the llm/judge config, retrieve fewer or shorter contexts, or set "
                "target.truncate_contexts=true",
                prompt_tokens=prompt_eval,
                context_window=self.num_ctx,
            )
        return Reply(
            text=str(message.get("content") or ""),
            finish_reason=str(data.get("done_reason") or "stop"),
            usage=Usage(prompt_eval, int(data.get("eval_count") or 0)),
            model=str(data.get("model") or self.model),
            reasoning=str(message.get("thinking") or ""),
        )

    def check(self) -> None:
        """One ``GET /api/tags``: Ollama answers and has the model (``num_ctx``, sent with
        every request, is the context window).

        Raises:
            LLMUnreachableError: Nothing answers at ``base_url``.
            LLMTimeoutError: No answer within the check's limit.
            ModelNotFoundError: The model is not pulled (the message lists those that are).
            LLMHTTPError: The server answered an error (not an Ollama server?).
            ConfigError: ``reasoning`` asks for a setting the model does not support (its
                ``/api/show`` ``capabilities`` have no ``thinking``, or a level on a model
                that takes only true/false); the message lists the model's own values.
        """
        check_ollama_model(self.http, self.model, self.where)
        if self.reasoning in ("auto", "off"):
            return
        values = thinking_values(self.show())
        if values is not None and self.reasoning not in values:
            raise ConfigError(
                f"{self.where}: reasoning={self.reasoning} is not supported by this model "
                f"(its values: {', '.join(values)}; from /api/show capabilities and family); "
                "set reasoning to one of them, or auto"
            )

    def digest(self) -> str:
        """The model's digest from ``/api/tags`` (what ``ollama list`` shows as ID): one
        request with a check's limit and no retry, since it is first asked before the
        preflight (a refused connection fails at once; the preflight then says so).

        Raises:
            ModelNotFoundError: The model is not pulled.
            LLMError: The server is unreachable or answers an error.
        """
        data = self.http.probe("GET", "/api/tags")
        digest = tagged_digest(data, self.model)
        if digest is None:
            raise not_found_error(self.where, self.model)
        return digest

    def show(self) -> dict[str, Any]:
        """``/api/show``: the model's details and ``model_info`` (trained context length …);
        one request, no retry (as :meth:`digest`).

        Raises:
            ModelNotFoundError: The model is not pulled.
            LLMError: The server is unreachable or answers an error.
        """
        try:
            return self.http.probe("POST", "/api/show", {"model": self.model})
        except LLMHTTPError as exc:
            raise specialise_http_error(exc, self.where, self.model) from exc

    def _lookup_identity(self) -> dict[str, str]:
        digest = self.digest()
        info = self.show()
        details = info.get("details") or {}
        trained = next(
            (
                int(v)
                for k, v in (info.get("model_info") or {}).items()
                if k.endswith(".context_length") and isinstance(v, int)
            ),
            0,
        )
        if trained and self.num_ctx > trained:
            log.warning(
                "%s: num_ctx=%d exceeds the model's trained context length %d",
                self.where,
                self.num_ctx,
                trained,
            )
        return {
            "digest": digest,
            "quantization": str(details.get("quantization_level") or ""),
            "context_length": str(trained or ""),
        }

    def describe(self) -> dict[str, str]:
        """Identity for tags and cache keys. The first call asks the server for the digest
        (``/api/tags``) and details (``/api/show``), once per object; if the server cannot
        tell, ``digest`` is ``""`` (not remembered, asked again next time) and the failure is
        logged: the model call itself will then fail with the reason."""
        with self._identity_lock:
            if self._identity is None:
                try:
                    self._identity = self._lookup_identity()
                except LLMError as exc:
                    log.warning("%s: no model identity (%s)", self.where, exc)
                    found = {"digest": "", "quantization": "", "context_length": ""}
                else:
                    found = self._identity
            else:
                found = self._identity
        return {
            "provider": self.provider,
            "model": self.model,
            **found,
            "base_url": self.base_url,
            "num_ctx": str(self.num_ctx),
            "max_tokens": str(self.max_tokens),
            "temperature": str(self.temperature),
            "seed": str(self.seed),
            "options": json.dumps(self.extra_options, sort_keys=True),
            **self.reasoning_identity(),
        }
