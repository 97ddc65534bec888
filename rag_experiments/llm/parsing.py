"""Tolerant parsing of model output into a pydantic model.

Small local models wrap JSON in code fences, put prose around it, leave trailing commas, or
write raw line breaks inside strings. :func:`parse_structured` repairs exactly those four things
and nothing else, then validates
with pydantic; anything still wrong raises :class:`LLMParseError` carrying the raw text.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ValidationError

from rag_experiments.errors import LLMError

if TYPE_CHECKING:
    from rag_experiments.llm.base import Usage

T = TypeVar("T", bound=BaseModel)

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class LLMParseError(LLMError):
    """The model's text is not valid JSON of the expected shape.

    Attributes:
        raw: The model's raw text (for the audit trail).
        usage: Tokens the failed call(s) consumed, when the provider knows them (``None``
            otherwise), so that token totals include failed calls.
    """

    reason = "parse_error"

    def __init__(self, message: str, raw: str, usage: Usage | None = None) -> None:
        self.raw = raw
        self.usage = usage
        super().__init__(message)


class LLMTruncatedError(LLMParseError):
    """The output was cut by the token limit (finish reason ``length``) before it was complete.
    Raise ``max_tokens`` or shorten the prompt."""

    reason = "truncated"


def extract_json_text(text: str) -> str:
    """Return the JSON part of ``text``: the content of the first code fence if any, else the
    span from the first ``{``/``[`` to the matching last ``}``/``]``; trailing commas removed.

    Args:
        text: Raw model output.

    Returns:
        A string that may still be invalid JSON (validation happens next).
    """
    fence = _FENCE.search(text)
    body = fence.group(1) if fence else text
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if starts:
        start = min(starts)
        closer = "}" if body[start] == "{" else "]"
        end = body.rfind(closer)
        if end > start:
            body = body[start : end + 1]
    return _TRAILING_COMMA.sub(r"\1", body.strip())


def parse_structured(text: str, schema: type[T], *, finish_reason: str = "stop") -> T:
    """Parse ``text`` into ``schema``.

    Args:
        text: Raw model output.
        schema: Pydantic model class the output must match.
        finish_reason: The model's finish reason; ``length`` turns a failure into
            :class:`LLMTruncatedError` rather than a plain parse error.

    Returns:
        The validated instance.

    Raises:
        LLMTruncatedError: The output was cut by the token limit and does not parse.
        LLMParseError: Not JSON, or JSON of the wrong shape.
    """
    candidate = extract_json_text(text)
    try:
        data = json.loads(candidate, strict=False)  # raw newlines/tabs inside strings are common
    except json.JSONDecodeError as exc:
        if finish_reason == "length":
            raise LLMTruncatedError(
                f"output was cut by the token limit after {len(text)} characters; raise "
                "max_tokens or shorten the prompt",
                raw=text,
            ) from exc
        raise LLMParseError(f"output is not JSON ({exc.msg} at char {exc.pos})", raw=text) from exc
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise LLMParseError(
            f"output does not match {schema.__name__}: {loc}: {first.get('msg')}", raw=text
        ) from exc
