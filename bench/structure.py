"""The package's structure in three numbers: upward imports, import circles, loose root modules.

Reads the source with the ``ast`` import reader of ``tests/test_import_contracts.py`` (no import
runs). Every import counts (module level, inside functions, type-only), as in the contract test.

Tiers, top to bottom (a module may import its own tier or lower ones, never a higher one);
the names come from the contract test's ``TIERS``:

====  =========  ==================================================================
tier  name       modules
====  =========  ==================================================================
3     entry      ``app``, ``cli``, ``__main__`` (the Hydra entry and the CLI)
2     commands   ``commands.*``, ``review.*``, ``mlflow_scorers`` and every other module
                 whose ``*_command`` function ``cli.py`` dispatches to (before the
                 restructure: ``lifecycle.merge``, ``lifecycle.rerun``, ``export``, …)
1     engine     ``job``, ``build``, ``runner``, ``generate.app``
0     parts      everything else
====  =========  ==================================================================

An *upward import* is one import statement whose target sits in a higher tier than its file.
An *import circle* is a strongly connected component (more than one module) of the graph
"module A imports module B" (imports of a package's own ``__init__`` by its submodules are
left out: Python runs the ``__init__`` first anyway). *Loose root modules* are the ``.py``
files at the package root other than ``__init__.py`` and ``__main__.py``.

Usage::

    python bench/structure.py          # prints the three numbers and what makes them
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_import_contracts import (  # noqa: E402
    PACKAGE,
    TIERS,
    import_circles,
    import_graph,
    module_files,
)

ENTRY = set(TIERS[0][1])
COMMANDS = TIERS[1][1]
ENGINE = TIERS[2][1]


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def command_modules(files: dict[str, Path]) -> set[str]:
    """Modules (short names) holding a command ``cli.py`` dispatches to, plus those of the
    command tier of the contract test (``commands.*``, ``review.*``, ``mlflow_scorers``)."""
    cli = f"{PACKAGE}.cli"
    found = {m for m in map(_short, files) if _under(m, COMMANDS)}
    tree = ast.parse(files[cli].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            if any(a.name.endswith("_command") or a.name == "main" for a in node.names):
                found.add(_short(node.module))
    return found - ENTRY


def tier(module: str, commands: set[str]) -> int:
    """3 entry, 2 commands, 1 engine, 0 parts (``module`` is a short name)."""
    if module in ENTRY:
        return 3
    if module in commands:
        return 2
    if _under(module, ENGINE):
        return 1
    return 0


def graph() -> dict[str, dict[str, int]]:
    """Short module name → {imported short module name: first line}
    (:func:`tests.test_import_contracts.import_graph`)."""
    full = import_graph(ROOT, PACKAGE)
    return {_short(m): {_short(t): line for t, line in e.items()} for m, e in full.items()}


def circles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import circles (:func:`tests.test_import_contracts.import_circles`)."""
    return import_circles(edges)


def main() -> None:
    files = module_files(ROOT, PACKAGE)
    edges = graph()
    commands = command_modules(files)
    upward = [
        f"{src} (tier {tier(src, commands)}) -> {dst} (tier {tier(dst, commands)}), line {line}"
        for src, targets in sorted(edges.items())
        for dst, line in sorted(targets.items())
        if tier(dst, commands) > tier(src, commands)
    ]
    loops = circles(edges)
    loose = sorted(
        p.stem
        for p in (ROOT / PACKAGE).glob("*.py")
        if p.name not in {"__init__.py", "__main__.py"}
    )
    print(f"command modules: {', '.join(sorted(commands))}")
    print(f"upward imports: {len(upward)}")
    names = {3: "entry", 2: "commands", 1: "engine"}
    for level in (3, 2, 1):
        hits = [
            u
            for u in upward
            if u.split(" -> ")[1].endswith(f"(tier {level})")
            or f"(tier {level})," in u.split(" -> ")[1]
        ]
        print(f"  into {names[level]}: {len(hits)}")
        for line in hits:
            print(f"    {line}")
    print(f"import circles: {len(loops)}")
    for comp in loops:
        print(f"  {' <-> '.join(comp)}")
    print(f"loose root modules: {len(loose)}")
    print(f"  {', '.join(loose)}")


if __name__ == "__main__":
    main()
