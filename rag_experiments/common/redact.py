"""Secrets that must never reach a log, a message, a tracked param or an artifact.

:func:`redact` replaces the value of every secret-looking key (:func:`is_secret_key`) and every
``Bearer <credential>`` in a string by :data:`REDACTED`; :func:`public_url` hides the password of
a URL. The tracker redacts params, tags and the config artifact with them; the HTTP target
redacts its headers and URLs.

The module imports nothing else of the package, so any layer can use it.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REDACTED = "***REDACTED***"
"""What replaces a secret value."""

_SECRET_WORDS: tuple[tuple[str, ...], ...] = (
    ("api", "key"),
    ("apikey",),
    ("token",),
    ("secret",),
    ("password",),
    ("passwd",),
    ("authorization",),
)
"""Word sequences that mark a key as secret (matched on whole word parts, see
:func:`is_secret_key`)."""

_BEARER = re.compile(r"\bBearer\s+\S+", re.IGNORECASE)
"""A bearer credential inside a string value (``Authorization: Bearer abc…``)."""

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def is_secret_key(key: str) -> bool:
    """Tell whether a mapping key names a secret.

    The key is split into lower-case word parts at non-alphanumerics and camelCase boundaries
    (``openaiApiKey`` → ``openai, api, key``; ``X-Auth-Token`` → ``x, auth, token``). It is
    secret when the parts contain ``api key``, ``apikey``, ``token``, ``secret``, ``password``,
    ``passwd`` or ``authorization`` as whole consecutive parts. Whole parts keep ordinary keys
    such as ``max_tokens`` or ``tokenizer`` public.

    Args:
        key: A mapping key (a non-string key is converted with ``str``).

    Returns:
        True when the key's value must be redacted.
    """
    parts = [p.lower() for p in _WORD_SPLIT.split(_CAMEL_BOUNDARY.sub("_", str(key))) if p]
    for words in _SECRET_WORDS:
        n = len(words)
        if any(tuple(parts[i : i + n]) == words for i in range(len(parts) - n + 1)):
            return True
    return False


def redact(obj: Any) -> Any:
    """Return a copy of ``obj`` with every secret replaced by :data:`REDACTED`.

    Walks nested dicts, lists and tuples. The whole value of a secret key (see
    :func:`is_secret_key`) is replaced, whatever its type; in every string, each
    ``Bearer <credential>`` is replaced too (``"Authorization: Bearer abc"`` →
    ``"Authorization: ***REDACTED***"``). Other values are returned as they are; so is a secret
    key whose value is None (nothing to hide, and ``rag-exp rerun`` can reuse the config).

    Args:
        obj: A config-like structure (dicts, lists, scalars).

    Returns:
        The redacted copy (dicts and lists are new objects; tuples become lists).
    """
    if isinstance(obj, dict):
        return {
            k: (REDACTED if is_secret_key(k) and v is not None else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return _BEARER.sub(REDACTED, obj)
    return obj


def public_url(url: str) -> str:
    """``url`` with a password in its user-info part replaced by :data:`REDACTED`.

    Args:
        url: Any URL (``https://user:pw@host:8443/path``).

    Returns:
        The URL with ``pw`` replaced; unchanged when it holds no password.
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{REDACTED}@{parts.hostname}"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
