"""Bounded, strictly typed versions of DeepEval's output schemas: :func:`bounded_schema`.

DeepEval's schemas (4.x, ``deepeval/metrics/<name>/schema.py``) have unbounded lists
(``claims: List[str]``, ``verdicts: List[...]``) and validate loosely (pydantic's lax mode: a
``5`` for a string, ``"5"`` or ``true`` for an integer). A grammar-constrained small model
fills an unbounded list until ``max_tokens`` and the call ends ``truncated`` — with the
embedded 135M judge, nearly every row did. The judge is therefore asked with a stricter copy of
the schema (the same fields, nothing DeepEval reads is removed):

- every list holds at most ``max_items`` items; a verdict list whose length DeepEval needs to
  match something (one verdict per claim, per statement, per context) holds exactly that many
  when the count is known;
- every free string holds at most ``max_chars`` characters;
- a ``verdict`` holds exactly one of DeepEval's words as a plain string: its ``YesNo``
  (``"yes" | "no"``) or ``YesNoBorderline`` (``"yes" | "no" | "borderline"``) literal of
  ``Verdict`` members becomes the literal of their values, and a free ``verdict: str`` (older
  DeepEval) becomes ``"yes" | "no"``. ``"Yes"``, ``"idk"`` (DeepEval 2.9's word) or ``true``
  are invalid;
- every model is validated in pydantic's *strict* mode: no ``true`` for an integer, no
  ``"5"`` for ``5``, no number for a string (the JSON Schema the judge is given is unchanged).

The reply is validated against the strict copy, then converted back to DeepEval's own class
(:func:`to_deepeval`), so DeepEval receives exactly the types it declares (``Verdict`` members).
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

VERDICT_LIST_FIELD = "verdicts"
"""The list field DeepEval aligns with what it judged."""

VERDICT_FIELD = "verdict"
"""The field holding one verdict word."""

_STRICT = ConfigDict(strict=True)


def bounded_schema(
    schema: type[BaseModel], *, max_items: int, max_chars: int, n_verdicts: int | None = None
) -> type[BaseModel]:
    """A stricter copy of one of DeepEval's output models (see the module docstring).

    Args:
        schema: DeepEval's model (``Claims``, ``Verdicts``, ``Truths`` …).
        max_items: Upper bound of every list (≥ 1).
        max_chars: Upper bound of every free string, characters (≥ 1).
        n_verdicts: Exact length of the ``verdicts`` list when known (≥ 0), else None.

    Returns:
        A strict model named like ``schema`` with the same field names and bounded types
        (nested models are bounded copies too, named like theirs).
    """
    fields: dict[str, Any] = {}
    for name, info in schema.model_fields.items():
        annotation = _bound(info.annotation, max_items, max_chars, name)
        if name == VERDICT_LIST_FIELD and n_verdicts is not None:
            annotation = _exact_list(info.annotation, n_verdicts, max_items, max_chars)
        default = ... if info.is_required() else info.default
        fields[name] = (annotation, default)
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        schema.__name__, __config__=_STRICT, **fields
    )
    return model


def to_deepeval(schema: type[BaseModel], value: BaseModel) -> BaseModel:
    """``value`` (an instance of a :func:`bounded_schema` copy) as an instance of ``schema``
    (verdict strings become DeepEval's ``Verdict`` members)."""
    return schema.model_validate(value.model_dump())


def verdict_words(annotation: Any) -> tuple[str, ...] | None:
    """The verdict words a ``verdict`` field's type allows, or None when it is not a verdict.

    Args:
        annotation: The field's type: ``str`` (``"yes"``/``"no"``), a ``Literal`` of strings
            or of ``str`` enum members (DeepEval's ``YesNo`` / ``YesNoBorderline``).

    Returns:
        The words as plain strings, in DeepEval's order.
    """
    if annotation is str:
        return ("yes", "no")
    if typing.get_origin(annotation) is Literal:
        return tuple(
            v.value if isinstance(v, enum.Enum) else str(v) for v in typing.get_args(annotation)
        )
    return None


def _bound(annotation: Any, max_items: int, max_chars: int, field: str) -> Any:
    """The bounded form of one field's type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if field == VERDICT_FIELD and (words := verdict_words(annotation)) is not None:
        return Literal[words]  # type: ignore[valid-type]
    if annotation is str:
        return Annotated[str, Field(max_length=max_chars)]
    if origin is list and args:
        item = _bound(args[0], max_items, max_chars, "")
        return Annotated[list[item], Field(max_length=max_items)]  # type: ignore[valid-type]
    if origin in (typing.Union, types.UnionType) and args:
        bounded = tuple(_bound(a, max_items, max_chars, field) for a in args)
        return typing.Union[bounded]  # noqa: UP007
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return bounded_schema(annotation, max_items=max_items, max_chars=max_chars)
    return annotation


def _exact_list(annotation: Any, n: int, max_items: int, max_chars: int) -> Any:
    """``list[item]`` of exactly ``n`` bounded items."""
    (item,) = typing.get_args(annotation)
    bounded_item = _bound(item, max_items, max_chars, "")
    return Annotated[list[bounded_item], Field(min_length=n, max_length=n)]  # type: ignore[valid-type]
