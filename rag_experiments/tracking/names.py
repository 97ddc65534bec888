"""Names MLflow accepts.

MLflow keys (metric names, param keys, tag keys) may only hold alphanumerics, ``_ - . /``, spaces
and, outside Windows, ``:`` (``mlflow.utils.validation.validate_param_and_metric_name``); they must
also stay unchanged under ``posixpath.normpath`` (no leading ``/``, no ``//``, no ``.``/``..``
segment, no trailing ``/``) and hold at most ``MAX_ENTITY_KEY_LENGTH`` (250) characters. Our
canonical metric names carry parameters (``nDCG@10``), so they are mapped to keys by
:func:`sanitize_metric_name`, and the mapping is logged with the run.

Secrets are removed by :func:`rag_experiments.common.redact.redact` before anything (params,
tags, the config artifact) is logged.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable

from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH

from rag_experiments.errors import TrackingError

_INVALID_KEY_CHAR = re.compile(r"[^A-Za-z0-9_\-. /]")
"""Characters MLflow refuses in a key, plus ``:`` (refused on Windows) and any non-ASCII
character (MLflow's ``\\w`` admits Unicode letters, but other stores and tools may not)."""


def hash_suffixed(text: str, limit: int, *, key_safe: bool = False) -> str:
    """Shorten ``text`` to at most ``limit`` characters, keeping different texts different.

    Text that fits is returned unchanged. Longer text keeps its head and ends with a suffix
    holding the first 12 hex digits of the SHA-256 of the *full* text (UTF-8), so two long texts
    that differ anywhere, even after the cut, give different results.

    Args:
        text: The value or key to shorten.
        limit: Maximum length in characters (>= 32).
        key_safe: Use the suffix ``_sha256_<12 hex>`` (only characters valid in MLflow keys)
            instead of ``…[sha256:<12 hex>]`` (for values).

    Returns:
        ``text`` itself, or ``text[:limit - len(suffix)] + suffix`` (exactly ``limit`` long).
    """
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    suffix = f"_sha256_{digest}" if key_safe else f"…[sha256:{digest}]"
    return text[: limit - len(suffix)] + suffix


def sanitize_metric_name(name: str) -> str:
    """Map a canonical metric name to a valid MLflow key, deterministically.

    Rule, applied in order:

    1. ``@`` becomes ``_at_`` (``nDCG@10`` → ``nDCG_at_10``, ``P@5`` → ``P_at_5``).
    2. Every other character outside ``A-Z a-z 0-9 _ - . / space`` becomes ``_`` (this includes
       ``:``, refused by MLflow on Windows, and non-ASCII letters).
    3. If the key would change under ``posixpath.normpath`` (leading/trailing/double ``/``,
       ``.`` or ``..`` segments), every ``/`` becomes ``_``; a key that still starts with
       ``..`` or is ``.`` gets a leading ``_``.
    4. A key longer than MLflow's ``MAX_ENTITY_KEY_LENGTH`` is cut with a ``_sha256_<12 hex>``
       suffix (see :func:`hash_suffixed`).

    Names that are already valid (``faithfulness``, ``deepeval.faithfulness``) are unchanged.

    Args:
        name: Canonical metric name.

    Returns:
        A key that MLflow accepts as a metric, param or tag name on every platform.

    Raises:
        TrackingError: If ``name`` is empty or blank.
    """
    if not name or not name.strip():
        raise TrackingError(
            f"Metric name {name!r} is empty: give every metric a non-blank canonical name."
        )
    key = _INVALID_KEY_CHAR.sub("_", name.replace("@", "_at_"))
    if _changes_as_path(key):
        key = key.replace("/", "_")
        if key == "." or key.startswith(".."):
            key = "_" + key
    return hash_suffixed(key, MAX_ENTITY_KEY_LENGTH, key_safe=True)


def sanitize_metric_names(names: Iterable[str]) -> dict[str, str]:
    """Sanitise many names at once and refuse any two that would share a key.

    Args:
        names: Canonical metric names (duplicates are fine).

    Returns:
        ``{canonical name: MLflow key}`` in first-seen order.

    Raises:
        TrackingError: If two different names map to the same key (both are named), or a name
            is blank.
    """
    mapping: dict[str, str] = {}
    owner: dict[str, str] = {}
    for name in names:
        if name in mapping:
            continue
        key = sanitize_metric_name(name)
        if key in owner:
            raise TrackingError(
                f"Metric names {owner[key]!r} and {name!r} both become the MLflow key {key!r} "
                "once sanitised ('@' -> '_at_', other invalid characters -> '_'); rename one "
                "of them so their keys differ."
            )
        owner[key] = name
        mapping[name] = key
    return mapping


def _changes_as_path(key: str) -> bool:
    """Mirror of MLflow's ``path_not_unique``: the key is not its own normalised path."""
    norm = posixpath.normpath(key)
    return norm != key or norm == "." or norm.startswith("..") or norm.startswith("/")
