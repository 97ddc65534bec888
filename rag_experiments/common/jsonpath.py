"""JMESPath expressions written in the config (https://jmespath.org), compiled once with an
error that names the config key and the fix.

Used by every part that maps a server's JSON with expressions the user writes: the HTTP
target's ``target.response.*`` (:mod:`rag_experiments.targets.response_mapping`) and the HTTP
reranker's ``reranker.response.*`` (:mod:`rag_experiments.retrieval.rerank`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError
from jmespath.parser import ParsedResult

from rag_experiments.errors import ConfigError

_BARE_KEY_WITH_DASH = re.compile(r"(?<![\w\"])([A-Za-z_]\w*(?:-[\w-]*)+)")
"""A bare key holding ``-`` (``source-documents``): JMESPath reads ``-`` as a token, so such a
key must be a quoted identifier (JMESPath specification, "Identifiers")."""


def quoted_form(expr: str) -> str | None:
    """``expr`` with every bare key that holds a ``-`` double-quoted
    (``source-documents[*].page-content`` → ``"source-documents"[*]."page-content"``), when
    that compiles; None when there is nothing to quote, the expression already has quotes, or
    quoting does not make it valid."""
    if any(q in expr for q in "\"'`"):
        return None
    fixed = _BARE_KEY_WITH_DASH.sub(r'"\1"', expr)
    if fixed == expr:
        return None
    try:
        jmespath.compile(fixed)
    except JMESPathError:
        return None
    return fixed


def compile_expression(expr: str | None, key: str) -> ParsedResult | None:
    """Compile the JMESPath expression of config key ``key``.

    Args:
        expr: The expression, or None / ``""`` (not mapped).
        key: The dotted config key that holds it (``target.response.answer``), for the message.

    Returns:
        The compiled expression, or None when ``expr`` is None or empty.

    Raises:
        ConfigError: ``expr`` is not valid JMESPath; the message names ``key`` and, for a bare
            key holding ``-``, its quoted form written as an override and in YAML.
    """
    if expr is None or expr == "":
        return None
    try:
        return jmespath.compile(str(expr))
    except JMESPathError as exc:
        detail = " ".join(str(exc).split())
        message = f"{key}: {expr!r} is not a valid JMESPath expression ({detail})"
        fixed = quoted_form(str(expr))
        if fixed is not None:
            field = key.rsplit(".", 1)[-1]
            message += (
                f". A key holding '-' must be double-quoted in JMESPath: {fixed} . In a Hydra "
                "override the expression goes in single quotes, the whole argument in shell "
                "double quotes: "
                + "\"{}='{}'\"".format(key, fixed.replace('"', '\\"'))
                + f" ; in a YAML config: {field}: '{fixed}'"
            )
        else:
            message += "; see https://jmespath.org/tutorial.html"
        raise ConfigError(message) from None


def peek(payload: Any) -> str:
    """A short description of a decoded JSON value for error messages: ``an object with keys
    [...]`` (at most 12 keys) or ``<type> <first 120 characters of its JSON>``."""
    if isinstance(payload, dict):
        return f"an object with keys {sorted(payload)[:12]}"
    kind = "null" if payload is None else type(payload).__name__
    text = json.dumps(payload, ensure_ascii=False, default=str)
    return f"{kind} {text[:120]}"
