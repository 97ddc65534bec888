"""Flatten a nested config into MLflow params: dotted keys, string values, no secrets.

MLflow params are flat ``key -> str`` pairs with limits taken from
``mlflow.utils.validation``: keys at most ``MAX_ENTITY_KEY_LENGTH`` (250) characters of a
restricted alphabet, values at most ``MAX_PARAM_VAL_LENGTH`` (6000) characters. MLflow itself
would silently cut a long value, so two configs that differ only past the cut would look equal;
here every cut keeps a hash of the full text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

from rag_experiments.common.redact import redact
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.names import hash_suffixed, sanitize_metric_name


def flatten_params(cfg: Mapping[str, Any]) -> dict[str, str]:
    """Turn a nested config into MLflow params.

    Rules:

    * Secrets are redacted first (:func:`~rag_experiments.tracking.names.redact`).
    * Nested mappings become dotted keys: ``{"retriever": {"top_k": 5}}`` →
      ``{"retriever.top_k": "5"}``. An empty mapping is kept as ``"{}"`` under its own key.
    * Lists and tuples are *not* expanded: the whole list is one param, a JSON string under
      its own key (``{"metrics": {"cutoffs": [5, 10]}}`` → ``{"metrics.cutoffs": "[5, 10]"}``),
      so a list reads as one value in the MLflow UI and changing its length adds no keys.
    * Other values are converted with ``str`` (``True`` → ``"True"``, ``None`` → ``"None"``),
      as ``mlflow.log_params`` does.
    * Keys pass through the metric-name rule
      (:func:`~rag_experiments.tracking.names.sanitize_metric_name`: ``@`` → ``_at_``, other
      invalid characters → ``_``, cut with a hash suffix past ``MAX_ENTITY_KEY_LENGTH``).
    * Values longer than ``MAX_PARAM_VAL_LENGTH`` are cut to exactly that length including the
      suffix ``…[sha256:<first 12 hex of the full value>]``.

    Args:
        cfg: A nested config (plain dicts and lists, e.g. from ``OmegaConf.to_container``).

    Returns:
        ``{key: value}``, each key and value within MLflow's limits, in the config's order.

    Raises:
        TrackingError: If two config paths end up under the same key once sanitised.
    """
    flat: dict[str, str] = {}
    origin: dict[str, str] = {}
    for path, value in _walk(redact(dict(cfg)), ""):
        key = sanitize_metric_name(path)
        if key in origin:
            raise TrackingError(
                f"Config entries {origin[key]!r} and {path!r} both become the MLflow param key "
                f"{key!r}; rename one of them."
            )
        origin[key] = path
        flat[key] = hash_suffixed(value, MAX_PARAM_VAL_LENGTH)
    return flat


def _walk(node: Mapping[str, Any], prefix: str) -> list[tuple[str, str]]:
    """Return ``(dotted path, string value)`` for every leaf under ``node``."""
    items: list[tuple[str, str]] = []
    for k, v in node.items():
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            items.extend(_walk(v, path) if v else [(path, "{}")])
        elif isinstance(v, (list, tuple)):
            items.append((path, json.dumps(list(v), ensure_ascii=False, default=str)))
        else:
            items.append((path, str(v)))
    return items
