"""How a schema dataclass declares the config group and name it is stored under, once, where it
is defined (:func:`option`), and the table gathered from those declarations (:data:`SCHEMAS`).

The schemas themselves are in :mod:`rag_experiments.config.schema`, which re-exports these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SchemaOption:
    """What a schema dataclass declares with :func:`option`: the config group and schema name
    it is stored as (``/schema/<group>/<name>``), and how its fields meet the constructor of
    the class its ``_target_`` names (checked by ``tests/config/test_config_schemas.py``).

    Attributes:
        group: The config group (``retriever``).
        name: The schema's name in the group (``bm25``); YAML options name it in their
            defaults list (``/schema/retriever/bm25@_here_``).
        built: Constructor parameters the composition root passes as built objects (the
            baseline's ``chunker``, ``retriever`` …), never config keys.
        consumed: Fields the composition root reads itself instead of passing them to the
            constructor (the baseline's ``hnsw``, given to the vector index).
        own_defaults: Fields whose config default deliberately differs from the constructor's
            (the constructor's serves direct use in code).
    """

    group: str
    name: str
    built: tuple[str, ...] = ()
    consumed: tuple[str, ...] = ()
    own_defaults: tuple[str, ...] = ()


def option(
    group: str,
    name: str,
    *,
    built: tuple[str, ...] = (),
    consumed: tuple[str, ...] = (),
    own_defaults: tuple[str, ...] = (),
) -> Any:
    """Class decorator: declare a schema dataclass as ``/schema/<group>/<name>``, once, where it
    is defined; :data:`SCHEMAS` is gathered from these declarations (and a chat model's
    ``llm`` schema also gives its ``judge`` schema,
    :func:`~rag_experiments.config.schema.judge_schema`).

    Args:
        group: The config group.
        name: The schema's name in the group.
        built: See :class:`SchemaOption`.
        consumed: See :class:`SchemaOption`.
        own_defaults: See :class:`SchemaOption`.

    Raises:
        ValueError: The group already has a schema of that name.
    """

    def declare(cls: type) -> type:
        schemas = SCHEMAS.setdefault(group, {})
        if name in schemas and schemas[name] is not cls:
            raise ValueError(
                f"/schema/{group}/{name} is declared twice ({schemas[name].__name__} and "
                f"{cls.__name__}): give one of them another name"
            )
        schemas[name] = cls
        cls.__schema_option__ = SchemaOption(group, name, built, consumed, own_defaults)  # type: ignore[attr-defined]
        return cls

    return declare


def schema_option(schema: type) -> SchemaOption | None:
    """The :class:`SchemaOption` a schema dataclass declared (None for a nested or base one)."""
    declared = schema.__dict__.get("__schema_option__")
    return declared if isinstance(declared, SchemaOption) else None


SCHEMAS: dict[str, dict[str, type]] = {}
"""``{group: {schema name: dataclass}}``, gathered from the :func:`option` declarations of
:mod:`rag_experiments.config.schema` (``judge``: derived from ``llm``,
:func:`~rag_experiments.config.schema.judge_schema`); YAML files name them as
``/schema/<group>/<name>``."""
