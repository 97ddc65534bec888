"""A persistent response cache (SQLite) in front of any chat model.

The key is the SHA-256 of a canonical JSON document holding the model's identity
(``describe()``: provider, model, digest, base_url and its default options, with its
``reasoning`` setting when it is not ``auto``), the messages,
the output schema's JSON schema and the call's options, so a rerun with the same model
version and settings is answered from disk, exactly, with no model call; a changed prompt,
option, schema or model digest is a miss. Only successful completions are stored: a timeout or
a parse failure is tried again on the next run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import queue
import sqlite3
import threading
import time
from concurrent.futures import Future
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from rag_experiments.common.sqlite_store import BUSY_TIMEOUT_S, connect, init_store, is_busy
from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import (
    ChatModel,
    ChatModelBase,
    Completion,
    Message,
    RepeatScope,
    Usage,
    schema_json,
)
from rag_experiments.llm.parsing import LLMParseError, parse_structured
from rag_experiments.llm.reasoning import split_reasoning
from rag_experiments.llm.usage import UsageMeter

log = logging.getLogger(__name__)

CACHE_MODES: tuple[str, ...] = ("read_write", "read_only", "off")
"""``read_write``: look up, store misses; ``read_only``: look up, store nothing; ``off``."""


def check_cache_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`CACHE_MODES`.

    Raises:
        ConfigError: Unknown mode (the message lists the known ones).
    """
    if mode not in CACHE_MODES:
        raise ConfigError(
            f"cache.mode={mode!r} is not one of {', '.join(CACHE_MODES)}; "
            "use read_write (default), read_only or off"
        )
    return mode


def cache_in_use(cache: ResponseCache | None, mode: str, cacheable: bool) -> ResponseCache | None:
    """The store a cached wrapper (:class:`CachedChat`, the reranker's ``CachedReranker``)
    looks answers up in: ``cache``, or None when there is none, ``mode`` is ``off`` or the
    wrapped part is not ``cacheable`` (the free fakes).

    Raises:
        ConfigError: Unknown ``mode`` (:func:`check_cache_mode`).
    """
    return cache if check_cache_mode(mode) != "off" and cacheable else None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_responses (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms REAL NOT NULL,
    created_at REAL NOT NULL
)
"""


def request_key(
    identity: dict[str, str],
    messages: list[Message],
    schema: type[BaseModel] | None,
    options: dict[str, Any],
    repeat: int = 0,
) -> str:
    """SHA-256 hex digest of one request.

    Args:
        identity: The model's ``describe()``.
        messages: Chat messages.
        schema: Output schema class (its JSON schema is hashed, so a changed field changes
            the key), or None.
        options: Per-call options.
        repeat: Judge repeat index (``judge.repeats``); in the hashed document only when
            it is not 0, so repeat 0 keeps the key every earlier run stored.

    Returns:
        64 hex characters.
    """
    doc = {
        "identity": identity,
        "messages": messages,
        "schema": schema_json(schema) if schema is not None else None,
        "options": options,
    }
    if repeat:
        doc["repeat"] = repeat
    blob = json.dumps(doc, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_INSERT = "INSERT OR REPLACE INTO llm_responses VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


class ResponseCache:
    """SQLite store of completions by request key (WAL, 60 s busy timeout: parallel sweep jobs
    may share it).

    Connections stay open: lookups take one from a pool (one per thread looking up at once),
    writes go through one connection under a lock, each its own ``BEGIN IMMEDIATE``
    transaction, with ``synchronous=NORMAL`` (in WAL mode a commit survives the process being
    killed; only an OS crash or power loss can drop the last ones, and a dropped entry is only
    a call made again). Opening a connection per use and syncing every commit cost 1.3 ms of CPU
    per lookup and 2.3 ms per write, more than the judge call they cache (0.8 ms).

    Args:
        path: SQLite file; its folder is created.

    Raises:
        ConfigError: The file cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        init_store(
            self.path,
            _SCHEMA,
            "the LLM response cache",
            "Set paths.llm_cache to a writable file, delete a corrupt one, or set cache.mode=off",
        )
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._writer: sqlite3.Connection | None = None
        self._write_lock = threading.Lock()
        self._retrying = Retrying(  # used under _write_lock only
            retry=retry_if_exception(is_busy),
            wait=wait_random_exponential(multiplier=0.02, max=1.0),
            stop=stop_after_delay(BUSY_TIMEOUT_S),
            reraise=True,
        )

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return connect(self.path)

    def _open(self) -> sqlite3.Connection:
        """A kept-open connection in autocommit mode (transactions are explicit)."""
        conn = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
        )
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def get(self, key: str) -> Completion | None:
        """The stored completion (``cached=True``, ``latency_ms=0``, ``usage`` zero: nothing is
        sent; the stored token counts in ``cached_usage``; a reasoning model's reasoning, stored
        as ``<think>…</think>`` before the answer, back in ``reasoning``), or None."""
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            conn = self._open()
        try:
            row = conn.execute(
                "SELECT model, text, finish_reason, prompt_tokens, completion_tokens "
                "FROM llm_responses WHERE key = ?",
                (key,),
            ).fetchone()
        finally:
            self._readers.put(conn)
        if row is None:
            return None
        model, text, finish, pt, ct = row
        split = split_reasoning(text) if text.startswith("<think>") else None
        return Completion(
            text=split.answer if split else text,
            reasoning=split.reasoning if split else "",
            latency_ms=0.0,
            finish_reason=finish,
            cached=True,
            model=model,
            cached_usage=Usage(pt, ct),
        )

    def put(self, key: str, provider: str, completion: Completion) -> None:
        """Store a completion (replacing an older one under the same key) with the tokens of
        the call that made it; "database is locked" (another process writing) is retried for
        up to :data:`~rag_experiments.common.sqlite_store.BUSY_TIMEOUT_S`.

        Raises:
            sqlite3.Error: Any other database error, or still locked after the timeout.
        """
        row = (
            key,
            provider,
            completion.model,
            # a reasoning model's thoughts travel in front of the answer, as inline models
            # write them, and are cut out again by get()
            f"<think>{completion.reasoning}</think>{completion.text}"
            if completion.reasoning
            else completion.text,
            completion.finish_reason,
            completion.usage.prompt_tokens,
            completion.usage.completion_tokens,
            completion.latency_ms,
            time.time(),
        )
        with self._write_lock:
            if self._writer is None:
                self._writer = self._open()
            conn = self._writer
            for attempt in self._retrying:
                with attempt:
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        conn.execute(_INSERT, row)
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise

    def __len__(self) -> int:
        with self._connect() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM llm_responses").fetchone()[0])


def _as_cached(completion: Completion) -> Completion:
    """``completion`` as served to a caller that made no call: ``cached``, no latency, no
    usage of its own (the call's counts in ``cached_usage``)."""
    if completion.cached:
        return completion
    return dataclasses.replace(
        completion, cached=True, latency_ms=0.0, usage=Usage(), cached_usage=completion.usage
    )


class CachedChat(ChatModelBase):
    """Wraps a chat model with the response cache and a usage meter (what
    :func:`~rag_experiments.llm.factory.build_chat` returns for every role).

    Models that declare ``cacheable = False`` (the fake model: free, and its tests count its
    calls) skip the cache but are still metered. Every other declaration of the
    :class:`~rag_experiments.llm.base.ChatModel` protocol is the inner model's.

    Args:
        inner: The model.
        meter: Where calls are counted.
        cache: The store, or None for no cache.
        mode: One of :data:`CACHE_MODES`.
        repeats: The job's judge repeats (the judge's model only; None for every other role):
            which repeat a call belongs to.

    Raises:
        ConfigError: Unknown ``mode``.
    """

    def __init__(
        self,
        inner: ChatModel,
        meter: UsageMeter,
        cache: ResponseCache | None = None,
        mode: str = "read_write",
        *,
        repeats: RepeatScope | None = None,
    ) -> None:
        self.cache = cache_in_use(cache, mode, inner.cacheable)
        self.inner = inner
        self.meter = meter
        self.mode = mode
        self.repeats = repeats
        self._flights: dict[str, Future[Completion]] = {}
        self._flights_lock = threading.Lock()

    @property
    def provider(self) -> str:
        """The inner model's provider."""
        return str(self.inner.provider)

    @property
    def model(self) -> str:
        """The inner model's name."""
        return str(self.inner.model)

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        """Answer from the cache, or from an identical request already in flight, or call the
        model (and store its answer in ``read_write``).

        **Single flight.** Requests with the same key (same model identity, messages, schema
        and options) that are in flight at the same time are sent once: the first caller calls
        the model, the others wait for its answer and get it too (``cached=True``, their
        ``usage`` zero: nothing was sent for them), and the one answer is what the cache
        stores. So a run and its rerun from the cache give the same values even when the
        server would have answered the duplicates differently, and the duplicate call is
        saved. If the first caller fails, the waiting ones fail with its error. Models that
        are not ``cacheable`` (the free fake) are called every time.

        **Judge repeats.** Inside a judge repeat ``r >= 1`` (the :class:`~rag_experiments.llm.
        base.RepeatScope` given at construction, entered by the judge scheduler) the repeat's
        options (its ``seed`` or ``temperature``) override ``options`` and ``r`` is part of
        the key, so each repeat is stored apart; repeat 0 is the plain call under its old key.

        Args:
            messages: Chat messages.
            schema: Optional output schema class.
            **options: Per-call options (part of the key).

        Returns:
            The completion; ``cached=True`` when it came from the cache or an identical
            request in flight (``cached_usage`` then holds the tokens of the call that made
            it).

        Raises:
            LLMError: The model call failed (nothing is stored).
        """
        repeat = self.repeats.current() if self.repeats is not None else None
        if repeat is not None:  # a judge repeat >= 1: its options, its own key
            options = {**options, **repeat.options}
        if not self.inner.cacheable:
            return self._call(messages, schema, options)
        key = request_key(
            self.inner.describe(),
            messages,
            schema,
            options,
            repeat=repeat.index if repeat is not None else 0,
        )
        hit = self._lookup(key, schema)
        if hit is not None:
            self.meter.record(hit)
            return hit
        with self._flights_lock:
            running = self._flights.get(key)
            if running is None:
                flight: Future[Completion] = Future()
                self._flights[key] = flight
        if running is not None:
            try:
                first = running.result()
            except Exception:
                self.meter.record_error()
                raise
            shared = _as_cached(first)
            self.meter.record(shared)
            return shared
        try:
            # an identical request may have finished between the lookup above and taking the
            # flight: it stored its answer before leaving, so look again before calling
            completion = self._lookup(key, schema)
            if completion is not None:
                self.meter.record(completion)
            else:
                completion = self._call(messages, schema, options)
        except BaseException as exc:
            with self._flights_lock:
                del self._flights[key]
            flight.set_exception(exc)
            raise
        if not completion.cached and self.cache is not None and self.mode == "read_write":
            try:
                self.cache.put(key, self.provider, completion)
            except sqlite3.Error as exc:
                log.warning("cannot store in the LLM cache %s: %s", self.cache.path, exc)
        with self._flights_lock:
            del self._flights[key]
        flight.set_result(completion)
        return completion

    def _lookup(self, key: str, schema: type[BaseModel] | None) -> Completion | None:
        """The cached completion of ``key`` (parsed with ``schema``), or None."""
        if self.cache is None:
            return None
        try:
            hit = self.cache.get(key)
            if hit is not None and schema is not None:
                hit.parsed = parse_structured(hit.text, schema, finish_reason=hit.finish_reason)
            return hit
        except LLMParseError:
            log.warning("cached response no longer parses; calling the model")
        except sqlite3.Error as exc:
            log.warning("LLM cache %s unreadable (%s); calling the model", self.cache.path, exc)
        return None

    def _call(
        self, messages: list[Message], schema: type[BaseModel] | None, options: dict[str, Any]
    ) -> Completion:
        """One call of the inner model, metered."""
        try:
            completion = self.inner.complete(messages, schema, **options)
        except Exception as exc:
            self.meter.record_error(exc)
            raise
        self.meter.record(completion)
        return completion

    def describe(self) -> dict[str, str]:
        """The inner model's identity."""
        return self.inner.describe()

    def check(self) -> None:
        """The inner model's check (the cache cannot answer for a model that is not there)."""
        self.inner.check()

    @property
    def max_concurrency(self) -> int:
        """Calls the inner model takes at once (its declared ``max_concurrency``)."""
        return int(self.inner.max_concurrency)

    @property
    def slots(self) -> int:
        """Calls the inner model computes at once (its ``slots``)."""
        return int(self.inner.slots)

    @property
    def slot_affinity(self) -> bool:
        """Whether the inner model wants one question's calls on one lane."""
        return bool(self.inner.slot_affinity)

    @property
    def context_window(self) -> int | None:
        """The inner model's context window, when it has one."""
        return self.inner.context_window

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        """The inner model's prompt token count (its tokenizer, or an estimate)."""
        return int(self.inner.count_prompt_tokens(messages))

    def prompt_budget(self, **options: Any) -> int | None:
        """The inner model's prompt budget (window minus ``max_tokens``), None when unknown."""
        return self.inner.prompt_budget(**options)
