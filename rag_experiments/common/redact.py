"""Secrets that must never reach a log, a message, a tracked param or an artifact.

:func:`redact` replaces the value of every secret-looking key (:func:`is_secret_key`) and every
``Bearer <credential>`` in a string by :data:`REDACTED`; :func:`public_url` hides the password of
a URL. The tracker redacts params, tags and the config artifact with them; the HTTP target
redacts its headers and URLs.

The module imports nothing else of the package, so any layer can use it.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO
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


def secret_values(obj: Any) -> set[str]:
    """Every secret value held in ``obj``, to be scrubbed from text that was written before
    (or without) :func:`redact`: the values of secret keys (:func:`is_secret_key`) and every
    ``Bearer <credential>``'s credential, in nested dicts, lists and tuples, and in Hydra
    override strings (``judge.api_key=sk-…``, ``+target.headers.Authorization=Bearer …``).

    Args:
        obj: A config-like structure, or a list of override strings.

    Returns:
        The secret strings (empty ones left out).
    """
    found: set[str] = set()

    def visit(value: Any, secret: bool) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, secret or is_secret_key(k))
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v, secret)
        elif value is not None:
            text = str(value)
            if secret and text:
                found.add(text)
            for match in _BEARER.finditer(text):
                found.add(match.group(0).split(None, 1)[1])
            key, eq, rest = text.partition("=")
            if eq and _OVERRIDE_KEY.match(key) and is_secret_key(key.rsplit(".", 1)[-1]):
                found.update(v for v in (rest, rest.strip("'\"")) if v)

    visit(obj, False)
    return found


MIN_SCRUBBED_CHARS = 4
"""Shortest secret value :func:`scrub` replaces."""

_OVERRIDE_KEY = re.compile(r"^[+~]{0,2}[\w.\-/@]+$")
"""The key part of a Hydra override (``+judge.api_key``, ``~llm.api_key_env``)."""


def scrub(text: str, secrets: set[str]) -> str:
    """``text`` with every occurrence of every string of ``secrets`` (longest first) and every
    ``Bearer <credential>`` replaced by :data:`REDACTED`.

    Args:
        text: Any text (a file, a console line).
        secrets: Values to hide (from :func:`secret_values`); values shorter than
            :data:`MIN_SCRUBBED_CHARS` are not credible secrets and are left (replacing ``1``
            everywhere would garble the text).

    Returns:
        The scrubbed text.
    """
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_SCRUBBED_CHARS:
            text = text.replace(secret, REDACTED)
    return _BEARER.sub(REDACTED, text)


class ScrubbedStream(io.TextIOBase):
    """A text stream that writes through to ``inner`` with :func:`scrub` applied: the
    console of a command whose arguments hold secrets (Hydra echoes its overrides, e.g.
    ``Error executing job with overrides: [...]``).

    Args:
        inner: The stream written to (``sys.stderr``).
        secrets: Values to hide (from :func:`secret_values`).
    """

    def __init__(self, inner: TextIO, secrets: set[str]) -> None:
        self.inner = inner
        self.secrets = secrets

    def write(self, text: str) -> int:
        """Write ``text`` scrubbed; returns ``len(text)`` (what the caller gave)."""
        self.inner.write(scrub(text, self.secrets))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding


@contextmanager
def scrubbed_console(argv: Sequence[str]) -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` scrub the secret values of ``argv`` (a command's
    arguments, e.g. Hydra overrides ``judge.api_key=sk-…``) while the block runs; nothing
    changes when ``argv`` holds none.

    Args:
        argv: The command's arguments.
    """
    secrets = secret_values(list(argv))
    if not secrets:
        yield
        return
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ScrubbedStream(out, secrets), ScrubbedStream(err, secrets)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = out, err
