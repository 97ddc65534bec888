"""The generator's input: a folder of documents, one file, or a list of files.

Documents get the ids :func:`~rag_experiments.data.corpus.load_corpus_folder` gives (path
relative to the corpus folder, without extension), so the generated dataset's
``reference_doc_ids`` match a later ``rag-exp run dataset.corpus=<that folder>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rag_experiments.data.corpus import load_corpus_files, load_corpus_folder
from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.records import Document


@dataclass
class SourceDocs:
    """Documents read for generation.

    Attributes:
        documents: Readable documents, in id order.
        skipped: Files that could not be used, ``{path relative to root: reason}``.
        root: The corpus folder the ids are relative to (``dataset.corpus`` for evaluation).
    """

    documents: list[Document]
    skipped: dict[str, str]
    root: Path


def load_docs(
    docs: str | Path | Sequence[str | Path], *, password: str | None = None
) -> SourceDocs:
    """Read the documents to generate from.

    Args:
        docs: A folder (every ``.pdf``/``.docx``/``.md``/``.txt`` file in it, recursively),
            one file, or a list of files (ids relative to their deepest common folder).
        password: Password for encrypted PDFs; without it the empty password is tried.

    Returns:
        The documents, the skipped files with reasons and the corpus folder.

    Raises:
        ConfigError: ``docs`` is empty.
        DatasetError: A folder or file does not exist, or no file could be used (the message
            lists every file's reason).
    """
    if isinstance(docs, (str, Path)):
        if not str(docs).strip():
            raise ConfigError("docs is empty; pass docs=<folder> or docs=[file1,file2]")
        path = Path(docs).expanduser()
        if path.is_dir():
            documents, skipped = load_corpus_folder(path, password=password)
            result = SourceDocs(documents, skipped, path.resolve())
        elif path.is_file():
            result = SourceDocs(*load_corpus_files([path], password=password))
        else:
            raise DatasetError(f"docs={path} does not exist; pass a folder or existing files")
    else:
        files = [Path(f).expanduser() for f in docs]
        if not files:
            raise ConfigError("docs is an empty list; pass docs=<folder> or docs=[file1,file2]")
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise DatasetError(f"docs: {', '.join(missing)} not found; check the paths")
        result = SourceDocs(*load_corpus_files(files, password=password))
    if not result.documents:
        reasons = "; ".join(f"{p}: {why}" for p, why in sorted(result.skipped.items()))
        raise DatasetError(
            f"no usable document in {docs}" + (f" ({reasons})" if reasons else " (no files)")
        )
    return result
