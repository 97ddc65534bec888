"""Import contracts of the package's layers, checked on the source with ``ast`` (no import runs).

Data moves one way, config → dataset → target → metrics → tracker, and the shared pieces sit
below everything. Every ``import``/``from … import`` counts: module level, inside functions,
and under ``if TYPE_CHECKING:`` (a type-only import still couples the layers). Relative imports
are resolved against the importing module.

Every module of the package sits in one named tier, and an arrow never points up: a module may
import its own tier or a lower one (:data:`LAYERS`, top first). Above the parts there are three
tiers (:data:`TIERS`): the entry points (``app.py``, the Hydra entry of ``rag-exp run``;
``cli.py``; ``__main__.py``; ``run_help.py``, the text of ``run --help``) → the commands
(``commands/`` and the other faces users call) → the engine (``job.py``, ``runner.py``,
``build.py``, ``generate/app.py``). A command may call the engine, the engine never reaches back
into a command or the entry point, so a change to a command cannot break ``run`` and reusing the
engine (a sweeper, a rerun) does not drag Hydra's entry along. Below the engine, the parts sit
in named tiers too (:data:`PART_TIERS`), so "tracking below analysis" is a check:

===========  ===================================================  ==========================
tier         folders and root modules                             why there
===========  ===================================================  ==========================
lifecycle    ``lifecycle/``                                       runs many jobs
analysis     ``analysis/``, ``qualify/``, ``generate/`` (but its  reads what was tracked
             job, ``generate/app.py``, an engine)
tracking     ``tracking/``                                        receives records
evaluation   ``metrics/``, ``targets/``, ``config/``,             what a job evaluates, and
             ``console.py``, ``fakes/``                           how it is set
retrieval    ``retrieval/``, ``index/``, ``chunking/``            what a target searches
models       ``llm/``, ``embedding/``                             local model clients
records      ``records.py``, ``protocols.py``, ``data/``          shapes every part shares
text         ``text/``                                            word-level helpers
foundation   ``common/``, ``errors.py``, ``locations.py``,        neutral, below everything
             ``offline.py``, the package's ``__init__``
===========  ===================================================  ==========================

Within the tiers, these contracts hold too (a tier allows what it is above; a contract forbids
more):

=================================  ==============================================================
layer (files)                      must not import
=================================  ==============================================================
``tracking/``                      ``metrics``, ``analysis``, ``qualify``, ``config`` (tracking
                                   receives records, never metrics, reports or raw config)
the whole package but              ``mlflow`` (MLflow behind one door: every other module goes
``tracking/`` and                  through the tracker to write and ``tracking.store`` to read;
``mlflow_scorers.py``              the scorers are called by MLflow itself)
``llm/``, ``embedding/`` (models)  ``metrics``, ``targets``, ``data``, ``tracking``
``llm/``                           ``embedding`` (so llm ↔ embedding cannot cycle)
``metrics/``                       ``tracking``, ``targets``
``targets/``                       ``tracking``, ``metrics``
``data/``                          ``targets``, ``metrics``, ``tracking``
``common/`` (neutral)              anything of the package but ``errors`` and ``common``
``runner.py``                      ``hydra``: directly (at any level), or through the
                                   package modules it imports at module level (transitively)
the parts (every folder of         ``build`` (the composition root builds the parts; a part that
:data:`PARTS`)                     built parts itself would hide a config → object decision)
=================================  ==============================================================

And no module imports itself through others: the import graph has no circle (a circle means two
modules share a piece that belongs in a module of its own, below both).

A failure names ``file:line`` and the forbidden import. Imports that break a contract today and
wait for work under way are listed, each with its reason, in :data:`KNOWN_EXCEPTIONS`; an entry
that no longer occurs fails too, so the list only shrinks. The checker is tested on a synthetic
tree at the end of this file, so a passing run means "no forbidden import", not "no check".
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
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
    """Files under ``layer`` (a folder or a ``.py`` file of the package; ``""`` for the whole
    package) but those under ``exempt`` must not import any module under the names in
    ``forbidden``: package-relative names (``"metrics"``), or a third-party top-level package
    written ``"external:hydra"``. ``forbidden == ("*",)`` forbids the whole package except the
    layer itself and the names in ``allowed``."""

    name: str
    layer: str
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()
    exempt: tuple[str, ...] = ()


TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("entry point", ("app", "cli", "__main__", "run_help")),
    ("command", ("commands", "review", "mlflow_scorers", "pytest_plugin", "starter")),
    ("engine", ("job", "build", "runner", "generate.app")),
)
"""Tiers above the parts, top first: (name, package-relative module or folder names). Every
other module of the package is a part, in one of :data:`PART_TIERS`.

The entry points are the Hydra entry of ``rag-exp run`` (``app``), the CLI (``cli``,
``__main__``) and the text of ``rag-exp run --help`` (``run_help``, read by ``cli`` alone). The
commands are ``commands/`` and the other faces users call: the review web app (``rag-exp
review``, ``review/``), the MLflow scorers (``mlflow_scorers``, called by
``mlflow.genai.evaluate``), the pytest plugin (``pytest_plugin``: the ``rag_eval`` fixture runs
the engine) and ``rag-exp init`` (``starter``). The engine runs one job from built parts:
``job`` (an evaluation), ``generate.app`` (a dataset generation), ``runner`` (the evaluation
loop) and ``build`` (the composition root, which turns config into parts)."""

PART_TIERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("lifecycle part", ("lifecycle",)),
    ("analysis part", ("analysis", "qualify", "generate")),
    ("tracking part", ("tracking",)),
    ("evaluation part", ("metrics", "targets", "config", "console", "fakes")),
    ("retrieval part", ("retrieval", "index", "chunking")),
    ("model part", ("llm", "embedding", "verifier")),
    ("record part", ("records", "protocols", "data")),
    ("text part", ("text",)),
    ("foundation part", ("common", "errors", "locations", "offline")),
)
"""The tiers of the parts, top first, below the engine: (name, package-relative module or folder
names). The package's own ``__init__`` is in the lowest.

- *lifecycle*: sweeps, resume and checkpoints of many jobs (the Hydra sweeper and launchers
  read what ``tracking`` recorded).
- *analysis*: what reads runs back (reports, comparisons, the gate), judge qualification
  (``qualify/``) and dataset generation's parts (``generate/``, but its job ``generate.app``,
  an engine); they read through ``tracking``, so they sit above it.
- *tracking*: writes and reads runs (the only door to MLflow); it receives records, so it sits
  above everything that makes them, and knows no metric (a contract below says so).
- *evaluation*: the metrics and the targets (kept apart by contracts below), the config schemas
  (``config/``: they describe every part below), the run summary (``console``, which reads the
  metrics' definitions) and the fake model servers (``fakes/``: stand-ins for ``llm``,
  ``embedding`` and the reranker).
- *retrieval*: the retrievers and their indexes, and the chunkers.
- *models*: the chat-model and embedding clients.
- *records*: the shapes every part passes on (``records``, ``data``'s datasets and loaders)
  and the parts' protocols (``protocols``, which names ``data.base.EvalDataset``).
- *text*: word-level helpers (normalisation, sentences, overlap).
- *foundation*: neutral pieces every tier may use: ``common/``, ``errors``, the file locations,
  the offline switches."""

LAYERS = TIERS + PART_TIERS
"""Every tier of the package, top first: an import may point to its own tier or a lower one."""

PARTS = (
    "analysis",
    "chunking",
    "common",
    "data",
    "embedding",
    "index",
    "lifecycle",
    "llm",
    "metrics",
    "qualify",
    "retrieval",
    "targets",
    "text",
    "verifier",
    "tracking",
)
"""Folders of parts: built by the composition root (``build.py``), never building themselves."""

WHY_UPWARD = (
    "an arrow points up (entry point -> commands -> engine -> parts, in the tiers of LAYERS): "
    "the lower module would break when the higher one changes and a circle is one step away; "
    "move what both need down, into the lower module or a module of its own"
)
WHY_CIRCLE = (
    "these modules import each other (directly or through others): neither can be read, "
    "tested or moved alone; move the shared types or helpers into a module of their own, "
    "below both"
)

MODEL_FORBIDDEN = ("metrics", "targets", "data", "tracking")

TRACKING = Contract(
    "tracking receives records: no metrics/analysis/qualify/config",
    "tracking",
    ("metrics", "analysis", "qualify", "config"),
)
MLFLOW = Contract(
    "only tracking/ (and mlflow_scorers.py, which MLflow calls) imports MLflow",
    "",
    ("external:mlflow",),
    exempt=("tracking", "mlflow_scorers.py"),
)

CONTRACTS = (
    TRACKING,
    MLFLOW,
    Contract("models know no metrics/targets/data/tracking", "llm", MODEL_FORBIDDEN),
    Contract("models know no metrics/targets/data/tracking", "embedding", MODEL_FORBIDDEN),
    Contract("models know no metrics/targets/data/tracking", "verifier", MODEL_FORBIDDEN),
    Contract("llm imports no embedding (no llm <-> embedding cycle)", "llm", ("embedding",)),
    Contract("metrics know no tracking/targets", "metrics", ("tracking", "targets")),
    Contract("targets know no tracking/metrics", "targets", ("tracking", "metrics")),
    Contract("data knows no targets/metrics/tracking", "data", ("targets", "metrics", "tracking")),
    Contract("common imports nothing of the package but errors", "common", ("*",), ("errors",)),
    Contract("the runner imports no Hydra", "runner.py", ("external:hydra",)),
    *(
        Contract("parts do not build parts (the composition root does)", p, ("build",))
        for p in PARTS
    ),
)

KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}
"""``(file relative to the repository, imported module) → why it waits``: imports that break a
contract or point up today and wait for work under way (issue 37). An entry excuses every import
in that file of the module or of a module under it (``"mlflow"`` excuses ``mlflow.entities``).
An entry that no longer occurs fails :func:`test_every_known_exception_still_occurs`: remove it
when the import goes, so the list only shrinks (to empty)."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


Known = Mapping[tuple[str, str], str]


def _excused(rel: str, hit: str, known: Known, used: set[tuple[str, str]] | None) -> bool:
    """Whether ``known`` excuses file ``rel`` importing ``hit``; the entry that does is added to
    ``used`` (when given)."""
    entry = next((k for k in known if k[0] == rel and _under(hit, k[1])), None)
    if entry is not None and used is not None:
        used.add(entry)
    return entry is not None


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
    absolute (see :class:`Import`). Each text is parsed once (the checks read every file many
    times)."""
    text = path.read_text(encoding="utf-8")
    yield from _imports_in(text, str(path), module, path.name == "__init__.py")


@functools.lru_cache(maxsize=4096)
def _imports_in(text: str, filename: str, module: str, is_init: bool) -> tuple[Import, ...]:
    tree = ast.parse(text, filename=filename)
    package = module if is_init else module.rpartition(".")[0]

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

    return tuple(visit(tree, True))


def _module_name(package: str, layer: str) -> str:
    """The module name of a layer: ``"tracking"`` → ``"pkg.tracking"``, ``"runner.py"`` →
    ``"pkg.runner"``, ``""`` (the whole package) → ``"pkg"``."""
    return ".".join(filter(None, (package, layer.removesuffix(".py").replace("/", "."))))


def check_contract(
    contract: Contract,
    src_root: Path,
    package: str,
    known: Known = KNOWN_EXCEPTIONS,
    used: set[tuple[str, str]] | None = None,
) -> list[str]:
    """Violations of ``contract`` in the tree ``src_root/package``, one line per import
    statement: ``<file>:<line>: imports <module> (<contract name>)``. Imports ``known`` excuses
    are left out (and the entries that excused them added to ``used``)."""
    own = _module_name(package, contract.layer)
    exempt = [_module_name(package, e) for e in contract.exempt]

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
        if not _under(module, own) or any(_under(module, e) for e in exempt):
            continue
        rel = path.relative_to(src_root).as_posix()
        for imp in imports_of(path, module):
            hit = imp.first(bad)
            if hit is not None and not _excused(rel, hit, known, used):
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


def tier_of(module: str, package: str, tiers=LAYERS) -> tuple[int, str]:
    """``(rank, name)`` of a module's tier: 0 for the top tier of ``tiers``; the package itself
    (its ``__init__``) is in the lowest; ``len(tiers)`` (name ``"part"``) for a module in none
    of them."""
    if module == package:
        return len(tiers) - 1, tiers[-1][0]
    for rank, (name, members) in enumerate(tiers):
        if any(_under(module, f"{package}.{m}") for m in members):
            return rank, name
    return len(tiers), "part"


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def check_upward(
    src_root: Path,
    package: str,
    tiers=LAYERS,
    known: Known = KNOWN_EXCEPTIONS,
    used: set[tuple[str, str]] | None = None,
) -> list[str]:
    """Imports that point to a higher tier than their file's, one line each:
    ``<file>:<line>: imports <module> (a <tier> imports a <tier>: <why>)``. Imports ``known``
    excuses are left out (and the entries that excused them added to ``used``)."""
    problems = []
    for module, path in module_files(src_root, package).items():
        rank, name = tier_of(module, package, tiers)
        rel = path.relative_to(src_root).as_posix()
        for imp in imports_of(path, module):
            hit = imp.first(lambda m, rank=rank: tier_of(m, package, tiers)[0] < rank)
            if hit is not None and not _excused(rel, hit, known, used):
                above = tier_of(hit, package, tiers)[1]
                what = f"{_article(name)} {name} imports {_article(above)} {above}"
                problems.append(f"{rel}:{imp.line}: imports {hit} ({what}: {WHY_UPWARD})")
    return problems


def import_graph(src_root: Path, package: str) -> dict[str, dict[str, int]]:
    """Module → {package module it imports: line of the first such import}, every import counted
    (module level, in functions, type-only). A submodule's import of its own package (its
    ``__init__``, which Python runs first anyway) is left out."""
    files = module_files(src_root, package)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges: dict[str, int] = {}
        for imp in imports_of(path, module):
            for target in imp.modules:
                if target in files and target != module and not module.startswith(target + "."):
                    edges.setdefault(target, imp.line)
        graph[module] = edges
    return graph


def import_circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (modules that import each
    other, directly or through others), each sorted, in sorted order (Tarjan, 1972, *SIAM J.
    Comput.* 1(2), iterative form)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def check_circles(src_root: Path, package: str) -> list[str]:
    """One line per import circle: ``a <-> b <-> c: a:12 imports b; b:30 imports a (<why>)``
    (the imports inside the circle, with their lines)."""
    graph = import_graph(src_root, package)
    files = module_files(src_root, package)
    problems = []
    for circle in import_circles(graph):
        members = set(circle)
        arrows = [
            f"{files[m].relative_to(src_root).as_posix()}:{line} imports {t}"
            for m in circle
            for t, line in sorted(graph[m].items())
            if t in members
        ]
        problems.append(f"{' <-> '.join(circle)}: {'; '.join(arrows)} ({WHY_CIRCLE})")
    return problems


def stale_exceptions(src_root: Path, package: str, known: Known) -> list[tuple[str, str]]:
    """The entries of ``known`` that excuse no import of the tree any more (every contract of
    :data:`CONTRACTS` and the tiers of :data:`LAYERS` checked), sorted."""
    used: set[tuple[str, str]] = set()
    for contract in CONTRACTS:
        check_contract(contract, src_root, package, known, used)
    check_upward(src_root, package, LAYERS, known, used)
    return sorted(set(known) - used)


# --- the contracts on the package ----------------------------------------------------------


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: f"{c.layer}: {c.name}")
def test_import_contract(contract: Contract) -> None:
    assert (ROOT / PACKAGE / contract.layer).exists(), contract.layer
    problems = check_contract(contract, ROOT, PACKAGE)
    assert not problems, "forbidden imports:\n" + "\n".join(problems)


def test_no_import_points_up() -> None:
    problems = check_upward(ROOT, PACKAGE)
    assert not problems, "upward imports:\n" + "\n".join(problems)


def test_every_module_sits_in_one_named_tier() -> None:
    names = [m for _, members in LAYERS for m in members]
    assert len(names) == len(set(names)), "a name in two tiers of LAYERS"
    missing = [m for m in names if not (ROOT / PACKAGE / m.replace(".", "/")).exists()]
    missing = [m for m in missing if not (ROOT / PACKAGE / f"{m.replace('.', '/')}.py").exists()]
    assert not missing, f"names in LAYERS that are no module of the package: {missing}"
    files = module_files(ROOT, PACKAGE)
    unplaced = sorted(m for m in files if tier_of(m, PACKAGE)[1] == "part")
    assert not unplaced, (
        "modules in no tier (add each, or its folder, to TIERS or PART_TIERS):\n"
        + "\n".join(unplaced)
    )
    assert (
        tier_of(f"{PACKAGE}.tracking.store", PACKAGE)[0]
        > tier_of(f"{PACKAGE}.analysis.gate", PACKAGE)[0]
    )  # tracking sits below analysis


def test_every_known_exception_still_occurs() -> None:
    """An entry of KNOWN_EXCEPTIONS whose import went away fails here: remove it, so the list
    only shrinks."""
    assert all(why.strip() for why in KNOWN_EXCEPTIONS.values()), "each entry says why"
    stale = stale_exceptions(ROOT, PACKAGE, KNOWN_EXCEPTIONS)
    assert not stale, "KNOWN_EXCEPTIONS entries that no longer occur (remove them):\n" + "\n".join(
        f"{file}: {module}" for file, module in stale
    )


def test_no_import_circle() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 100 and sum(map(len, graph.values())) > 300  # the graph is read
    problems = check_circles(ROOT, PACKAGE)
    assert not problems, "import circles:\n" + "\n".join(problems)


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


def test_checker_finds_upward_imports_and_circles(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "app.py": "from pkg.commands.run import go\nfrom pkg.job import run\n",
            "commands/run.py": "from pkg.job import run\n\ndef go():\n    from pkg import app\n",
            "job.py": "from pkg.data import load\nfrom pkg.commands import run\n",
            "data/__init__.py": "from pkg.data.load import f\n",
            "data/load.py": "from pkg.data import other\n",
            "data/other.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.data.load import f\n"
            ),
            "data/shard.py": "import pkg.job\n",
        },
    )
    tiers = (("entry point", ("app",)), ("command", ("commands",)), ("engine", ("job",)))
    assert check_upward(root, "pkg", tiers) == [
        f"pkg/commands/run.py:4: imports pkg.app (a command imports an entry point: {WHY_UPWARD})",
        f"pkg/data/shard.py:1: imports pkg.job (a part imports an engine: {WHY_UPWARD})",
        f"pkg/job.py:2: imports pkg.commands (an engine imports a command: {WHY_UPWARD})",
    ]
    graph = import_graph(root, "pkg")
    assert "pkg.data" not in graph["pkg.data.load"]  # a submodule's import of its own package
    assert import_circles(graph) == [  # the upward imports close a circle too
        ["pkg.app", "pkg.commands.run", "pkg.job"],
        ["pkg.data.load", "pkg.data.other"],
    ]
    circle = check_circles(root, "pkg")[1]
    assert circle.startswith(
        "pkg.data.load <-> pkg.data.other: pkg/data/load.py:1 imports pkg.data.other; "
        "pkg/data/other.py:3 imports pkg.data.load ("
    )


def test_checker_refuses_tracking_to_metrics_and_mlflow_outside_tracking(tmp_path: Path) -> None:
    """The contracts of issue 37 on a synthetic tree: a deliberate ``tracking -> metrics``
    import and an MLflow import in ``analysis/`` fail with ``file:line``; a stale known
    exception is reported."""
    root = _tree(
        tmp_path,
        {
            "tracking/traces.py": (
                "import mlflow\nfrom pkg.records import Row\nfrom pkg.metrics.keys import KEY\n"
            ),
            "tracking/sweep.py": "def report():\n    from pkg.analysis import report\n",
            "analysis/gate.py": (
                "from pkg.tracking.store import open_store\n\n"
                "def f():\n    from mlflow.entities import Run\n"
            ),
            "mlflow_scorers.py": "import mlflow.genai\n",
            "metrics/keys.py": "",
            "records.py": "",
        },
    )
    tracking = f"({TRACKING.name})"
    assert check_contract(TRACKING, root, "pkg", known={}) == [
        f"pkg/tracking/sweep.py:2: imports pkg.analysis {tracking}",
        f"pkg/tracking/traces.py:3: imports pkg.metrics.keys {tracking}",
    ]
    assert check_contract(MLFLOW, root, "pkg", known={}) == [
        f"pkg/analysis/gate.py:4: imports mlflow.entities ({MLFLOW.name})"
    ]
    assert check_upward(root, "pkg", known={}) == [  # tracking -> metrics: allowed by the tiers
        f"pkg/tracking/sweep.py:2: imports pkg.analysis (a tracking part imports an analysis "
        f"part: {WHY_UPWARD})"
    ]
    known = {
        ("pkg/tracking/traces.py", "pkg.metrics"): "waits",  # excuses pkg.metrics.keys
        ("pkg/analysis/gate.py", "mlflow"): "waits",  # excuses mlflow.entities
        ("pkg/analysis/report.py", "mlflow"): "gone",
        ("pkg/tracking/sweep.py", "pkg.config"): "gone",
    }
    assert check_contract(TRACKING, root, "pkg", known=known) == [
        f"pkg/tracking/sweep.py:2: imports pkg.analysis {tracking}"
    ]
    assert check_contract(MLFLOW, root, "pkg", known=known) == []
    assert stale_exceptions(root, "pkg", known) == [
        ("pkg/analysis/report.py", "mlflow"),
        ("pkg/tracking/sweep.py", "pkg.config"),
    ]


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
