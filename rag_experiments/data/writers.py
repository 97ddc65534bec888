"""Dataset files the package writes (``rag-exp export --format``), each declared once, where its
writer is defined, with :func:`writes`.

A format's name is the dataset option that reads the file back (``--format ragas`` →
``dataset=ragas``). :func:`export_writers` imports every module of :mod:`rag_experiments.data`
(a few small modules) and returns the declared writers, so the export command lists no format
itself.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag_experiments.records import Sample

WriteFn = Callable[["Sequence[Sample]", "str | Path"], Path]
"""``write(samples, path) -> path written``."""


@dataclass(frozen=True)
class ExportFormat:
    """A dataset file format the package writes.

    Attributes:
        name: The format's name, that of the dataset option reading it (``ragas``).
        write: Writes samples (with their recorded answers) to a file; returns its path.
        help: One line for ``rag-exp export --help`` (file kinds, extensions).
    """

    name: str
    write: WriteFn
    help: str


_DECLARED: dict[str, ExportFormat] = {}


def writes(name: str, help: str) -> Callable[[WriteFn], WriteFn]:
    """Decorator: declare a function as the writer of export format ``name``.

    Args:
        name: The format (and the dataset option that reads it back).
        help: One line describing the file written.

    Raises:
        ValueError: Another function already writes ``name``.
    """

    def declare(function: WriteFn) -> WriteFn:
        known = _DECLARED.get(name)
        if known is not None and known.write is not function:
            raise ValueError(f"export format {name!r} is declared twice")
        _DECLARED[name] = ExportFormat(name, function, help)
        return function

    return declare


def export_writers() -> dict[str, ExportFormat]:
    """Every declared export format, by name (sorted), after importing every module of
    :mod:`rag_experiments.data`."""
    import rag_experiments.data as package

    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        importlib.import_module(info.name)
    return dict(sorted(_DECLARED.items()))
