"""Strict parsing of model output into a pydantic model.

Small local models (or servers that ignore JSON mode) wrap JSON in code fences, put prose
around it, leave trailing commas, write raw line breaks inside strings, or echo the prompt's
example before their own answer. :func:`parse_reply` reads the reply as follows:

1. every top-level JSON object in the text is a *candidate* (inside code fences or not; braces
   inside strings are respected; trailing commas are removed and raw line breaks inside
   strings accepted, nothing else is repaired);
2. the reply's answer is its **last** object: it must be complete JSON and validate against
   the schema. An earlier candidate is never used instead (it may be the prompt's example
   echoed back, e.g. grades 5/5/5 before the model's own 2/2/3); when there were several,
   the result says so (:attr:`StructuredOutput.pick_note`, ``"picked candidate 2 of 2"``);
3. a reply that ends inside an unfinished object, holds no object, or whose last object is
   not JSON or does not validate raises :class:`LLMParseError` (:class:`LLMTruncatedError`
   when the token limit cut it), carrying the raw text.

Validation is strict when the schema says so: output models derive from
:class:`StructuredOutput` (pydantic ``strict=True``: no ``true`` for an integer, no ``"5"``
for 5, no ``"true"`` for a boolean) and enumerations of numbers use :func:`strict_choice`
(pydantic's ``Literal`` takes ``true`` for ``1`` even in strict mode).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, PrivateAttr, ValidationError

from rag_experiments.common.usage import Usage
from rag_experiments.errors import LLMError

T = TypeVar("T", bound=BaseModel)

_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class StructuredOutput(BaseModel):
    """Base of the output models a model must return: strict types (pydantic
    ``strict=True``), and a note of which JSON candidate of the reply was used.

    Attributes:
        pick_note: ``"picked candidate k of n"`` when the reply held n > 1 JSON objects
            (set by :func:`parse_reply`), else None.
    """

    model_config = ConfigDict(strict=True)

    _pick_note: str | None = PrivateAttr(default=None)

    @property
    def pick_note(self) -> str | None:
        """See the class attributes."""
        return self._pick_note


def strict_choice(*values: int | str) -> Any:
    """A ``Literal[values]`` field type that accepts only values of the same Python type:
    ``true`` is not ``1`` and ``5.0`` is not ``5`` (pydantic's ``Literal`` accepts both, even
    in strict mode). The JSON schema stays an ``enum`` (what grammar-constrained models obey).

    Args:
        *values: The allowed values.

    Returns:
        An ``Annotated`` type for a pydantic field.
    """
    kinds = tuple({type(v) for v in values})

    def exact(value: Any) -> Any:
        if type(value) not in kinds:
            raise ValueError(
                f"expected one of {list(values)}, got {type(value).__name__} {value!r}"
            )
        return value

    return Annotated[Literal[values], BeforeValidator(exact)]  # type: ignore[valid-type]


class LLMParseError(LLMError):
    """The model's text is not valid JSON of the expected shape.

    Args:
        message: What is wrong with the text.
        raw: The model's raw text (for the audit trail; :attr:`LLMError.raw`).
        usage: Tokens the failed call(s) consumed, when the provider knows them
            (:attr:`LLMError.usage`).
    """

    reason = "parse_error"
    raw: str

    def __init__(self, message: str, raw: str, usage: Usage | None = None) -> None:
        super().__init__(message, raw=raw, usage=usage)


class LLMTruncatedError(LLMParseError):
    """The output was cut by the token limit (finish reason ``length``) before it was complete.
    Raise ``max_tokens`` or shorten the prompt."""

    reason = "truncated"


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A validated reply and where in the text it was found.

    Attributes:
        value: The validated instance.
        candidate: 1-based number of the JSON object used (always the last).
        candidates: JSON objects found in the reply.
    """

    value: T
    candidate: int
    candidates: int

    @property
    def note(self) -> str | None:
        """``"picked candidate k of n"`` when the reply held several objects, else None."""
        if self.candidates <= 1:
            return None
        return f"picked candidate {self.candidate} of {self.candidates}"


def json_objects(text: str) -> tuple[list[tuple[int, int]], int | None]:
    """The spans of the top-level ``{…}`` objects of ``text`` (brackets inside JSON strings
    are skipped), and where an object that never closes starts.

    Args:
        text: Raw model output.

    Returns:
        ``([(start, end), …], unclosed start or None)``; ``text[start:end]`` is one object
        (not necessarily valid JSON).
    """
    spans: list[tuple[int, int]] = []
    i = text.find("{")
    while i >= 0:
        end = _closing(text, i)
        if end is None:
            return spans, i
        spans.append((i, end))
        i = text.find("{", end)
    return spans, None


def _closing(text: str, start: int) -> int | None:
    """Index just past the bracket that closes the one at ``start``, or None."""
    depth, in_string, escaped = 0, False, False
    for j in range(start, len(text)):
        c = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _decode(span: str) -> Any:
    """``json.loads`` after removing trailing commas; raw control characters inside strings
    are accepted (small models write raw line breaks)."""
    return json.loads(_TRAILING_COMMA.sub(r"\1", span), strict=False)


def parse_reply(text: str, schema: type[T], *, finish_reason: str = "stop") -> Parsed[T]:
    """Parse ``text`` into ``schema`` by the rules of the module docs (its last JSON object).

    Args:
        text: Raw model output.
        schema: Pydantic model class the output must match.
        finish_reason: The model's finish reason; ``length`` turns an unfinished object into
            :class:`LLMTruncatedError` rather than a plain parse error.

    Returns:
        The validated instance with its candidate number (its ``pick_note`` is set when
        ``schema`` is a :class:`StructuredOutput`).

    Raises:
        LLMTruncatedError: The output was cut by the token limit inside an object.
        LLMParseError: No object, an unfinished object at the end, a last object that is not
            JSON, or one that does not match ``schema``.
    """
    spans, unclosed = json_objects(text)
    if unclosed is not None:
        if finish_reason == "length":
            raise LLMTruncatedError(
                f"output was cut by the token limit after {len(text)} characters; raise "
                "max_tokens or shorten the prompt",
                raw=text,
            )
        raise LLMParseError(
            f"output is not JSON (an object opened at char {unclosed} is never closed)",
            raw=text,
        )
    if not spans:
        raise LLMParseError("output is not JSON (it holds no JSON object)", raw=text)
    objects: list[Any] = []
    for start, end in spans[:-1]:
        try:
            objects.append(_decode(text[start:end]))
        except json.JSONDecodeError:
            continue  # braces in prose, or a broken object before the answer
    start, end = spans[-1]
    try:
        objects.append(_decode(text[start:end]))
    except json.JSONDecodeError as exc:
        raise LLMParseError(
            f"output is not JSON ({exc.msg} at char {start + exc.pos})", raw=text
        ) from exc
    where = "" if len(objects) == 1 else f" (its last of {len(objects)} JSON objects)"
    try:
        result = schema.model_validate(objects[-1])
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise LLMParseError(
            f"output{where} does not match {schema.__name__}: {loc}: {first.get('msg')}",
            raw=text,
        ) from exc
    parsed = Parsed(result, len(objects), len(objects))
    if isinstance(result, StructuredOutput):
        result._pick_note = parsed.note
    return parsed


def parse_structured(text: str, schema: type[T], *, finish_reason: str = "stop") -> T:
    """Parse ``text`` into ``schema``: :func:`parse_reply`'s value.

    Args:
        text: Raw model output.
        schema: Pydantic model class the output must match.
        finish_reason: The model's finish reason (``length``: see :func:`parse_reply`).

    Returns:
        The validated instance.

    Raises:
        LLMTruncatedError: The output was cut by the token limit inside an object.
        LLMParseError: Not JSON, or JSON of the wrong shape (see :func:`parse_reply`).
    """
    return parse_reply(text, schema, finish_reason=finish_reason).value
