"""Corpus loading: a folder of document files, or BEIR-style ``corpus.jsonl``.

Entry points:

- :func:`load_corpus_folder` reads every ``.pdf``/``.docx``/``.md``/``.txt`` file of a folder
  through :func:`~rag_experiments.text.extract.extract_file`. A file that cannot be used is
  reported in the returned ``skipped`` dict (and logged), never raised, so one scanned PDF does
  not stop a run. :func:`load_corpus_files` reads a list of files with the same ids.
- :func:`load_corpus_jsonl` reads BEIR ``corpus.jsonl`` rows (``_id``, ``title``, ``text``,
  optional ``metadata``) from one file or from a folder of shards, and reports every bad row
  at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from rag_experiments.errors import DatasetError, ExtractionError, RowProblem
from rag_experiments.records import Document
from rag_experiments.text.extract import extract_file
from rag_experiments.text.normalize import normalize_text

log = logging.getLogger(__name__)

_MD_HEADING = re.compile(r"^#{1,6}\s+(\S.*)$", re.MULTILINE)


def load_corpus_folder(
    path: Path, *, password: str | None = None, recursive: bool = True
) -> tuple[list[Document], dict[str, str]]:
    """Read every document file in a folder.

    Files are visited in sorted order of their relative POSIX path, so the result does not
    depend on the file system. Hidden files and folders (name starting with ``.``) and Office
    lock files (``~$…``) are ignored.

    A document's ``id`` is its path relative to ``path`` with POSIX separators and without
    its extension (``"it-access-policy"``, ``"sub/guide"``); its ``title`` is the text of the
    first Markdown heading line (``# …``; DOCX headings are written that way by the
    extractor), else the file stem; its ``metadata`` holds ``source`` (the file path as a
    string) and, for PDFs, ``page_starts`` and ``n_pages``.

    Args:
        path: The corpus folder.
        password: Password for encrypted PDFs (the same one is tried on every encrypted PDF).
        recursive: Also read files in sub-folders.

    Returns:
        ``(documents, skipped)``: the documents in id order, and ``{relative path: reason}``
        for every file that was not used. A reason starts with a short code
        (``unsupported_extension``, ``encrypted``, ``no_text_layer``, ``empty_document``,
        ``unreadable``), then ``": "`` and how to fix it.

    Raises:
        DatasetError: ``path`` is not a folder, or two files map to the same id
            (``a.pdf`` and ``a.md``); the message names every colliding pair.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(
            f"corpus folder {root} does not exist or is not a folder; check the `docs` path "
            "in the dataset config."
        )
    candidates = root.rglob("*") if recursive else root.glob("*")
    files = sorted(
        (p for p in candidates if p.is_file() and not _ignored(p.relative_to(root))),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    return _read_files(root, files, password)


def load_corpus_files(
    files: list[Path], *, root: Path | None = None, password: str | None = None
) -> tuple[list[Document], dict[str, str], Path]:
    """Read the given document files, with the ids :func:`load_corpus_folder` would give.

    Each file's id is its path relative to ``root`` without its extension, so a dataset made
    from a few files of a folder refers to the same ids as a run whose corpus is that folder.
    A file that cannot be used (missing, unsupported, scanned, encrypted, empty) is reported in
    ``skipped`` with its reason, as in :func:`load_corpus_folder`.

    Args:
        files: The document files (duplicates are read once).
        root: The folder ids are relative to; default: the deepest folder holding every file.
        password: Password for encrypted PDFs.

    Returns:
        ``(documents, skipped, root)``: documents in id order, ``{relative path: reason}``,
        and the folder the ids are relative to.

    Raises:
        DatasetError: No file given, a file lies outside ``root``, or two files map to the
            same id.
    """
    if not files:
        raise DatasetError("no document files given; pass a folder or at least one file.")
    absolute = sorted({Path(f).expanduser().resolve() for f in files})
    if root is None:
        root = Path(os.path.commonpath([str(f.parent) for f in absolute]))
    root = Path(root).expanduser().resolve()
    outside = [str(f) for f in absolute if not f.is_relative_to(root)]
    if outside:
        raise DatasetError(
            f"files {', '.join(outside)} are not inside the corpus folder {root}; pass files "
            "from one folder tree (ids are paths relative to it)."
        )
    documents, skipped = _read_files(root, absolute, password)
    return documents, skipped, root


def _read_files(
    root: Path, files: list[Path], password: str | None
) -> tuple[list[Document], dict[str, str]]:
    """Extract ``files`` (inside ``root``) into documents and skip reasons; see
    :func:`load_corpus_folder`."""
    documents: list[Document] = []
    skipped: dict[str, str] = {}
    sources: dict[str, str] = {}
    collisions: list[str] = []
    for file in files:
        rel = file.relative_to(root).as_posix()
        try:
            extracted = extract_file(file, password=password)
        except ExtractionError as exc:
            detail = str(exc).removeprefix(f"{exc.path}: ")
            skipped[rel] = f"{exc.reason}: {detail}"
            log.warning("Skipping corpus file %s (%s): %s", file, exc.reason, detail)
            continue
        doc_id = file.relative_to(root).with_suffix("").as_posix()
        if doc_id in sources:
            collisions.append(f"{sources[doc_id]!r} and {rel!r} both map to id {doc_id!r}")
            continue
        sources[doc_id] = rel
        metadata: dict[str, Any] = {"source": str(file)}
        if extracted.page_starts is not None:
            metadata["page_starts"] = extracted.page_starts
        if extracted.n_pages is not None:
            metadata["n_pages"] = extracted.n_pages
        documents.append(
            Document(
                id=doc_id,
                text=extracted.text,
                title=_title_of(extracted.text, file.stem),
                metadata=metadata,
            )
        )
    if collisions:
        raise DatasetError(
            f"corpus folder {root}: document ids must be unique, but "
            + "; ".join(collisions)
            + ". Rename or remove one file of each pair."
        )
    documents.sort(key=lambda d: d.id)
    return documents, skipped


def _ignored(rel: Path) -> bool:
    """Hidden files/folders and Office lock files are not corpus files."""
    return any(part.startswith(".") for part in rel.parts) or rel.name.startswith("~$")


def _title_of(text: str, stem: str) -> str:
    """The first Markdown heading line's text, else ``stem``."""
    match = _MD_HEADING.search(text)
    return match.group(1).strip() if match else stem


def load_corpus_jsonl(path: Path, *, normalize: bool = False) -> list[Document]:
    """Read a BEIR-style corpus: JSON Lines rows ``{"_id", "title", "text", "metadata"?}``.

    ``path`` is a ``.jsonl`` file, or a folder holding ``corpus.jsonl`` or, when that file is
    absent, shards named ``corpus*.jsonl`` read in sorted name order (``corpus.part00.jsonl``,
    ``corpus.part01.jsonl``, …). When ``corpus.jsonl`` exists, other shards next to it are
    ignored (it is usually their concatenation).

    ``_id`` may be a JSON string or integer (kept as its decimal string); ``title`` is optional
    (``null`` → ``""``); ``metadata`` must be an object when present. Blank lines are skipped.
    Each document's metadata gets ``source`` (the file it was read from) unless the row sets it.

    Args:
        path: A corpus file or a folder (see above).
        normalize: Apply :func:`~rag_experiments.text.normalize.normalize_text` to titles
            and texts. Off by default: BEIR texts are already clean plain text, and published
            reference scores were computed on them verbatim.

    Returns:
        The documents in file order (shards in name order).

    Raises:
        DatasetError: The path or its shards do not exist, or rows are bad; every bad row is
            listed as a :class:`~rag_experiments.errors.RowProblem` (invalid JSON, not an
            object, missing or empty ``_id``, ``text`` missing or not a string, ``title`` or
            ``metadata`` of the wrong type, duplicate ``_id``).
    """
    files = _corpus_files(Path(path))
    documents: list[Document] = []
    problems: list[RowProblem] = []
    first_seen: dict[str, tuple[str, int]] = {}
    for file in files:
        bad_lines: list[int] = []
        with file.open("rb") as handle:  # streamed: a BEIR corpus may hold gigabytes
            for line_no, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    line = raw.decode("utf-8", errors="replace")
                    bad_lines.append(line_no)
                if not line.strip():
                    continue
                doc = _parse_row(line, str(file), line_no, problems)
                if doc is None:
                    continue
                if doc.id in first_seen:
                    where = "{}:{}".format(*first_seen[doc.id])
                    problems.append(
                        RowProblem(
                            str(file),
                            line_no,
                            "_id",
                            f"duplicate _id {doc.id!r} (first seen at {where})",
                        )
                    )
                    continue
                first_seen[doc.id] = (str(file), line_no)
                if normalize:
                    doc = Document(
                        id=doc.id,
                        text=normalize_text(doc.text),
                        title=normalize_text(doc.title),
                        metadata=doc.metadata,
                    )
                documents.append(doc)
        if bad_lines:
            log.warning(
                "%s: %d line(s) hold bytes that are not valid UTF-8 (first: line %d), replaced "
                "by U+FFFD; save the file as UTF-8 to keep those characters",
                file,
                len(bad_lines),
                bad_lines[0],
            )
    if problems:
        raise DatasetError(
            f"corpus {path}: {len(problems)} bad row(s); fix them (BEIR rows are "
            '{"_id": str, "title": str, "text": str}):',
            problems,
        )
    return documents


def _corpus_files(path: Path) -> list[Path]:
    """The JSONL file(s) to read for :func:`load_corpus_jsonl`."""
    if path.is_file():
        return [path]
    if path.is_dir():
        single = path / "corpus.jsonl"
        if single.is_file():
            return [single]
        shards = sorted(p for p in path.glob("corpus*.jsonl") if p.is_file())
        if shards:
            return shards
        raise DatasetError(
            f"no corpus.jsonl or corpus*.jsonl shards in folder {path}; point `corpus` at a "
            "BEIR corpus file or at the folder that holds it."
        )
    raise DatasetError(f"corpus {path} does not exist; check the path in the dataset config.")


def _parse_row(line: str, file: str, line_no: int, problems: list[RowProblem]) -> Document | None:
    """Parse one corpus row, appending its problems (if any) and returning None when bad."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        problems.append(RowProblem(file, line_no, "", f"invalid JSON ({exc.msg})"))
        return None
    if not isinstance(row, dict):
        problems.append(RowProblem(file, line_no, "", "row is not a JSON object"))
        return None

    found = len(problems)
    raw_id = row.get("_id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
        message = "missing _id" if raw_id is None else "_id must be a string"
        problems.append(RowProblem(file, line_no, "_id", message))
    elif not str(raw_id).strip():
        problems.append(RowProblem(file, line_no, "_id", "_id is empty"))
    text = row.get("text")
    if not isinstance(text, str):
        message = "missing text" if "text" not in row else "text must be a string"
        problems.append(RowProblem(file, line_no, "text", message))
    title = row.get("title")
    if title is not None and not isinstance(title, str):
        problems.append(RowProblem(file, line_no, "title", "title must be a string"))
    metadata = row.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        problems.append(RowProblem(file, line_no, "metadata", "metadata must be an object"))
    if len(problems) > found:
        return None

    meta: dict[str, Any] = dict(metadata or {})
    meta.setdefault("source", file)
    return Document(id=str(raw_id), text=text, title=title or "", metadata=meta)
