"""Unknown config keys, named with the schema's closest key ("did you mean top_k").

Every config node is typed by a schema dataclass (:mod:`rag_experiments.config.schema`), so
the keys a node accepts are that dataclass's fields. A misspelled key reaches us two ways:

* ``retriever.topk=3``: Hydra refuses the override while composing (an OmegaConf
  ``ConfigKeyError`` that names the key and the node's schema, chained as the cause of Hydra's
  ``ConfigCompositionException``); :func:`explain` turns it into our line;
* ``+retriever.topk=3``: Hydra *adds* the key (``+`` bypasses the schema), and the part's
  constructor would later fail with ``TypeError: unexpected keyword argument``;
  :func:`check_keys` finds it in the composed config before anything is built.

A metrics suite (``metrics.suite``) is a mapping of free entry names to components of different
classes, which a Hydra structured config cannot type (its ``Dict`` value type is one class), so
:func:`check_suite` types it against the classes themselves: every entry must name a
``_target_`` class, and each of its keys must be a parameter of that class's constructor
(``metrics.suite.faithfulness.max_tokenz`` → "did you mean max_tokens"; an entry without a
``_target_``, e.g. ``+metrics.suite.faithfulnes.max_tokens=64``, → "did you mean
faithfulness"). It runs with :func:`check_keys`, when the config is composed and again in the
composition root before anything is built; importing each ``_target_`` also registers a user's
metric class (:mod:`rag_experiments.metrics.definitions`).

Suggestions are :func:`difflib.get_close_matches` over the node's fields (Ratcliff/Obershelp
similarity ≥ :data:`CUTOFF`, Python's default).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from rag_experiments.errors import ConfigError
from rag_experiments.protocols import MetricBase

CUTOFF = 0.6
"""Least similarity (0–1) of a suggested key (difflib's default)."""


def schema_fields(schema: Any) -> list[str]:
    """The field names of a schema dataclass, in declaration order ([] for anything else)."""
    if isinstance(schema, type) and dataclasses.is_dataclass(schema):
        return [f.name for f in dataclasses.fields(schema)]
    return []


def _hydra_key(key: str) -> bool:
    """``_target_``, ``_partial_``, ``_convert_`` …: keys of Hydra's instantiate, not fields."""
    return len(key) > 2 and key.startswith("_") and key.endswith("_")


def suggestion(full_key: str, key: str, schema: Any) -> str:
    """One line saying that ``full_key`` is not a key of its node, with the closest keys.

    Args:
        full_key: Dotted path of the unknown key (``retriever.topk``).
        key: Its last part (``topk``).
        schema: The node's schema dataclass.

    Returns:
        E.g. ``retriever.topk is not a config key (RetrieverConf has no 'topk'): did you mean
        retriever.top_k? Its keys: _target_, top_k, depth``.
    """
    fields = schema_fields(schema)
    parent = full_key.rpartition(".")[0]
    where = f"{parent}." if parent else ""
    close = difflib.get_close_matches(key, fields, n=3, cutoff=CUTOFF)
    hint = (
        "did you mean " + " or ".join(f"{where}{c}" for c in close) + "?"
        if close
        else "no key of it is close."
    )
    return (
        f"{full_key} is not a config key ({schema.__name__} has no {key!r}): {hint} "
        f"Its keys: {', '.join(fields)}"
    )


def unknown_keys(cfg: DictConfig) -> list[tuple[str, str, type]]:
    """Keys of the composed config that no schema declares (added with ``+``).

    A node is checked when its type is a schema dataclass; nodes typed ``Dict`` (a metrics
    suite, scripted responses) take any key.

    Returns:
        ``(full key, key, schema)`` per unknown key, in config order.
    """
    found: list[tuple[str, str, type]] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, DictConfig):
            return
        fields = schema_fields(OmegaConf.get_type(node))
        for raw in node.keys():  # an int key (a rubric's grades) is looked up as an int
            key = str(raw)
            full = f"{path}.{key}" if path else key
            if fields and key not in fields and not _hydra_key(key):
                found.append((full, key, OmegaConf.get_type(node)))
                continue
            walk(node._get_node(raw), full)

    walk(cfg, "")
    return found


def check_keys(cfg: DictConfig) -> None:
    """Refuse a composed config holding keys its schemas do not declare.

    Raises:
        ConfigError: One line per unknown key with the closest declared keys.
    """
    bad = unknown_keys(cfg)
    if bad:
        raise ConfigError("; ".join(suggestion(*b) for b in bad))
    check_suite(cfg)


def _close(key: str, choices: list[str], where: str = "") -> str:
    """``did you mean 'faithfulness'?`` (or ``did you mean <where>max_tokens?``) for the
    choices closest to ``key``; ``no name of it is close`` when none is."""
    close = difflib.get_close_matches(key, choices, n=3, cutoff=CUTOFF)
    if not close:
        return "no name of it is close."
    shown = [f"{where}{c}" if where else repr(c) for c in close]
    return f"did you mean {' or '.join(shown)}?"


def constructor_parameters(cls: type) -> list[str]:
    """The keyword parameters a class's constructor accepts, in order: its ``__init__``'s
    named parameters, and, when it passes ``**kwargs`` on, those of its bases' ``__init__``
    (the DeepEval metrics pass theirs to :class:`~rag_experiments.metrics.deepeval_backend.
    base.DeepEvalMetric`).

    Args:
        cls: The class a ``_target_`` names.

    Returns:
        Parameter names (``self`` and ``*args``/``**kwargs`` left out).
    """
    from rag_experiments.config.derive import constructor_parameters as parameters

    return [p.name for p in parameters(cls)]


def _explain_suite(cause: OmegaConfBaseException) -> str | None:
    """Our line for an override of a suite entry or parameter the suite does not hold
    (``metrics.suite.faithfulnes.max_tokens=64``, ``metrics.suite.faithfulness.max_tokenz=1``):
    the closest entries or constructor parameters, or how to set a parameter the YAML does not
    write (with ``+``). None for any other key."""
    from hydra.utils import get_class

    full_key = str(cause.full_key or "")
    parent = cause.parent_node
    parts = full_key.split(".")
    if parts[:2] != ["metrics", "suite"] or not isinstance(parent, DictConfig):
        return None
    key = str(cause.key)
    if len(parts) == 3:
        return (
            f"{full_key} is not an entry of the suite: "
            f"{_close(key, [str(k) for k in parent.keys()])} (a new entry is added with +)"
        )
    target = parent.get("_target_")
    if len(parts) != 4 or not target:
        return None
    try:
        cls = get_class(str(target))
    except (ImportError, ValueError):
        return None
    params = constructor_parameters(cls)
    if issubclass(cls, MetricBase) and key in cls.requires | cls.uses:
        return f"{full_key} is given by the run (the metric requires it): do not set it"
    if key in params:
        return (
            f"{full_key} is a parameter of {target} the suite does not write: "
            f"set it with +{full_key}=…"
        )
    return (
        f"{full_key} is not a parameter of {target}: "
        f"{_close(key, params, '.'.join(parts[:3]) + '.')}"
    )


def check_suite(cfg: Any) -> None:
    """Refuse a metrics suite entry that names no class or a key its class does not take.

    Each entry of ``metrics.suite`` must hold a ``_target_`` naming an importable class, and
    each of its other keys must be a parameter of that class's constructor
    (:func:`constructor_parameters`), and a metric declared by its config checks its values
    (:meth:`~rag_experiments.protocols.MetricBase.declared_for`: a YAML rubric's scale,
    fields, name); the shared parts a metric ``requires`` (``judge``,
    ``embedder``) are given by the run and may not be set in the suite.

    Args:
        cfg: The composed root config (no ``metrics.suite``: nothing to check).

    Raises:
        ConfigError: One line per bad entry or key, with the closest names
            (:func:`difflib.get_close_matches`).
    """
    from hydra.utils import get_class

    suite = OmegaConf.select(cfg, "metrics.suite") if isinstance(cfg, DictConfig) else None
    if not isinstance(suite, DictConfig):
        return
    entries = {str(k): suite._get_node(k) for k in suite.keys()}
    named = [k for k, n in entries.items() if isinstance(n, Mapping) and n.get("_target_")]
    problems: list[str] = []
    for key, node in entries.items():
        full = f"metrics.suite.{key}"
        target = node.get("_target_") if isinstance(node, Mapping) else None
        if not target:
            problems.append(
                f"{full} is not an entry of the suite (it names no _target_ class): "
                f"{_close(key, [k for k in named if k != key])} The suite's entries: "
                f"{', '.join(named)}"
            )
            continue
        try:
            cls = get_class(str(target))
        except (ImportError, ValueError) as exc:
            problems.append(f"{full}._target_={target} is not an importable class: {exc}")
            continue
        params = constructor_parameters(cls)
        requires = cls.requires | cls.uses if issubclass(cls, MetricBase) else frozenset()
        given = [p for p in sorted(requires) if p in params]
        accepted = [p for p in params if p not in given]
        before = len(problems)
        for name in map(str, node.keys()):
            if _hydra_key(name) or name in accepted:
                continue
            if name in given:
                problems.append(
                    f"{full}.{name} is given by the run (the metric requires it): "
                    "remove it from the suite"
                )
                continue
            problems.append(
                f"{full}.{name} is not a parameter of {target}: "
                f"{_close(name, accepted, f'{full}.')} Its parameters: {', '.join(accepted)}"
            )
        if len(problems) == before and issubclass(cls, MetricBase) and isinstance(node, DictConfig):
            try:  # the values a metric declared by its config checks (a YAML rubric's scale)
                cls.declared_for(OmegaConf.to_container(node, resolve=True))  # type: ignore[arg-type]
            except ConfigError as exc:
                problems.append(str(exc))
    if problems:
        raise ConfigError("; ".join(problems))


def add_prompt_previews(cfg: Any) -> None:
    """Show, under each suite entry whose metric declares a ``preview`` (a YAML rubric's
    prompt, :attr:`~rag_experiments.protocols.MetricBase.preview`), that text as
    ``prompt_preview`` (what ``rag-exp run --cfg job`` prints; the entry is changed in place,
    so call it on a config that is only printed). Entries that do not compose into a class
    are left as they are (the run reports them).

    Args:
        cfg: A composed root config.
    """
    from hydra.utils import get_class

    suite = OmegaConf.select(cfg, "metrics.suite") if isinstance(cfg, DictConfig) else None
    if not isinstance(suite, DictConfig):
        return
    for key in list(suite.keys()):
        node = suite._get_node(key)
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not target:
            continue
        try:
            cls = get_class(str(target))
            if not (isinstance(cls, type) and issubclass(cls, MetricBase)):
                continue
            declared = cls.declared_for(OmegaConf.to_container(node, resolve=True))  # type: ignore[arg-type]
        except (ImportError, ValueError, ConfigError, OmegaConfBaseException):
            continue
        if declared.preview:
            with open_dict(node):
                node.prompt_preview = declared.preview


def group_choices(group: str) -> list[str]:
    """The options of a config group: the ``*.yaml`` files of ``conf/<group>/`` (bundled and
    the current folder's overlay, :func:`~rag_experiments.locations.user_conf_dir`), sorted;
    [] when ``group`` is not a group."""
    from rag_experiments.locations import CONF_DIR, user_conf_dir

    folders = [CONF_DIR, user_conf_dir()]
    return sorted({f.stem for d in folders if d is not None for f in (d / group).glob("*.yaml")})


def _explain_unselected_group(cause: OmegaConfBaseException) -> str | None:
    """Our line for an override under an optional group left null (``gate.baseline=x``
    without ``gate=default``): Hydra's advice, ``+gate.baseline=x``, only leads to another
    error. None when the key's first part is not a group or the group is selected."""
    full_key = str(cause.full_key or "")
    group, dot, _ = full_key.partition(".")
    parent = cause.parent_node
    if not dot or not isinstance(parent, DictConfig) or len(parent) or parent._key() != group:
        return None
    choices = group_choices(group)
    if not choices:
        return None
    if "default" in choices:
        fix = f"add {group}=default (choices: {', '.join(choices)})"
    else:  # no default to recommend (reranker: none, fake, http…): the user picks
        options = [c for c in choices if c != "none"] or choices
        fix = f"choose one: {group}={'|'.join(options)}"
    return f"{full_key}: the {group} group is not selected; {fix}"


def _explain_missing_option(exc: BaseException) -> str | None:
    """Our line for a group option that does not exist (``chunker=semantik``): the closest
    options and all of them, without Hydra's dump of its config search path. None for any
    other error (Hydra's :class:`~hydra.errors.MissingConfigException` names the group's
    options only for a missing option)."""
    from hydra.errors import MissingConfigException

    if not isinstance(exc, MissingConfigException) or not exc.options:
        return None
    wanted = str(exc.missing_cfg_file or "")
    group, _, name = wanted.rpartition("/")
    if not group or not name:
        return None
    options = [str(o) for o in exc.options]
    return (
        f"{group}={name}: {group} has no option {name!r}; {_close(name, options)} "
        f"Its options: {', '.join(options)} (an option of your own: ./conf/{group}/{name}.yaml)"
    )


_KINDS = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}
"""OmegaConf's type names in "could not be converted to <type>" → the words of our line."""


def _explain_bad_value(exc: BaseException) -> str | None:
    """Our line for an override whose value the key's type refuses (``retriever.top_k=abc``):
    what the key takes and its default as an example, instead of OmegaConf's wording. None
    for any other error."""
    from omegaconf.errors import ValidationError

    cause = exc.__cause__
    if not isinstance(cause, ValidationError) or not cause.full_key:
        return None
    m = re.search(
        r"Value '(.*)' (?:of type '\w+' could not be converted to (\w+)|is not a valid (bool))",
        str(cause.msg),
    )
    if not m:
        return None
    value, kind = m.group(1), m.group(2) or "Boolean"
    key, schema = str(cause.key), getattr(cause, "object_type", None)
    line = f"{cause.full_key}={value}: {cause.full_key} takes {_KINDS.get(kind, kind)}"
    fields = {f.name: f for f in dataclasses.fields(schema)} if _is_schema(schema) else {}
    default = fields[key].default if key in fields else dataclasses.MISSING
    if default is dataclasses.MISSING or default is None:
        return f"{line}, not {value!r}"
    shown = str(default).lower() if isinstance(default, bool) else default
    return f"{line}, not {value!r} (default {shown}: e.g. {cause.full_key}={shown})"


def _is_schema(schema: Any) -> bool:
    return isinstance(schema, type) and dataclasses.is_dataclass(schema)


def explain(exc: BaseException) -> str | None:
    """Our line for a Hydra composition error caused by an unknown key (``retriever.topk=3``)
    or by a key under an optional group that is not selected (``gate.baseline=x``), or None
    when the error is of another kind.

    Args:
        exc: Hydra's exception; its ``__cause__`` is OmegaConf's error, which names the key
            (``key``, ``full_key``) and the node's schema (``object_type``).
    """
    missing = _explain_missing_option(exc) or _explain_bad_value(exc)
    if missing is not None:
        return missing
    cause = exc.__cause__
    if not isinstance(cause, OmegaConfBaseException):
        return None
    ours = _explain_suite(cause) or _explain_unselected_group(cause)
    if ours is not None:
        return ours
    schema = getattr(cause, "object_type", None)
    key = getattr(cause, "key", None)
    full_key = getattr(cause, "full_key", None) or key
    if key is None or not schema_fields(schema) or str(key) in schema_fields(schema):
        return None
    return suggestion(str(full_key), str(key), schema)
