"""The package's structure in numbers: the three of the tiers above the parts (upward imports,
import circles, loose root modules) and the five that issue 37 must show (MLflow outside
``tracking/``, ``tracking/`` importing what it must not, big modules, hand-kept part lists, raw
``cfg`` below the engine), each printed with the files that make it.

Reads the source with the ``ast`` import reader of ``tests/test_import_contracts.py`` (no import
of the package runs; Python's standard library only). Every import counts (module level, inside
functions, type-only), as in the contract test.

Tiers, top to bottom (a module may import its own tier or lower ones, never a higher one);
the names come from the contract test's ``TIERS``:

====  =========  ==================================================================
tier  name       modules
====  =========  ==================================================================
3     entry      ``app``, ``cli``, ``__main__``, ``run_help`` (the Hydra entry and the CLI)
2     commands   ``commands.*``, ``review.*``, ``mlflow_scorers`` and every other module
                 whose ``*_command`` function ``cli.py`` dispatches to (before the
                 restructure: ``lifecycle.merge``, ``lifecycle.rerun``, ``export``, …)
1     engine     ``job``, ``build``, ``runner``, ``generate.app``
0     parts      everything else (the contract test puts them in named tiers of their own,
                 ``PART_TIERS``, and checks those; the numbers below are about tiers 1–3)
====  =========  ==================================================================

The numbers, exactly:

upward imports
    Import statements whose target sits in a higher tier than their file.
import circles
    Strongly connected components (more than one module) of the graph "module A imports
    module B" (imports of a package's own ``__init__`` by its submodules are left out: Python
    runs the ``__init__`` first anyway).
loose root modules
    The ``.py`` files at the package root other than ``__init__.py`` and ``__main__.py``.
(a) modules importing MLflow outside ``tracking/``
    Modules of the package outside ``tracking/`` with an import statement of ``mlflow`` or a
    module under it (any level), ``mlflow_scorers.py`` (which MLflow itself calls) left out
    and shown apart. Mentions in docstrings or comments do not count.
(b) imports from ``tracking/`` into ``metrics|analysis|qualify|config``
    Import statements in a module under ``tracking/`` whose target is under ``metrics``,
    ``analysis``, ``qualify`` or ``config`` (a ``from a import b, c`` is one statement).
(c) largest module, modules over 800 lines
    Lines of each ``.py`` file of the package (newline characters, as ``wc -l``); the largest,
    and every module over :data:`MAX_LINES`.
(d) hand-kept part lists
    A table from the name a user types (a config option, a CLI command, an export format) to
    the part that serves it, kept by hand: someone must edit it to add a part. Exactly: a
    module-level assignment (``NAME = …`` or ``NAME: T = …`` at the top of a module, not in a
    function or class) whose value is a *display* (not a comprehension, not a call) with at
    least :data:`MIN_PARTS` *named entries* that together name at least :data:`MIN_PARTS`
    distinct classes or functions of the package. A named entry is a ``"name": value`` pair of
    a dict display, or a tuple/list display starting with a string (``("name", value, …)``)
    inside a list, tuple or set display, whose value names a package class or function. A name
    counts wherever it appears inside the entry (nested displays, call arguments), written
    bare (``Foo``) or as an attribute of a package module (``mod.Foo``), when it resolves to a
    ``def`` or ``class`` at the top level of a package module: defined in the same module, or
    imported from the package (re-exports followed). A string ``"rag_experiments.mod:attr"``
    or ``"rag_experiments.mod.attr"`` naming such a ``def``/``class`` counts too. Instances of
    one class (``{"a": Spec(...), "b": Spec(...)}``) name one class: not a list of parts. A
    display of :data:`MIN_PARTS` or more package functions *without* names (``(f, g, h)``) is
    an ordered pipeline, not a table of options: shown apart, not counted.
(e) modules reading raw ``cfg`` below the engine
    Modules in the parts' tiers (every tier below the engine in the contract test's ``LAYERS``:
    not an entry point, command or engine), but those of :data:`CFG_EXEMPT` (the config's own
    package, the Hydra schema modules and the Hydra plugin modules, which Hydra calls with its
    config), that import ``omegaconf`` or
    ``hydra`` (any import statement, any level), or name ``cfg``: a function parameter named
    ``cfg``, or the variable ``cfg`` read or bound anywhere in the module.

Usage::

    python bench/structure.py          # prints the numbers and what makes them
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_import_contracts import (  # noqa: E402
    LAYERS,
    PACKAGE,
    TIERS,
    import_circles,
    import_graph,
    imports_of,
    module_files,
    tier_of,
)

ENTRY = set(TIERS[0][1])
COMMANDS = TIERS[1][1]
ENGINE = TIERS[2][1]

MAX_LINES = 800
"""A module over this many lines is listed by (c) (issue 37: "no module over ~800 lines")."""

MIN_PARTS = 3
"""Fewest distinct package classes/functions a display names to be a hand-kept part list (d)."""

TRACKING_MUST_NOT = ("metrics", "analysis", "qualify", "config")
"""What ``tracking/`` must not import (b)."""

CFG_EXEMPT = (
    "config",
    "generate.config",
    "qualify.config",
    "lifecycle.sweeper",
    "lifecycle.sweeper_conf",
    "lifecycle.launchers",
    "lifecycle.search_space",
    "lifecycle.callbacks",
    "lifecycle.sweep_callback",
)
"""Part modules (short names, a folder covers its modules) left out of (e): the config's own
package and the two other Hydra schema modules (``generate/config.py``, ``qualify/config.py``:
structured-config dataclasses), and the Hydra plugin modules, which Hydra calls with its config
(the sweeper, its config and search space, the launchers, the job callbacks)."""


def _short(module: str) -> str:
    return module.removeprefix(PACKAGE + ".")


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def command_modules(files: dict[str, Path]) -> set[str]:
    """Modules (short names) holding a command ``cli.py`` dispatches to, plus those of the
    command tier of the contract test (``commands.*``, ``review.*``, ``mlflow_scorers``, …)."""
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


# --- (a) and (b): imports ------------------------------------------------------------------


def mlflow_importers(files: dict[str, Path]) -> dict[str, list[int]]:
    """(a) File → lines of its ``mlflow`` imports, for every module of the package outside
    ``tracking/`` (``mlflow_scorers.py`` included: the caller sets it apart)."""
    found: dict[str, list[int]] = {}
    for module, path in files.items():
        if _under(_short(module), ("tracking",)):
            continue
        lines = [
            imp.line
            for imp in imports_of(path, module)
            if any(m == "mlflow" or m.startswith("mlflow.") for m in imp.modules)
        ]
        if lines:
            found[_rel(path)] = lines
    return found


def tracking_imports(files: dict[str, Path]) -> list[str]:
    """(b) ``file:line -> module`` for each import statement under ``tracking/`` whose target is
    under one of :data:`TRACKING_MUST_NOT`."""
    out = []
    must_not = tuple(f"{PACKAGE}.{n}" for n in TRACKING_MUST_NOT)
    for module, path in files.items():
        if not _under(_short(module), ("tracking",)):
            continue
        for imp in imports_of(path, module):
            hit = next((m for m in imp.modules if _under(m, must_not)), None)
            if hit is not None:
                out.append(f"{_rel(path)}:{imp.line} -> {_short(hit)}")
    return out


# --- (c): sizes ----------------------------------------------------------------------------


def line_counts(files: dict[str, Path]) -> list[tuple[int, str]]:
    """(c) ``(lines, file)`` of every module, largest first."""
    sizes = [(p.read_bytes().count(b"\n"), _rel(p)) for p in files.values()]
    return sorted(sizes, key=lambda s: (-s[0], s[1]))


# --- (d): hand-kept part lists -------------------------------------------------------------


class Resolver:
    """Resolves a name of a module to the package ``def``/``class`` it means, on the source.

    Args:
        files: Module name → file, every module of the package.
    """

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in files.items()}
        self.defined: dict[str, set[str]] = {}
        self.imported: dict[str, dict[str, tuple[str, str | None]]] = {}
        for module, tree in self.trees.items():
            self.defined[module] = {
                n.name
                for n in _top_level(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            }
            self.imported[module] = self._bindings(module, tree)

    def _bindings(self, module: str, tree: ast.Module) -> dict[str, tuple[str, str | None]]:
        """Top-level name → ``(package module, attribute)`` it was imported as; attribute None
        when the name is the module itself."""
        is_init = self.files[module].name == "__init__.py"
        package = module if is_init else module.rpartition(".")[0]
        out: dict[str, tuple[str, str | None]] = {}
        for node in _top_level(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name.startswith(PACKAGE):
                        out[alias.asname] = (alias.name, None)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                if base != PACKAGE and not base.startswith(PACKAGE + "."):
                    continue
                for alias in node.names:
                    name = alias.asname or alias.name
                    sub = f"{base}.{alias.name}"
                    out[name] = (sub, None) if sub in self.files else (base, alias.name)
        return out

    def callable_of(self, module: str, name: str, depth: int = 0) -> str | None:
        """``"module.name"`` of the ``def``/``class`` that ``name`` means in ``module``, or None
        (not of the package, not a function or class, or re-exported over 5 times)."""
        if depth > 5 or module not in self.files:
            return None
        if name in self.defined[module]:
            return f"{module}.{name}"
        source = self.imported[module].get(name)
        if source is None or source[1] is None:
            return None
        return self.callable_of(source[0], source[1], depth + 1)

    def module_of(self, module: str, name: str) -> str | None:
        """The package module that ``name`` means in ``module`` (an imported module), or None."""
        source = self.imported[module].get(name)
        return source[0] if source is not None and source[1] is None else None

    def named_in(self, module: str, node: ast.AST) -> set[str]:
        """Every package ``def``/``class`` the expression ``node`` of ``module`` names."""
        found: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                hit = self.callable_of(module, sub.id)
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                target = self.module_of(module, sub.value.id)
                hit = self.callable_of(target, sub.attr) if target else None
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                hit = self._dotted(sub.value)
            else:
                hit = None
            if hit is not None:
                found.add(hit)
        return found

    def _dotted(self, text: str) -> str | None:
        """``"pkg.mod:attr"`` or ``"pkg.mod.attr"`` naming a package ``def``/``class``."""
        if not text.startswith(PACKAGE + ".") or " " in text:
            return None
        module, sep, attr = text.partition(":")
        if not sep:
            module, _, attr = text.rpartition(".")
        return self.callable_of(module, attr)


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The statements at a module's top, those under a top-level ``if``/``try`` included."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        yield node
        if isinstance(node, ast.If):
            todo.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            todo.extend(node.body + node.orelse + node.finalbody)
            for handler in node.handlers:
                todo.extend(handler.body)


DISPLAYS = (ast.Dict, ast.List, ast.Tuple, ast.Set)


def _named_entries(value: ast.expr) -> list[ast.expr]:
    """The named entries of a display (see (d) in the module's docstring): for a dict, the
    values of its string keys; for a list/tuple/set, its tuple/list items that start with a
    string (the whole item)."""
    if isinstance(value, ast.Dict):
        return [
            v
            for k, v in zip(value.keys, value.values, strict=True)
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        ]
    return [
        item
        for item in value.elts  # type: ignore[attr-defined]
        if isinstance(item, (ast.Tuple, ast.List))
        and item.elts
        and isinstance(item.elts[0], ast.Constant)
        and isinstance(item.elts[0].value, str)
    ]


def part_lists(
    files: dict[str, Path],
) -> tuple[list[tuple[str, str, list[str]]], list[tuple[str, str, list[str]]]]:
    """(d) ``(file:line, NAME, [short names it lists])`` of every hand-kept part list, and the
    same of every ordered pipeline (a display of package functions without names, not
    counted)."""
    resolver = Resolver(files)
    out = []
    pipelines = []
    for module, tree in resolver.trees.items():
        for node in _top_level(tree):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if not isinstance(value, DISPLAYS):
                continue
            entries = [resolver.named_in(module, e) for e in _named_entries(value)]
            entries = [e for e in entries if e]
            named = set().union(*entries)
            everything = resolver.named_in(module, value)
            name = ", ".join(ast.unparse(t) for t in targets)
            where = f"{_rel(files[module])}:{node.lineno}"
            if len(entries) >= MIN_PARTS and len(named) >= MIN_PARTS:
                out.append((where, name, sorted(_short(n) for n in named)))
            elif len(everything) >= MIN_PARTS:
                pipelines.append((where, name, sorted(_short(n) for n in everything)))
    return out, pipelines


# --- (e): raw cfg below the engine ---------------------------------------------------------


def cfg_readers(files: dict[str, Path]) -> dict[str, list[str]]:
    """(e) File → what makes it a raw-``cfg`` reader (``imports omegaconf (line 12)``,
    ``cfg (line 40)``), for each part module but those of :data:`CFG_EXEMPT`."""
    parts = len(TIERS)
    found: dict[str, list[str]] = {}
    for module, path in files.items():
        if tier_of(module, PACKAGE, LAYERS)[0] < parts or _under(_short(module), CFG_EXEMPT):
            continue
        why = []
        for imp in imports_of(path, module):
            hit = next((m for m in imp.modules if _under(m, ("omegaconf", "hydra"))), None)
            if hit is not None:
                why.append(f"imports {hit} (line {imp.line})")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        cfg_lines = sorted(
            {
                n.lineno
                for n in ast.walk(tree)
                if (isinstance(n, ast.arg) and n.arg == "cfg")
                or (isinstance(n, ast.Name) and n.id == "cfg")
            }
        )
        if cfg_lines:
            shown = ", ".join(map(str, cfg_lines[:5])) + (", …" if len(cfg_lines) > 5 else "")
            why.append(f"cfg (line {shown})")
        if why:
            found[_rel(path)] = why
    return found


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

    mlflow = mlflow_importers(files)
    scorers = f"{PACKAGE}/mlflow_scorers.py"
    outside = {f: lines for f, lines in mlflow.items() if f != scorers}
    print(
        f"(a) modules importing mlflow outside tracking/ (mlflow_scorers.py aside): {len(outside)}"
    )
    for file, lines in outside.items():
        print(f"  {file} (line {', '.join(map(str, lines))})")
    if scorers in mlflow:
        print(f"  and, allowed: {scorers} (line {', '.join(map(str, mlflow[scorers]))})")

    arrows = tracking_imports(files)
    print(f"(b) imports from tracking/ into {'|'.join(TRACKING_MUST_NOT)}: {len(arrows)}")
    for arrow in arrows:
        print(f"  {arrow}")

    sizes = line_counts(files)
    big = [(n, f) for n, f in sizes if n > MAX_LINES]
    print(f"(c) largest module: {sizes[0][1]}, {sizes[0][0]:,} lines")
    print(f"    modules over {MAX_LINES} lines: {len(big)}")
    for n, f in big:
        print(f"  {f}: {n:,}")

    lists, pipelines = part_lists(files)
    print(f"(d) hand-kept part lists: {len(lists)}")
    for where, name, named in lists:
        shown = ", ".join(named[:3]) + (f", … ({len(named)})" if len(named) > 3 else "")
        print(f"  {where} {name}: {shown}")
    print(f"    not counted, ordered pipelines of package functions (no names): {len(pipelines)}")
    for where, name, named in pipelines:
        print(f"  {where} {name} ({len(named)})")

    readers = cfg_readers(files)
    print(f"(e) modules reading raw cfg below the engine: {len(readers)}")
    for file, why in readers.items():
        print(f"  {file}: {'; '.join(why)}")


if __name__ == "__main__":
    main()
