"""Every schema dataclass of the package agrees with the constructor of the class its
``_target_`` names: the same parameter names, and the same default wherever both give one.

A field may differ from a parameter only as its :func:`~rag_experiments.config.schema.option`
declaration says (``built``: passed by the composition root; ``consumed``: read by it;
``own_defaults``), as a judge's role keys (:class:`JudgeRoleConf`) do, or as a client's flat
call settings do (``timeout_s``, ``max_retries``/``retries``, ``backoff_s``, ``backoff_max_s``
travel as one ``retry`` to a class declaring :class:`~rag_experiments.common.http.TakesRetry`).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hydra.utils import get_class
from omegaconf import MISSING

from rag_experiments.common.http import RETRY_FIELDS, TakesRetry
from rag_experiments.config.derive import constructor_parameters
from rag_experiments.config.schema import SCHEMAS, JudgeRoleConf, option, schema_option

RETRY_KEYS = frozenset({*RETRY_FIELDS, "max_retries", "retries"})
ROLE_KEYS = frozenset(f.name for f in dataclasses.fields(JudgeRoleConf))

PARTS = [
    (group, name, schema)
    for group, schemas in SCHEMAS.items()
    for name, schema in schemas.items()
    if "_target_" in {f.name for f in dataclasses.fields(schema)}
]


def _parameters(cls: type) -> dict[str, inspect.Parameter]:
    """Keyword parameters of ``cls``'s constructor, following ``**kwargs`` into the bases."""
    return {p.name: p for p in constructor_parameters(cls)}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _same(schema_value: Any, class_value: Any) -> bool:
    """Equal defaults; a class's None stands for an empty mapping or list, a tuple for a list."""
    if class_value is None and schema_value in ({}, []):
        return True
    if isinstance(class_value, tuple):
        class_value = list(class_value)
    return bool(schema_value == class_value)


def test_the_table_is_gathered_from_the_declarations() -> None:
    """Every schema of the table declared itself under the group and name it is stored at."""
    assert len(PARTS) >= 28
    for group, schemas in SCHEMAS.items():
        for name, schema in schemas.items():
            declared = schema_option(schema)
            if group == "judge":  # derived from the llm schema of the same name
                assert schema_option(SCHEMAS["llm"][name]) is not None
                continue
            assert declared is not None and (declared.group, declared.name) == (group, name)


def test_a_name_is_declared_once() -> None:
    @dataclasses.dataclass
    class Other:
        _target_: str = "x.Y"

    with pytest.raises(ValueError, match="declared twice"):
        option("retriever", "bm25")(Other)
    assert SCHEMAS["retriever"]["bm25"].__name__ == "Bm25RetrieverConf"


@pytest.mark.parametrize(("group", "name", "schema"), PARTS, ids=[f"{g}/{n}" for g, n, _ in PARTS])
def test_every_schema_matches_its_class(group: str, name: str, schema: type) -> None:
    fields = {f.name: f for f in dataclasses.fields(schema)}
    cls = get_class(fields["_target_"].default)
    declared = schema_option(schema) or schema_option(SCHEMAS["llm"][name])
    assert declared is not None
    params = _parameters(cls)
    keys = {k for k in fields if not (k.startswith("_") and k.endswith("_"))}
    keys -= set(declared.consumed)
    if group == "judge":
        keys -= ROLE_KEYS
    expected = set(params) - set(declared.built)
    if issubclass(cls, TakesRetry):  # flat keys in the config, one `retry` in the class
        assert keys & RETRY_KEYS, f"{schema.__name__}: no call settings for {cls.__name__}"
        keys -= RETRY_KEYS
        expected -= {"retry"}
    assert keys == expected, (
        f"{schema.__name__} vs {cls.__name__}.__init__: only in the schema "
        f"{sorted(keys - expected)}, only in the class {sorted(expected - keys)}"
    )
    for key in sorted(keys):
        class_default = params[key].default
        schema_default = _default(fields[key])
        if class_default is inspect.Parameter.empty or schema_default is MISSING:
            continue  # one of them gives no default
        if isinstance(schema_default, str) and "${" in schema_default:
            continue  # an interpolation of the config (`${paths.cache_dir}`)
        if dataclasses.is_dataclass(schema_default) or key in declared.own_defaults:
            continue
        assert _same(schema_default, class_default), (
            f"{schema.__name__}.{key} = {schema_default!r} but {cls.__name__}({key}="
            f"{class_default!r})"
        )
