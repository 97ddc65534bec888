"""The config option a user types for a built part: ``conf/<group>/<option>.yaml`` from the
``_target_`` class it builds (``rag_experiments.chunking.semantic.SemanticChunker`` →
``semantic``), so run names and reports speak the user's words rather than class paths."""

from __future__ import annotations


def option_of(group: str, target: str) -> str | None:
    """The one bundled option of config group ``group`` whose schema builds ``target``.

    Args:
        group: The config group's last key (``chunker``).
        target: A ``_target_`` class path.

    Returns:
        The option's file stem (``semantic``): the ``conf/<group>/*.yaml`` built on the schema
        whose ``_target_`` is ``target``; among several, the group's default in
        ``conf/config.yaml``. None when no single option builds it (a user's own class).
    """
    import dataclasses
    import re

    from rag_experiments.config.schema import SCHEMAS
    from rag_experiments.locations import CONF_DIR

    schemas = [
        name
        for name, cls in SCHEMAS.get(group, {}).items()
        if any(f.name == "_target_" and f.default == target for f in dataclasses.fields(cls))
    ]
    if len(schemas) != 1:
        return None
    uses = re.compile(
        rf"^\s*-\s*/schema/{re.escape(group)}/{re.escape(schemas[0])}@_here_\s*$", re.M
    )
    folder = CONF_DIR / group
    options = (
        sorted(p.stem for p in folder.glob("*.yaml") if uses.search(p.read_text(encoding="utf-8")))
        if folder.is_dir()
        else []
    )
    if len(options) > 1:  # e.g. retriever=dense and its alias default: the group's default
        top = (CONF_DIR / "config.yaml").read_text(encoding="utf-8")
        chosen = re.search(rf"^\s*-\s*{re.escape(group)}:\s*(\S+)\s*$", top, re.M)
        options = [o for o in options if chosen and o == chosen.group(1)]
    return options[0] if len(options) == 1 else None
