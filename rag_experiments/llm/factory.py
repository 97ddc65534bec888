"""Build chat models from config nodes, the one place for every role (generator, judge,
dataset generator), so each role's model gets the same wrapping: the response cache
(:class:`~rag_experiments.llm.cache.CachedChat`) and a per-role usage meter.

A job first calls :func:`configure_from_config` (``build.build`` does), which sets the cache file
(``paths.llm_cache``) and mode (``cache.mode``) and resets the meters; every
:func:`build_chat` after that uses them. Without a configuration there is no cache (models are
still metered), so library code and tests never write a cache by surprise.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rag_experiments.common.http import nest_retry
from rag_experiments.llm.base import ChatModel
from rag_experiments.llm.cache import CachedChat, ResponseCache, check_cache_mode
from rag_experiments.llm.usage import UsageMeter

_UNSET: Any = object()


@dataclass
class _Session:
    """Settings and meters of the current job."""

    cache_path: str | None = None
    cache_mode: str = "read_write"
    meters: dict[str, UsageMeter] = field(default_factory=dict)
    first_models: dict[str, CachedChat] = field(default_factory=dict)  # per role
    caches: dict[str, ResponseCache] = field(default_factory=dict)


_session = _Session()
_lock = threading.Lock()


def configure(cache_path: str | None, cache_mode: str = "read_write") -> None:
    """Set the response cache of the models built from now on, and reset the usage meters.

    Args:
        cache_path: SQLite file, or None for no cache.
        cache_mode: One of :data:`~rag_experiments.llm.cache.CACHE_MODES`.

    Raises:
        ConfigError: Unknown mode.
    """
    global _session
    with _lock:
        _session = _Session(cache_path=cache_path or None, cache_mode=check_cache_mode(cache_mode))


def configure_from_config(cfg: Any) -> None:
    """:func:`configure` from a composed root config: ``paths.llm_cache`` (null = no cache)
    and ``cache.mode``."""
    paths = cfg.get("paths") or {}
    cache = cfg.get("cache") or {}
    configure(paths.get("llm_cache"), str(cache.get("mode", "read_write")))


def model_arguments(node: Any, *, where: str = "") -> dict[str, Any]:
    """A model's config node as the arguments its class takes: a plain dict (interpolations
    resolved) whose flat call settings (``timeout_s``, ``max_retries``, ``backoff_s``,
    ``backoff_max_s``) travel as one ``retry`` node
    (:func:`~rag_experiments.common.http.nest_retry`).

    Args:
        node: A chat-model or embedder node with ``_target_`` (DictConfig or mapping).
        where: The node's config key for error messages (default: a DictConfig's own key).
    """
    if not isinstance(node, DictConfig):
        return nest_retry(node, where=where)
    data = OmegaConf.to_container(node, resolve=True)
    return nest_retry(data, where=where or str(node._key() or ""))


def build_chat(
    node: Any,
    role: str,
    *,
    cache_path: str | None = _UNSET,
    cache_mode: str | None = None,
    where: str = "",
) -> CachedChat:
    """Build the chat model of ``node`` for ``role``, wrapped with the cache and the role's
    usage meter.

    Args:
        node: A config node with ``_target_`` (``cfg.llm``, ``cfg.judge``: a DictConfig or a
            plain mapping), or an already built model.
        role: ``generator``, ``judge`` … (names the usage metrics and identity tags).
        cache_path: Override of the configured cache file (None = no cache).
        cache_mode: Override of the configured mode.
        where: The node's config key (``llm``, ``judge``) for error messages, when ``node``
            is a plain mapping (a DictConfig knows its own key).

    Returns:
        The wrapped model (a :class:`~rag_experiments.llm.base.ChatModel`).

    Raises:
        ConfigError: Bad cache mode or unusable cache file; or the model's own config errors.
    """
    if isinstance(node, Mapping):
        inner: ChatModel = instantiate(model_arguments(node, where=where))
    else:
        inner = node
    with _lock:
        path = _session.cache_path if cache_path is _UNSET else cache_path
        mode = cache_mode or _session.cache_mode
        cache = _open_cache(path, mode)
        meter = _session.meters.setdefault(role, UsageMeter(role))
        model = CachedChat(inner, meter, cache, mode if path else "off")
        _session.first_models.setdefault(role, model)
    return model


def session_cache(role: str) -> tuple[ResponseCache | None, str, UsageMeter]:
    """The configured response cache (None when there is none or ``cache.mode=off``), its
    mode and ``role``'s usage meter: what a part that is not a chat model (the reranker) needs
    to be cached and metered as :func:`build_chat` does for chat models.

    Raises:
        ConfigError: The cache file cannot be opened.
    """
    with _lock:
        mode = _session.cache_mode
        cache = _open_cache(_session.cache_path, mode)
        meter = _session.meters.setdefault(role, UsageMeter(role))
    return cache, (mode if cache is not None else "off"), meter


def _open_cache(path: str | None, mode: str) -> ResponseCache | None:
    """The session's response cache at ``path`` (opened once per path), None without a path
    or with ``mode`` ``off``. The caller holds ``_lock``.

    Raises:
        ConfigError: The cache file cannot be opened.
    """
    if not path or mode == "off":
        return None
    cache = _session.caches.get(path)
    if cache is None:
        cache = _session.caches[path] = ResponseCache(path)
    return cache


def usage_by_role() -> dict[str, float]:
    """Usage metrics of every role that had a model built since :func:`configure`:
    ``<role>.llm_calls``, ``<role>.llm_cache_hits``, ``<role>.llm_cache_hit_rate``,
    ``<role>.llm_errors``, ``<role>.prompt_tokens``, ``<role>.completion_tokens``."""
    out: dict[str, float] = {}
    with _lock:
        meters = list(_session.meters.values())
    for meter in meters:
        out.update(meter.metrics())
    return out


def usage_counts(role: str) -> dict[str, int] | None:
    """The counters of ``role``'s usage meter since :func:`configure`
    (:meth:`UsageMeter.counts`), or None when no model of that role was built: what a
    checkpoint saves."""
    with _lock:
        meter = _session.meters.get(role)
    return None if meter is None else meter.counts()


def add_usage(role: str, counts: dict[str, int]) -> None:
    """Add saved counters (an earlier attempt's, see :func:`usage_counts`) to ``role``'s
    meter, so a resumed run reports the usage of the whole run."""
    with _lock:
        meter = _session.meters.setdefault(role, UsageMeter(role))
    meter.add(counts)


def identity_by_role() -> dict[str, str]:
    """Tags ``<role>.<key>`` from the ``describe()`` of each role's first model (provider,
    model, digest, base_url, options), plus ``<role>.cache_mode``."""
    with _lock:
        firsts = dict(_session.first_models)
    tags: dict[str, str] = {}
    for role, model in firsts.items():
        tags.update({f"{role}.{k}": str(v) for k, v in model.describe().items()})
        tags[f"{role}.cache_mode"] = model.mode if model.cache is not None else "off"
    return tags
