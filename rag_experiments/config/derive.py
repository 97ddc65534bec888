"""Schemas derived from a part's constructor, for a part that has only a class and a YAML file.

The package's own parts have schema dataclasses (:mod:`rag_experiments.config.schema`, each
declared with :func:`~rag_experiments.config.schema.option`, checked against its class by
``tests/config/test_config_schemas.py``), and their YAML files name them. A user's new part is a
class in a module beside their ``./conf`` overlay and a file ``conf/<group>/<name>.yaml``
holding its ``_target_`` and the keys they set, with no schema and no defaults list. For such a
file, :func:`register_derived` makes a schema from the class's ``__init__`` (parameter names,
type hints, defaults; see :func:`constructor_schema`) and stores it in Hydra's ConfigStore as
``derived/<group>/<name>``. The primary configs' defaults lists hold, for every part group, an
entry ``optional derived/<group>@<group>: ${<group>}`` before the group's own entry (Hydra's
config group interpolation), so the chosen option is composed over its derived schema when it
has one: a misspelled or mistyped key, in the YAML or on the command line, fails when the
config is composed, as for a bundled part, and every constructor parameter can be set
(``retriever.depth=20``) without ``+``. The bundled options have no ``derived/`` node, so
their entries are skipped.

Only the YAML files of the overlay folders are read, and only the classes of those that name
no schema are imported (the package's part modules are never imported to find schemas).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import inspect
import logging
import sys
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, OmegaConf

log = logging.getLogger(__name__)

DERIVED = "derived"
"""The ConfigStore group under which derived schemas are stored (``derived/<group>/<name>``)."""

_MADE: dict[tuple[str, str, tuple[tuple[str, Any], ...]], type] = {}


def part_groups() -> list[str]:
    """The config groups whose options are parts built from a ``_target_`` class: the groups
    of :data:`~rag_experiments.config.schema.SCHEMAS` whose schemas have a ``_target_`` field
    (``dataset``, ``retriever``, ``llm``, ``judge`` …)."""
    from rag_experiments.config.schema import SCHEMAS

    return [
        group
        for group, schemas in SCHEMAS.items()
        if any("_target_" in {f.name for f in dataclasses.fields(s)} for s in schemas.values())
    ]


def _hydra_key(key: str) -> bool:
    return len(key) > 2 and key.startswith("_") and key.endswith("_")


def constructor_parameters(cls: type) -> list[inspect.Parameter]:
    """The keyword parameters of ``cls``'s constructor, in order, following ``**kwargs`` into
    the bases' constructors (a subclass passing them on, as a retriever to
    :class:`~rag_experiments.retrieval.base.RetrieverBase`)."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in found:
                found[p.name] = p.replace(annotation=_hint(init, p))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return list(found.values())


def _hint(function: Any, param: inspect.Parameter) -> Any:
    """The evaluated type hint of ``param`` (``Any`` when it has none or cannot be evaluated:
    a name imported under ``TYPE_CHECKING`` only)."""
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return Any
    if not isinstance(annotation, str):
        return annotation
    namespace = {**vars(typing), **getattr(function, "__globals__", {})}
    try:
        return eval(annotation, namespace)  # noqa: S307 - a type hint of the user's own class
    except Exception:  # noqa: BLE001 - an unresolvable hint types nothing
        return Any


def _accepted(name: str, hint: Any, value: Any) -> bool:
    """Whether OmegaConf takes ``hint`` as a field type with default ``value``."""
    try:
        made = dataclasses.make_dataclass("_Probe", [(name, hint, _field(value))])
        OmegaConf.structured(made)
    except Exception:  # noqa: BLE001 - any refusal means: not this type
        return False
    return True


def _field(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict)):
        copy = list(value) if isinstance(value, (list, tuple)) else dict(value)
        return dataclasses.field(default_factory=lambda: copy)
    return dataclasses.field(default=value)


_PLAIN = (str, int, float, bool, enum.Enum, list, tuple, dict, type(None))


def _spec(param: inspect.Parameter) -> tuple[str, Any, Any] | None:
    """``(name, type, field)`` of one parameter, or None when its default is an object a
    config cannot hold (the parameter is then left to the class's default)."""
    default = param.default
    if default is inspect.Parameter.empty:
        value: Any = MISSING
    elif isinstance(default, Path):
        value = str(default)
    elif isinstance(default, _PLAIN):
        value = default
    else:
        return None
    hint = param.annotation
    for candidate in (hint, Optional[hint], Any):  # noqa: UP045 - OmegaConf reads Optional
        if _accepted(param.name, candidate, value):
            return param.name, candidate, _field(value)
    return None


def constructor_schema(cls: type, group: str, hydra_keys: dict[str, Any] | None = None) -> type:
    """A schema dataclass of ``cls``'s constructor, for options of ``group``.

    One field per keyword parameter (:func:`constructor_parameters`): its type hint when
    OmegaConf can type a field with it (else ``Optional`` of it, else ``Any``), its default
    (none: required, ``???``; a list or tuple: a list). A parameter whose default is an object
    (not a string, number, boolean, enum, list, mapping or None) is left out, so the class
    keeps its default. A class declaring :class:`~rag_experiments.common.http.TakesRetry`
    takes ``retry`` as the flat keys ``timeout_s``, ``max_retries``, ``backoff_s``,
    ``backoff_max_s`` (as the bundled clients' configs write them). A ``judge`` schema adds
    the judge-role keys (:class:`~rag_experiments.config.schema.JudgeRoleConf`).

    Args:
        cls: The part's class.
        group: The config group (``retriever``).
        hydra_keys: Hydra's keys the YAML writes (``_target_``, ``_convert_`` …) and their
            values, which become fields too.

    Returns:
        The dataclass ``<Class>Conf`` (``<Class>JudgeConf`` for a judge; a hash appended when
        another class took that name), made once per (class, group, Hydra keys) and kept as
        an attribute of this module (so configs typed with it pickle).
    """
    from rag_experiments.common.http import RetryPolicy, TakesRetry
    from rag_experiments.config.schema import JudgeRoleConf

    target = f"{cls.__module__}.{cls.__qualname__}"
    keys = dict(hydra_keys or {})
    keys.setdefault("_target_", target)
    memo = (target, group, tuple(sorted((k, str(v)) for k, v in keys.items())))
    if memo in _MADE:
        return _MADE[memo]
    specs: list[tuple[str, Any, Any]] = [
        (k, Any, dataclasses.field(default=v)) for k, v in keys.items()
    ]
    for param in constructor_parameters(cls):
        if param.name == "retry" and issubclass(cls, TakesRetry):
            specs += [
                ("timeout_s", float, dataclasses.field(default=RetryPolicy.timeout_s)),
                ("max_retries", int, dataclasses.field(default=RetryPolicy.max_retries)),
                ("backoff_s", float, dataclasses.field(default=RetryPolicy.backoff_s)),
                ("backoff_max_s", float, dataclasses.field(default=RetryPolicy.backoff_max_s)),
            ]
            continue
        spec = _spec(param)
        if spec is not None:
            specs.append(spec)
    if group == "judge":
        taken = {name for name, _, _ in specs}
        specs += [
            (f.name, f.type, dataclasses.field(default=f.default))
            for f in dataclasses.fields(JudgeRoleConf)
            if f.name not in taken
        ]
    name = f"{cls.__name__}{'Judge' if group == 'judge' else ''}Conf"  # as the bundled ones
    if name in vars(sys.modules[__name__]):  # another class of that name: told apart by a hash
        digest = hashlib.sha1("|".join(map(str, memo)).encode()).hexdigest()[:8]
        name = f"{name}_{digest}"
    made = dataclasses.make_dataclass(name, specs)
    made.__module__ = __name__
    made.__doc__ = (
        f"Derived from the constructor of ``{target}`` (no schema dataclass declares it; "
        f":mod:`{__name__}`)."
    )
    setattr(sys.modules[__name__], name, made)
    _MADE[memo] = made
    return made


def untyped_option(path: Path) -> dict[str, Any] | None:
    """The Hydra keys (``_target_`` …) of an option file that names a class but no schema,
    or None for any other file (one with a defaults list naming a config, without
    ``_target_``, unreadable).

    Args:
        path: A ``conf/<group>/<name>.yaml`` file.
    """
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("_target_"), str):
        return None
    defaults = data.get("defaults", ["_self_"])
    if not isinstance(defaults, list) or any(d != "_self_" for d in defaults):
        return None
    return {k: v for k, v in data.items() if isinstance(k, str) and _hydra_key(k)}


def register_derived(config_dirs: Iterable[Path | None]) -> dict[str, dict[str, type]]:
    """Store a derived schema (:func:`constructor_schema`) for every option of a part group in
    ``config_dirs`` that names a ``_target_`` class and no schema, as
    ``derived/<group>/<name>`` in Hydra's ConfigStore (see the module docstring).

    A class that cannot be imported is skipped (logged at debug level): choosing its option
    then fails as instantiating it would, and the other options are unaffected.

    Args:
        config_dirs: Overlay config folders (a user's ``./conf``, ``--config-dir``); None
            entries are skipped. The bundled ``conf/`` needs none: its parts have schemas.

    Returns:
        ``{group: {name: schema}}`` of what was stored.
    """
    from hydra.core.config_store import ConfigStore
    from hydra.utils import get_class

    stored: dict[str, dict[str, type]] = {}
    groups = part_groups()
    for folder in config_dirs:
        if folder is None or not Path(folder).is_dir():
            continue
        for group in groups:
            for path in sorted((Path(folder) / group).glob("*.yaml")):
                keys = untyped_option(path)
                if keys is None:
                    continue
                try:
                    cls = get_class(str(keys["_target_"]))
                except Exception as exc:  # noqa: BLE001 - the user's module: any import error
                    log.debug("no derived schema for %s: %s", path, exc)
                    continue
                schema = constructor_schema(cls, group, keys)
                ConfigStore.instance().store(
                    group=f"{DERIVED}/{group}", name=path.stem, node=schema
                )
                stored.setdefault(group, {})[path.stem] = schema
    return stored


def __getattr__(name: str) -> type:
    """A derived schema another process made (a config typed with it was pickled there, e.g.
    by a multirun launcher): derived again from the current folder's ``./conf`` overlay, as
    that process did, then returned.

    Raises:
        AttributeError: ``name`` is no derived schema of the overlay.
    """
    if name.endswith("Conf") or "Conf_" in name:
        from rag_experiments.locations import user_conf_dir

        register_derived([user_conf_dir()])
        made = sys.modules[__name__].__dict__.get(name)
        if isinstance(made, type):
            return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
