"""Import contracts of the package's layers, checked on the source with ``ast`` (no import runs).

Data moves one way, config → dataset → target → metrics → tracker, and the shared pieces sit
below everything. Every ``import``/``from … import`` counts: module level, inside functions,
and under ``if TYPE_CHECKING:`` (a type-only import still couples the layers). Relative imports
are resolved against the importing module.

=================================  ==============================================================
layer (files)                      must not import
=================================  ==============================================================
``llm/``, ``embedding/`` (models)  ``metrics``, ``targets``, ``data``, ``tracking``
``llm/``                           ``embedding`` (so llm ↔ embedding cannot cycle)
``metrics/``                       ``tracking``, ``targets``
``targets/``                       ``tracking``, ``metrics``
``data/``                          ``targets``, ``metrics``, ``tracking``
``common/`` (neutral)              anything of the package but ``errors`` and ``common``
``runner.py``                      ``hydra``: directly (at any level), or through the
                                   package modules it imports at module level (transitively)
=================================  ==============================================================

A failure names ``file:line`` and the forbidden import. The checker is tested on a synthetic
tree at the end of this file, so a passing run means "no forbidden import", not "no check".
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rag_experiments"


@dataclass(frozen=True)
class Import:
    """One import statement (one name of an ``import a, b``), where it is, and whether it runs
    on import.

    Attributes:
        line: 1-based line of the statement.
        modules: Absolute module names it may import: ``("a.b",)`` for ``import a.b``;
            ``("a.b", "a.b.c", "a.b.d")`` for ``from a.b import c, d`` (``c`` may be a
            submodule).
        eager: True for a module-level import outside ``if TYPE_CHECKING:`` (it runs when the
            importing module is imported).
    """

    line: int
    modules: tuple[str, ...]
    eager: bool

    def first(self, test: Callable[[str], bool]) -> str | None:
        """The first of :attr:`modules` that ``test`` accepts, or None."""
        return next((m for m in self.modules if test(m)), None)


@dataclass(frozen=True)
class Contract:
    """Files under ``layer`` (a folder or a ``.py`` file of the package) must not import any
    module under the names in ``forbidden``: package-relative names (``"metrics"``), or a
    third-party top-level package written ``"external:hydra"``. ``forbidden == ("*",)`` forbids
    the whole package except the layer itself and the names in ``allowed``."""

    name: str
    layer: str
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()


MODEL_FORBIDDEN = ("metrics", "targets", "data", "tracking")

CONTRACTS = (
    Contract("models know no metrics/targets/data/tracking", "llm", MODEL_FORBIDDEN),
    Contract("models know no metrics/targets/data/tracking", "embedding", MODEL_FORBIDDEN),
    Contract("llm imports no embedding (no llm <-> embedding cycle)", "llm", ("embedding",)),
    Contract("metrics know no tracking/targets", "metrics", ("tracking", "targets")),
    Contract("targets know no tracking/metrics", "targets", ("tracking", "metrics")),
    Contract("data knows no targets/metrics/tracking", "data", ("targets", "metrics", "tracking")),
    Contract("common imports nothing of the package but errors", "common", ("*",), ("errors",)),
    Contract("the runner imports no Hydra", "runner.py", ("external:hydra",)),
)

KNOWN_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset()
"""``(file relative to the repository, imported module)`` pairs that break a contract today
and wait for other work. None at the moment: keep it that way."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def module_files(src_root: Path, package: str) -> dict[str, Path]:
    """Module name → file for every ``.py`` of the package (``pkg/a/__init__.py`` is
    ``pkg.a``)."""
    out = {}
    for path in sorted((src_root / package).rglob("*.py")):
        parts = list(path.relative_to(src_root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(path: Path, module: str) -> Iterator[Import]:
    """Every import statement in ``path`` (the file of ``module``), relative ones made
    absolute (see :class:`Import`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, eager: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(child.lineno, (alias.name,), eager)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{a.name}" for a in child.names if a.name != "*"]
                yield Import(child.lineno, (base, *names), eager)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, False)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                yield from visit(child, False)
            else:
                yield from visit(child, eager)

    yield from visit(tree, True)


def check_contract(contract: Contract, src_root: Path, package: str) -> list[str]:
    """Violations of ``contract`` in the tree ``src_root/package``, one line per import
    statement: ``<file>:<line>: imports <module> (<contract name>)``."""
    own = f"{package}.{contract.layer.removesuffix('.py').replace('/', '.')}"

    def bad(module: str) -> bool:
        if contract.forbidden == ("*",):
            return (
                _under(module, package)
                and module != package
                and not _under(module, own)
                and not any(_under(module, f"{package}.{a}") for a in contract.allowed)
            )
        return any(
            _under(module, f.removeprefix("external:"))
            if f.startswith("external:")
            else _under(module, f"{package}.{f}")
            for f in contract.forbidden
        )

    problems = []
    for module, path in module_files(src_root, package).items():
        if not _under(module, own):
            continue
        rel = path.relative_to(src_root).as_posix()
        for imp in imports_of(path, module):
            hit = imp.first(bad)
            if hit is not None and (rel, hit) not in KNOWN_EXCEPTIONS:
                problems.append(f"{rel}:{imp.line}: imports {hit} ({contract.name})")
    return problems


def eager_reach(start: str, src_root: Path, package: str) -> dict[str, tuple[str, ...]]:
    """Package modules that importing ``start`` runs (module-level imports followed
    transitively, parent packages' ``__init__`` included), each with a shortest chain from
    ``start``."""
    files = module_files(src_root, package)

    def with_parents(name: str) -> list[str]:
        parts = name.split(".")
        return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in files]

    chains: dict[str, tuple[str, ...]] = {}
    todo = deque((m, (start,) if m == start else (start, m)) for m in with_parents(start))
    while todo:
        name, chain = todo.popleft()
        if name in chains:
            continue
        chains[name] = chain
        for imp in imports_of(files[name], name):
            if imp.eager:
                for module in imp.modules:
                    todo.extend((m, (*chain, m)) for m in with_parents(module) if m not in chains)
    return chains


def check_no_eager_import(start: str, forbidden: str, src_root: Path, package: str) -> list[str]:
    """Module-level imports of the third-party package ``forbidden`` in any package module that
    importing ``start`` runs: ``<file>:<line>: imports <module> at module level (reached by
    a -> b -> c; …)``."""
    files = module_files(src_root, package)
    problems = []
    for name, chain in sorted(eager_reach(start, src_root, package).items()):
        rel = files[name].relative_to(src_root).as_posix()
        for imp in imports_of(files[name], name):
            hit = imp.first(lambda m: _under(m, forbidden))
            if imp.eager and hit is not None:
                problems.append(
                    f"{rel}:{imp.line}: imports {hit} at module level (reached by "
                    f"{' -> '.join(chain)}; {start} must not import {forbidden})"
                )
    return problems


# --- the contracts on the package ----------------------------------------------------------


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: f"{c.layer}: {c.name}")
def test_import_contract(contract: Contract) -> None:
    assert (ROOT / PACKAGE / contract.layer).exists(), contract.layer
    problems = check_contract(contract, ROOT, PACKAGE)
    assert not problems, "forbidden imports:\n" + "\n".join(problems)


def test_runner_imports_no_hydra_transitively() -> None:
    reach = eager_reach(f"{PACKAGE}.runner", ROOT, PACKAGE)
    assert f"{PACKAGE}.runner" in reach and len(reach) > 5  # the walk follows the imports
    problems = check_no_eager_import(f"{PACKAGE}.runner", "hydra", ROOT, PACKAGE)
    assert not problems, "Hydra imported by the runner's imports:\n" + "\n".join(problems)


# --- the checker catches what it should (a synthetic tree) ---------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for folder in [tmp_path / "pkg", *(tmp_path / "pkg").rglob("*")]:
        if folder.is_dir() and not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("", encoding="utf-8")
    return tmp_path


def test_checker_finds_top_level_function_level_relative_and_type_only_imports(
    tmp_path: Path,
) -> None:
    root = _tree(
        tmp_path,
        {
            "llm/a.py": "import os\nfrom pkg.metrics.judge import Judge\n",
            "llm/b.py": "def f():\n    import pkg.tracking.names as n\n    return n\n",
            "llm/c.py": "from ..data import base\n",
            "llm/d.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from pkg.targets.http import T\n"
            ),
            "llm/ok.py": "from pkg.errors import E\nfrom pkg.llm.a import x\nimport metrics\n",
            "metrics/judge.py": "",
            "common/x.py": (
                "from pkg.errors import E\nfrom pkg.common import y\nfrom pkg import llm\n"
            ),
        },
    )
    models = Contract("models", "llm", ("metrics", "targets", "data", "tracking"))
    assert check_contract(models, root, "pkg") == [
        "pkg/llm/a.py:2: imports pkg.metrics.judge (models)",
        "pkg/llm/b.py:2: imports pkg.tracking.names (models)",
        "pkg/llm/c.py:1: imports pkg.data (models)",
        "pkg/llm/d.py:3: imports pkg.targets.http (models)",
    ]
    common = Contract("neutral", "common", ("*",), ("errors",))
    assert check_contract(common, root, "pkg") == ["pkg/common/x.py:3: imports pkg.llm (neutral)"]


def test_checker_follows_module_level_imports_to_hydra(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "runner.py": "from pkg.a import x\n\ndef later():\n    import pkg.lazy\n",
            "a.py": "import pkg.b\nx = 1\n",
            "b.py": "import json\nfrom hydra.utils import instantiate\n",
            "lazy.py": "import hydra\n",  # only imported inside a function: not reached
        },
    )
    assert check_no_eager_import("pkg.runner", "hydra", root, "pkg") == [
        "pkg/b.py:2: imports hydra.utils at module level (reached by pkg.runner -> pkg.a -> "
        "pkg.b; pkg.runner must not import hydra)"
    ]
    direct = Contract("no hydra", "runner.py", ("external:hydra",))
    (root / "pkg" / "runner.py").write_text("def f():\n    import hydra\n", encoding="utf-8")
    assert check_contract(direct, root, "pkg") == ["pkg/runner.py:2: imports hydra (no hydra)"]


def _from_imports(paths: list[Path]) -> Iterator[tuple[str, int, str, str]]:
    """Every ``from rag_experiments… import name`` in ``paths`` (any level, relative ones
    resolved): (file, line, module, name)."""
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        rel = path.relative_to(ROOT).with_suffix("")
        package = ".".join(rel.parts[:-1])  # the folder: for __init__.py, the package itself
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if module == PACKAGE or module.startswith(PACKAGE + "."):
                for alias in node.names:
                    yield str(path.relative_to(ROOT)), node.lineno, module, alias.name


def test_every_name_imported_from_the_package_exists() -> None:
    """A function-level import of a name that moved fails only when that code path runs; this
    finds it on the source: each ``from rag_experiments.x import y`` in the package, the
    tests, the benchmarks and the Hydra plugins names a module or attribute that exists."""
    import importlib

    paths = sorted(
        p
        for folder in (PACKAGE, "tests", "bench", "hydra_plugins")
        for p in (ROOT / folder).rglob("*.py")
    )
    missing = []
    for file, line, module, name in _from_imports(paths):
        mod = importlib.import_module(module)
        if name == "*" or name in vars(mod):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except ModuleNotFoundError:
            missing.append(f"{file}:{line}: from {module} import {name}")
    assert missing == [], "\n".join(missing)
