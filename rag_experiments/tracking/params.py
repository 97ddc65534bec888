"""A run's configuration as MLflow records it: flat params (dotted keys, string values, no
secrets, :func:`flatten_params`) and the redacted ``config.yaml`` (:func:`redact_yaml`). Both
take plain data (nested dicts and lists, YAML text) that the engine makes from its config.

MLflow params are flat ``key -> str`` pairs with limits taken from
``mlflow.utils.validation``: keys at most ``MAX_ENTITY_KEY_LENGTH`` (250) characters of a
restricted alphabet, values at most ``MAX_PARAM_VAL_LENGTH`` (6000) characters. MLflow itself
would silently cut a long value, so two configs that differ only past the cut would look equal;
here every cut keeps a hash of the full text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import yaml
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

from rag_experiments.common.redact import REDACTED, is_secret_key, redact
from rag_experiments.errors import TrackingError
from rag_experiments.tracking.names import hash_suffixed, sanitize_metric_name

_YAML_LINE = re.compile(r"^(\s*(?:-\s*)?)([^:#\s][^:#]*?)(\s*:\s*)\S.*$")
"""``<indent><key>: <value>`` in YAML that did not parse (fallback redaction)."""


def flatten_params(config: Mapping[str, Any]) -> dict[str, str]:
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
        config: A nested config as plain data (dicts, lists and scalars).

    Returns:
        ``{key: value}``, each key and value within MLflow's limits, in the config's order.

    Raises:
        TrackingError: If two config paths end up under the same key once sanitised.
    """
    flat: dict[str, str] = {}
    origin: dict[str, str] = {}
    for path, value in _walk(redact(dict(config)), ""):
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


def redact_yaml(text: str) -> str:
    """Redact secrets in a YAML document.

    The document is parsed, redacted with :func:`~rag_experiments.tracking.names.redact` and
    dumped again (key order kept); when nothing is secret the text is returned unchanged. Text
    that is not YAML is redacted line by line (``key: value`` lines with a secret key, and
    ``Bearer`` credentials).

    Args:
        text: YAML text (the resolved config the engine logs).

    Returns:
        The redacted YAML text.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if isinstance(data, (dict, list)):
        clean = redact(data)
        if clean == data:
            return text
        return yaml.safe_dump(clean, sort_keys=False, allow_unicode=True)
    out = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        m = _YAML_LINE.match(body)
        if m and is_secret_key(m.group(2)):
            line = f"{m.group(1)}{m.group(2)}{m.group(3)}{REDACTED}{line[len(body) :]}"
        out.append(redact(line))
    return "".join(out)
