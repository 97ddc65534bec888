"""Build chat models from config nodes, the one place for every role (generator, judge,
dataset generator), so each role's model gets the same wrapping: the response cache
(:class:`~rag_experiments.llm.cache.CachedChat`) and a per-role usage meter.

The models of one job share a :class:`ModelSession`, an object the engine creates from the
job's :class:`CacheSettings` (``build.build`` does, from ``paths.llm_cache`` and ``cache.mode``)
and passes to whatever builds a model: it holds the open response caches, the per-role meters
and each role's first model (its identity tags). A session made without settings has no cache
(models are still metered), so library code and tests never write a cache by surprise. Two
sessions share nothing: two jobs in one process (tests, an in-process sweep) count apart.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hydra.utils import instantiate

from rag_experiments.common.http import nest_retry
from rag_experiments.llm.base import ChatModel, RepeatScope
from rag_experiments.llm.cache import CachedChat, ResponseCache, check_cache_mode
from rag_experiments.llm.usage import UsageMeter

_UNSET: Any = object()


@dataclass(frozen=True)
class CacheSettings:
    """The LLM response cache of a job.

    Args:
        path: SQLite file (``paths.llm_cache``), or None (or ``""``) for no cache.
        mode: ``cache.mode``, one of :data:`~rag_experiments.llm.cache.CACHE_MODES`.

    Raises:
        ConfigError: Unknown mode.
    """

    path: str | None = None
    mode: str = "read_write"

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", self.path or None)
        check_cache_mode(self.mode)


class ModelSession:
    """The models of one job: response caches (each file opened once), a usage meter per role
    and each role's first model. Thread-safe.

    Args:
        settings: The job's response cache (default: none).

    Raises:
        ConfigError: Unknown cache mode.
    """

    def __init__(self, settings: CacheSettings | None = None) -> None:
        self.settings = settings or CacheSettings()
        self._lock = threading.Lock()
        self._meters: dict[str, UsageMeter] = {}
        self._first_models: dict[str, CachedChat] = {}  # per role
        self._caches: dict[str, ResponseCache] = {}

    def build_chat(
        self,
        node: Any,
        role: str,
        *,
        cache_path: str | None = _UNSET,
        cache_mode: str | None = None,
        where: str = "",
        repeats: RepeatScope | None = None,
    ) -> CachedChat:
        """Build the chat model of ``node`` for ``role``, wrapped with the session's cache and
        the role's usage meter.

        Args:
            node: A config node with ``_target_`` (the ``llm`` or ``judge`` node
                as a plain mapping), or an already built model.
            role: ``generator``, ``judge`` … (names the usage metrics and identity tags).
            cache_path: Override of the session's cache file (None = no cache).
            cache_mode: Override of the session's mode.
            where: The node's config key (``llm``, ``judge``) for error messages, when ``node``
                is a plain mapping (a DictConfig knows its own key).
            repeats: The judge repeats of the job (the judge's model only): which repeat a
                call belongs to (:class:`~rag_experiments.llm.base.RepeatScope`).

        Returns:
            The wrapped model (a :class:`~rag_experiments.llm.base.ChatModel`).

        Raises:
            ConfigError: Bad cache mode or unusable cache file; or the model's own config
                errors.
        """
        if isinstance(node, Mapping):
            inner: ChatModel = instantiate(model_arguments(node, where=where))
        else:
            inner = node
        with self._lock:
            path = self.settings.path if cache_path is _UNSET else cache_path
            mode = cache_mode or self.settings.mode
            cache = self._open_cache(path, mode)
            meter = self._meters.setdefault(role, UsageMeter(role))
            model = CachedChat(inner, meter, cache, mode if path else "off", repeats=repeats)
            self._first_models.setdefault(role, model)
        return model

    def cache_for(self, role: str) -> tuple[ResponseCache | None, str, UsageMeter]:
        """The session's response cache (None when there is none or ``cache.mode=off``), its
        mode and ``role``'s usage meter: what a part that is not a chat model (the reranker)
        needs to be cached and metered as :meth:`build_chat` does for chat models.

        Raises:
            ConfigError: The cache file cannot be opened.
        """
        with self._lock:
            mode = self.settings.mode
            cache = self._open_cache(self.settings.path, mode)
            meter = self._meters.setdefault(role, UsageMeter(role))
        return cache, (mode if cache is not None else "off"), meter

    def _open_cache(self, path: str | None, mode: str) -> ResponseCache | None:
        """The response cache at ``path`` (opened once per path), None without a path or with
        ``mode`` ``off``. The caller holds ``_lock``.

        Raises:
            ConfigError: The cache file cannot be opened.
        """
        if not path or mode == "off":
            return None
        cache = self._caches.get(path)
        if cache is None:
            cache = self._caches[path] = ResponseCache(path)
        return cache

    def usage_by_role(self) -> dict[str, float]:
        """Usage metrics of every role that had a model built in this session:
        ``<role>.llm_calls``, ``<role>.llm_cache_hits``, ``<role>.llm_cache_hit_rate``,
        ``<role>.llm_errors``, ``<role>.prompt_tokens``, ``<role>.completion_tokens``."""
        out: dict[str, float] = {}
        with self._lock:
            meters = list(self._meters.values())
        for meter in meters:
            out.update(meter.metrics())
        return out

    def usage_counts(self, role: str) -> dict[str, int] | None:
        """The counters of ``role``'s usage meter (:meth:`UsageMeter.counts`), or None when no
        model of that role was built: what a checkpoint saves."""
        with self._lock:
            meter = self._meters.get(role)
        return None if meter is None else meter.counts()

    def add_usage(self, role: str, counts: dict[str, int]) -> None:
        """Add saved counters (an earlier attempt's, see :meth:`usage_counts`) to ``role``'s
        meter, so a resumed run reports the usage of the whole run."""
        with self._lock:
            meter = self._meters.setdefault(role, UsageMeter(role))
        meter.add(counts)

    def identity_by_role(self) -> dict[str, str]:
        """Tags ``<role>.<key>`` from the ``describe()`` of each role's first model (provider,
        model, digest, base_url, options), plus ``<role>.cache_mode``."""
        with self._lock:
            firsts = dict(self._first_models)
        tags: dict[str, str] = {}
        for role, model in firsts.items():
            tags.update({f"{role}.{k}": str(v) for k, v in model.describe().items()})
            tags[f"{role}.cache_mode"] = model.mode if model.cache is not None else "off"
        return tags


def model_arguments(data: Mapping[str, Any], *, where: str = "") -> dict[str, Any]:
    """A model's settings as the arguments its class takes: a plain dict whose flat call
    settings (``timeout_s``, ``max_retries``, ``backoff_s``, ``backoff_max_s``) travel as one
    ``retry`` node (:func:`~rag_experiments.common.http.nest_retry`).

    Args:
        data: A chat-model or embedder's plain settings with ``_target_`` (a config node is
            turned into them by :func:`rag_experiments.build.model_arguments`).
        where: The node's config key for error messages.
    """
    return nest_retry(data, where=where)
