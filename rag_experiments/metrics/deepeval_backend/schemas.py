"""Bounded versions of DeepEval's output schemas: :func:`bounded_schema`.

DeepEval's schemas have unbounded lists (``claims: List[str]``, ``verdicts: List[...]``) and
free strings (``verdict: str`` in the contextual metrics). A grammar-constrained small model
fills such a list until ``max_tokens`` and the call ends ``truncated`` — with the embedded
135M judge, nearly every row did. The judge is therefore asked with a stricter copy of the
schema (the same fields, nothing DeepEval reads is removed):

- every list holds at most ``max_items`` items; a verdict list whose length DeepEval needs to
  match something (one verdict per claim, per statement, per context) holds exactly that many
  when the count is known;
- every free string holds at most ``max_chars`` characters;
- a ``verdict: str`` becomes ``"yes" | "no"`` (DeepEval's prompts ask for those; it compares
  ``verdict.strip().lower() == "yes"``); ``Literal`` verdicts keep their own values.

The reply is validated against the strict copy, then converted back to DeepEval's own class
(:func:`to_deepeval`), so DeepEval receives exactly the types it declares.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

VERDICT_LIST_FIELD = "verdicts"
"""The list field DeepEval aligns with what it judged."""


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
        A subclass of ``schema`` with the same field names and bounded types.
    """
    fields: dict[str, Any] = {}
    for name, info in schema.model_fields.items():
        annotation = _bound(info.annotation, max_items, max_chars, name)
        if name == VERDICT_LIST_FIELD and n_verdicts is not None:
            annotation = _exact_list(info.annotation, n_verdicts, max_items, max_chars)
        default = ... if info.is_required() else info.default
        fields[name] = (annotation, default)
    return create_model(f"{schema.__name__}", __base__=schema, **fields)  # type: ignore[call-overload]


def to_deepeval(schema: type[BaseModel], value: BaseModel) -> BaseModel:
    """``value`` (an instance of a :func:`bounded_schema` copy) as an instance of ``schema``."""
    return schema.model_validate(value.model_dump())


def _bound(annotation: Any, max_items: int, max_chars: int, field: str) -> Any:
    """The bounded form of one field's type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is str:
        if field == "verdict":
            return Literal["yes", "no"]
        return Annotated[str, Field(max_length=max_chars)]
    if origin is list and args:
        item = _bound(args[0], max_items, max_chars, "")
        return Annotated[list[item], Field(max_length=max_items)]  # type: ignore[valid-type]
    if origin is typing.Union and args:
        return typing.Union[tuple(_bound(a, max_items, max_chars, field) for a in args)]  # noqa: UP007
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return bounded_schema(annotation, max_items=max_items, max_chars=max_chars)
    return annotation


def _exact_list(annotation: Any, n: int, max_items: int, max_chars: int) -> Any:
    """``list[item]`` of exactly ``n`` bounded items."""
    (item,) = typing.get_args(annotation)
    bounded_item = _bound(item, max_items, max_chars, "")
    return Annotated[list[bounded_item], Field(min_length=n, max_length=n)]  # type: ignore[valid-type]
