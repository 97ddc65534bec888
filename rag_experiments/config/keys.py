"""Unknown config keys, named with the schema's closest key ("did you mean top_k").

Every config node is typed by a schema dataclass (:mod:`rag_experiments.config.schema`), so
the keys a node accepts are that dataclass's fields. A misspelled key reaches us two ways:

* ``retriever.topk=3``: Hydra refuses the override while composing (an OmegaConf
  ``ConfigKeyError`` that names the key and the node's schema, chained as the cause of Hydra's
  ``ConfigCompositionException``); :func:`explain` turns it into our line;
* ``+retriever.topk=3``: Hydra *adds* the key (``+`` bypasses the schema), and the part's
  constructor would later fail with ``TypeError: unexpected keyword argument``;
  :func:`check_keys` finds it in the composed config before anything is built.

Suggestions are :func:`difflib.get_close_matches` over the node's fields (Ratcliff/Obershelp
similarity ≥ :data:`CUTOFF`, Python's default).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rag_experiments.errors import ConfigError

CUTOFF = 0.6
"""Least similarity (0–1) of a suggested key (difflib's default)."""


def schema_fields(schema: Any) -> list[str]:
    """The field names of a schema dataclass, in declaration order ([] for anything else)."""
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        return [f.name for f in dataclasses.fields(schema)]
    return []


def _hydra_key(key: str) -> bool:
    """``_target_``, ``_partial_``, ``_convert_`` …: keys of Hydra's instantiate, not fields."""
    return len(key) > 2 and key.startswith("_") and key.endswith("_")


def suggestion(full_key: str, key: str, schema: Any) -> str:
    """One line saying that ``full_key`` is not a key of its node, with the closest keys.

    Args:
        full_key: Dotted path of the unknown key (``retriever.topk``).
        key: Its last part (``topk``).
        schema: The node's schema dataclass.

    Returns:
        E.g. ``retriever.topk is not a config key (RetrieverConf has no 'topk'): did you mean
        retriever.top_k? Its keys: _target_, top_k, depth``.
    """
    fields = schema_fields(schema)
    parent = full_key.rpartition(".")[0]
    where = f"{parent}." if parent else ""
    close = difflib.get_close_matches(key, fields, n=3, cutoff=CUTOFF)
    hint = (
        "did you mean " + " or ".join(f"{where}{c}" for c in close) + "?"
        if close
        else "no key of it is close"
    )
    return (
        f"{full_key} is not a config key ({schema.__name__} has no {key!r}): {hint} "
        f"Its keys: {', '.join(fields)}"
    )


def unknown_keys(cfg: DictConfig) -> list[tuple[str, str, type]]:
    """Keys of the composed config that no schema declares (added with ``+``).

    A node is checked when its type is a schema dataclass; nodes typed ``Dict`` (a metrics
    suite, scripted responses) take any key.

    Returns:
        ``(full key, key, schema)`` per unknown key, in config order.
    """
    found: list[tuple[str, str, type]] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, DictConfig):
            return
        fields = schema_fields(OmegaConf.get_type(node))
        for key in node.keys():
            key = str(key)
            full = f"{path}.{key}" if path else key
            if fields and key not in fields and not _hydra_key(key):
                found.append((full, key, OmegaConf.get_type(node)))
                continue
            walk(node._get_node(key), full)

    walk(cfg, "")
    return found


def check_keys(cfg: DictConfig) -> None:
    """Refuse a composed config holding keys its schemas do not declare.

    Raises:
        ConfigError: One line per unknown key with the closest declared keys.
    """
    bad = unknown_keys(cfg)
    if bad:
        raise ConfigError("; ".join(suggestion(*b) for b in bad))


def explain(exc: BaseException) -> str | None:
    """Our line for a Hydra composition error caused by an unknown key (``retriever.topk=3``),
    or None when the error is of another kind.

    Args:
        exc: Hydra's exception; its ``__cause__`` is OmegaConf's error, which names the key
            (``key``, ``full_key``) and the node's schema (``object_type``).
    """
    cause = exc.__cause__
    if not isinstance(cause, OmegaConfBaseException):
        return None
    schema = getattr(cause, "object_type", None)
    key = getattr(cause, "key", None)
    full_key = getattr(cause, "full_key", None) or key
    if key is None or not schema_fields(schema) or str(key) in schema_fields(schema):
        return None
    return suggestion(str(full_key), str(key), schema)
