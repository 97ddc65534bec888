"""The request an :class:`~rag_experiments.targets.http.HttpTarget` sends: a JSON body template
with per-question placeholders, and headers whose secrets come from environment variables.

Placeholders are written in braces and filled by plain substitution (never ``str.format`` or
``eval``):

- **Body** (any JSON structure of dicts, lists and strings): ``{user_input}`` (the question),
  ``{id}`` (the sample id) and ``{question_type}`` (``""`` when unset). A string that is exactly
  one placeholder becomes the value itself; inside a longer string the value is spliced in.
  ``{{`` and ``}}`` stand for literal braces. Any other name in braces is a config error, so a
  typo such as ``{question}`` fails before the first request.
- **Headers**: ``{env:NAME}`` is replaced by the environment variable ``NAME`` when the target
  is built (a missing variable is a config error). Write tokens this way, e.g.
  ``Authorization: "Bearer {env:RAG_API_TOKEN}"``: the config (and so the MLflow params, the
  ``config.yaml`` artifact and the tags) only ever holds the placeholder, never the token.
  Hydra's own ``${oc.env:NAME}`` would be resolved when the config is composed and could reach
  the logged config; the harness redacts keys named like secrets (``Authorization``,
  ``*token*``, ``*api_key*``) and ``Bearer …`` strings, but a token under another header name
  would not be caught, so use ``{env:NAME}``.

Every value that came from the environment is a *secret*: :meth:`RequestTemplate.scrub`
replaces each of them (and any ``Bearer …`` credential) with ``***REDACTED***`` in a text, and
:meth:`RequestTemplate.public_headers` shows an interpolated or secret-named header as
``***REDACTED***``; the target passes every log line, error message and tag through them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from rag_experiments.common.redact import REDACTED, is_secret_key, redact
from rag_experiments.errors import ConfigError
from rag_experiments.records import Sample

BODY_FIELDS: tuple[str, ...] = ("user_input", "id", "question_type")
"""Placeholders a body template may use."""

_BRACES = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
_ENV = re.compile(r"env:([A-Za-z_][A-Za-z0-9_]*)")


def _substitute(text: str, lookup: Any) -> Any:
    """Replace ``{name}`` by ``lookup(name)`` and ``{{``/``}}`` by literal braces.

    A text that is exactly one placeholder returns the looked-up value unchanged (any type).
    """
    whole = _BRACES.fullmatch(text)
    if whole is not None and whole.group(1) is not None:
        return lookup(whole.group(1))

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        return str(lookup(m.group(1)))

    return _BRACES.sub(repl, text)


def _walk_strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, Mapping):
        return [s for k, v in node.items() for s in (*_walk_strings(k), *_walk_strings(v))]
    if isinstance(node, (list, tuple)):
        return [s for v in node for s in _walk_strings(v)]
    return []


class RequestTemplate:
    """Body template and headers of an HTTP target.

    Args:
        body: JSON-compatible template (dicts, lists, strings, numbers, booleans, null) with
            ``{user_input}``, ``{id}``, ``{question_type}`` placeholders in its strings (keys
            included).
        headers: Header name → value; values may hold ``{env:NAME}``.
        where: Config path used in error messages (``target``).

    Raises:
        ConfigError: An unknown body placeholder, a header placeholder other than
            ``{env:NAME}``, or an environment variable that is not set.
    """

    def __init__(
        self, body: Any, headers: Mapping[str, str] | None = None, where: str = "target"
    ) -> None:
        self.where = where
        self.body = body
        self._check_body(body)
        self.header_templates = {str(k): str(v) for k, v in (headers or {}).items()}
        self.secrets: list[str] = []
        self.headers = {k: self._interpolate(k, v) for k, v in self.header_templates.items()}

    def _check_body(self, body: Any) -> None:
        for text in _walk_strings(body):
            for m in _BRACES.finditer(text):
                name = m.group(1)
                if name is not None and name not in BODY_FIELDS:
                    raise ConfigError(
                        f"{self.where}.body: unknown placeholder {{{name}}} in {text!r}; use "
                        f"{', '.join('{' + f + '}' for f in BODY_FIELDS)} (write {{{{ and }}}} "
                        "for literal braces)"
                    )

    def _interpolate(self, name: str, template: str) -> str:
        def lookup(field: str) -> str:
            m = _ENV.fullmatch(field)
            if m is None:
                raise ConfigError(
                    f"{self.where}.headers.{name}: unknown placeholder {{{field}}}; only "
                    "{env:NAME} (an environment variable) is allowed in a header"
                )
            value = os.environ.get(m.group(1))
            if value is None:
                raise ConfigError(
                    f"{self.where}.headers.{name} needs the environment variable {m.group(1)}, "
                    f"which is not set; export {m.group(1)}=… before the run"
                )
            if value:
                self.secrets.append(value)
            return value

        return str(_substitute(template, lookup))

    def render(self, sample: Sample) -> Any:
        """The request body for one sample (a new structure; the template is unchanged).

        Args:
            sample: The question.

        Returns:
            The template with every placeholder filled.
        """
        values = {
            "user_input": sample.user_input,
            "id": sample.id,
            "question_type": sample.question_type or "",
        }

        def fill(node: Any) -> Any:
            if isinstance(node, str):
                return _substitute(node, values.__getitem__)
            if isinstance(node, Mapping):
                return {fill(k): fill(v) for k, v in node.items()}
            if isinstance(node, (list, tuple)):
                return [fill(v) for v in node]
            return node

        return fill(self.body)

    def public_headers(self) -> dict[str, str]:
        """Headers as they may be shown: a value filled from the environment, a secret-named
        header (``Authorization``, ``X-Api-Key`` …) or a ``Bearer …`` value is
        ``***REDACTED***``."""
        out = {}
        for name, template in self.header_templates.items():
            secret = is_secret_key(name) or "{env:" in template
            out[name] = REDACTED if secret else str(redact(template))
        return out

    def scrub(self, text: str) -> str:
        """``text`` with every secret value and ``Bearer …`` credential replaced by
        ``***REDACTED***`` (for logs and error messages)."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return str(redact(text))
