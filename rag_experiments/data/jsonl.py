"""Our own dataset format, JSON Lines of :class:`~rag_experiments.records.Sample`, and the row
machinery shared by every row-based loader.

One line is one JSON object with the fields of :class:`~rag_experiments.records.Sample`, in
the order the model declares them; ``data/schema/sample.schema.json`` is the JSON Schema of one
line. A loader reads every row, records every problem it finds (bad JSON, wrong types, unknown
fields, duplicate ids, reference doc ids missing from the corpus) and raises one
:class:`~rag_experiments.errors.DatasetError` listing all of them as ``file:line:field``, so a
user fixes a file in one pass instead of one error per run.

The shared pieces, used by :mod:`rag_experiments.data.peer` and
:mod:`rag_experiments.data.beir` too:

* :class:`RowLog` collects problems and validated samples for one file;
* :func:`read_jsonl_rows` / :func:`read_json_array_items` read rows and log what cannot be read;
* :func:`load_corpus` picks the corpus reader (folder of documents or BEIR corpus JSONL);
* :class:`RowDataset` is the ``load()`` skeleton (corpus, rows, samples, doc-id check, error);
  a format only says how to read its rows and how one row becomes Sample fields.
"""

from __future__ import annotations

import codecs
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from pydantic import ValidationError

from rag_experiments.data.base import EvalDataset
from rag_experiments.data.corpus import load_corpus_folder, load_corpus_jsonl
from rag_experiments.data.writers import writes
from rag_experiments.errors import DatasetError, RowProblem
from rag_experiments.records import Document, Sample

SCHEMA_PATH: Path = Path(__file__).resolve().parent / "schema" / "sample.schema.json"
"""JSON Schema (draft 2020-12) of one line of our JSONL format."""

_JSON_TYPE_NAMES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def json_type_name(value: Any) -> str:
    """Name a decoded JSON value's type the way JSON does (``an object``, ``an array`` …)."""
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


@dataclass
class RowLog:
    """Problems and validated samples of one data file, collected row by row.

    Attributes:
        path: The file the rows come from (default ``path`` of each problem).
        unit: What ``line`` counts: ``"line"`` (1-based line number of a JSONL/TSV file) or
            ``"item"`` (1-based index of an item in a JSON array).
        problems: Every problem found so far, in the order found.
        samples: ``(line, sample, field_names)`` for every row that became a valid sample;
            ``field_names`` maps Sample field names back to the file's own names, so later
            problems (unknown doc ids) name the field the user wrote.
        rows: How many rows were read (non-blank lines or array items), good or bad.
    """

    path: Path
    unit: str = "line"
    problems: list[RowProblem] = field(default_factory=list)
    samples: list[tuple[int, Sample, Mapping[str, str]]] = field(default_factory=list)
    rows: int = 0
    _first_line: dict[str, int] = field(default_factory=dict, repr=False)

    def problem(
        self, line: int, field_name: str, message: str, *, path: Path | None = None
    ) -> None:
        """Record one problem.

        Args:
            line: 1-based line number (or item index, see :attr:`unit`).
            field_name: Dotted field path, or ``""`` for the whole row.
            message: What is wrong and, where useful, how to fix it.
            path: File of the problem when it is not :attr:`path`.
        """
        self.problems.append(RowProblem(str(path or self.path), line, field_name, message))

    def add_sample(
        self, line: int, fields: Mapping[str, Any], field_names: Mapping[str, str] | None = None
    ) -> Sample | None:
        """Validate ``fields`` as a :class:`Sample` and keep it, or record why it is invalid.

        Validation is pydantic's *strict* mode, so it accepts exactly what
        ``sample.schema.json`` describes (no ``"true"`` → True or ``"2"`` → 2 coercion).
        A sample whose id was already used is recorded as a ``duplicate id`` problem.

        Args:
            line: Row position (see :attr:`unit`).
            fields: Sample field values.
            field_names: Sample field name → the name used in the file (``{"user_input":
                "question"}``), so problems name the field the user wrote.

        Returns:
            The sample, or None when the row has problems (they are recorded).
        """
        names = dict(field_names or {})
        try:
            sample = Sample.model_validate(dict(fields), strict=True)
        except ValidationError as error:
            for err in error.errors():
                loc = [str(part) for part in err["loc"]]
                if loc:
                    loc[0] = names.get(loc[0], loc[0])
                message = err["msg"]
                if err["type"] == "extra_forbidden":
                    message = f"unknown field; the fields are {', '.join(Sample.model_fields)}"
                self.problem(line, ".".join(loc), message)
            return None
        first = self._first_line.setdefault(sample.id, line)
        if first != line:
            self.problem(
                line,
                names.get("id", "id"),
                f"duplicate id {sample.id!r} (first used on {self.unit} {first}); ids must be "
                "unique",
            )
            return None
        self.samples.append((line, sample, names))
        return sample

    def check_doc_ids(
        self, corpus: Iterable[Document], skipped: Mapping[str, str], corpus_source: str
    ) -> None:
        """Record every reference doc id (and relevance key) that is not in the corpus.

        Args:
            corpus: The loaded documents.
            skipped: Corpus files that could not be read, ``{relative path: reason}``; a
                reference to one of them says so.
            corpus_source: Where the corpus was read from, for the message.
        """
        ids = {doc.id for doc in corpus}
        skipped_ids = {
            str(PurePosixPath(rel).with_suffix("")): (rel, why) for rel, why in skipped.items()
        }
        for line, sample, names in self.samples:
            refs = [
                (f"{names.get('reference_doc_ids', 'reference_doc_ids')}.{i}", d)
                for i, d in enumerate(sample.reference_doc_ids)
            ]
            refs += [
                (f"{names.get('relevance', 'relevance')}.{d}", d)
                for d in sample.relevance
                if d not in sample.reference_doc_ids
            ]
            for field_name, doc_id in refs:
                if doc_id in ids:
                    continue
                if doc_id in skipped_ids:
                    rel, why = skipped_ids[doc_id]
                    message = (
                        f"doc {doc_id!r} was skipped when reading the corpus ({rel}: {why});"
                        " fix that file (or give its password) or drop the reference"
                    )
                else:
                    message = (
                        f"doc {doc_id!r} is not in the corpus {corpus_source} "
                        f"({len(ids)} docs); use an id of a corpus document"
                    )
                self.problem(line, field_name, message)

    @property
    def bad_rows(self) -> int:
        """How many distinct rows (of any file) have at least one problem."""
        return len({(p.path, p.line) for p in self.problems})

    def raise_if_any(self, how_to_fix: str) -> None:
        """Raise one :class:`DatasetError` listing every problem, if there is any.

        The first line says how many rows are bad and how to fix them; then one
        ``file:line:field: message`` per problem.

        Args:
            how_to_fix: Sentence appended to the summary (where the format is described).

        Raises:
            DatasetError: When at least one problem was recorded.
        """
        if not self.problems:
            return
        unit = "item" if self.unit == "item" else "row"
        where = (
            " (the number after the file name is the 1-based item index in the JSON array)"
            if self.unit == "item"
            else ""
        )
        raise DatasetError(
            f"{self.bad_rows} of {self.rows} {unit}s in {self.path} are invalid "
            f"({len(self.problems)} problems){where}. Fix every {unit} listed below; {how_to_fix}",
            self.problems,
        )


def read_text_lines(path: Path, log: RowLog) -> list[tuple[int, str]]:
    """Split a UTF-8 text file into ``(line number, text)``, dropping a BOM and ``\\r``; a
    file that starts with a UTF-16 byte order mark (what Windows editors save as "Unicode") is
    decoded as UTF-16, so its lines are its rows.

    A line that is not UTF-8 is logged (with ``path``), counted in :attr:`RowLog.rows` (it is
    one of the file's rows, so "k of n rows are invalid" counts the file's rows) and left out;
    other lines still come back.

    Raises:
        DatasetError: The file cannot be read, or is UTF-16 that does not decode.
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"cannot read {path}: {error}") from error
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = data.decode("utf-16")  # the BOM names the byte order and is dropped
        except UnicodeDecodeError as error:
            raise DatasetError(
                f"{path}: starts as UTF-16 but byte {error.start + 1} does not decode; save the "
                "file as UTF-8"
            ) from error
        return [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), start=1)]
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    lines: list[tuple[int, str]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            log.rows += 1
            log.problem(
                number,
                "",
                f"not valid UTF-8 (byte {error.start + 1} of the line); save the file as UTF-8",
                path=path,
            )
            continue
        lines.append((number, text.rstrip("\r")))
    return lines


def read_jsonl_rows(path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
    """Read a JSON Lines file into ``(line number, object)`` pairs.

    Blank lines are skipped. A line that is not UTF-8, not JSON, or not a JSON object is
    logged in ``log`` (field ``""``) and left out; :attr:`RowLog.rows` counts every non-blank line.

    Args:
        path: The ``.jsonl`` file.
        log: Where problems go.

    Returns:
        The rows that are JSON objects, in file order.

    Raises:
        DatasetError: The file cannot be read at all.
    """
    rows: list[tuple[int, dict[str, Any]]] = []
    for number, text in read_text_lines(path, log):
        if not text.strip():
            continue
        log.rows += 1
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            # json's message may end in "at" ("Unterminated string starting at"): column first
            where = f"invalid JSON at column {error.colno} ({error.msg})"
            log.problem(number, "", where, path=path)
            continue
        if not isinstance(value, dict):
            log.problem(
                number,
                "",
                f"expected a JSON object {{...}}, got {json_type_name(value)}",
                path=path,
            )
            continue
        rows.append((number, value))
    return rows


def read_json_array_items(path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
    """Read a JSON file holding an array of objects into ``(1-based index, object)`` pairs.

    Items that are not objects are logged (field ``""``) and left out.

    Args:
        path: The ``.json`` file.
        log: Where problems go (its :attr:`RowLog.unit` should be ``"item"``).

    Returns:
        The items that are JSON objects, in array order.

    Raises:
        DatasetError: The file cannot be read, is not valid JSON, or is not an array.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"cannot read {path} as UTF-8 text: {error}") from error
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(
            f"{path} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}; "
            "fix the syntax (the file must be one JSON array of objects)"
        ) from error
    if not isinstance(value, list):
        raise DatasetError(
            f"{path} holds {json_type_name(value)}, expected a JSON array of objects [{{...}}, ...]"
        )
    items: list[tuple[int, dict[str, Any]]] = []
    for index, item in enumerate(value, start=1):
        log.rows += 1
        if not isinstance(item, dict):
            log.problem(
                index, "", f"expected a JSON object {{...}}, got {json_type_name(item)}", path=path
            )
            continue
        items.append((index, item))
    return items


def is_beir_corpus_folder(folder: Path) -> bool:
    """True when ``folder`` holds ``corpus.jsonl`` or ``corpus*.jsonl`` shards."""
    return (folder / "corpus.jsonl").is_file() or any(
        p.is_file() for p in folder.glob("corpus*.jsonl")
    )


def load_corpus(
    corpus: str | None, *, password: str | None = None
) -> tuple[list[Document], dict[str, str]]:
    """Load the corpus a dataset refers to.

    * ``None``: no corpus (an HTTP target that holds its own documents);
    * a ``.jsonl`` file, or a folder holding ``corpus.jsonl`` / ``corpus*.jsonl`` shards: a
      BEIR corpus, read by :func:`~rag_experiments.data.corpus.load_corpus_jsonl`;
    * any other folder: documents (pdf, docx, md, txt), read by
      :func:`~rag_experiments.data.corpus.load_corpus_folder`.

    Args:
        corpus: Path of the corpus, or None.
        password: Password for encrypted PDFs of a document folder.

    Returns:
        ``(documents, skipped)`` where ``skipped`` maps unreadable files to the reason.

    Raises:
        DatasetError: The path does not exist or is neither a folder nor a ``.jsonl`` file, or
            the corpus reader fails.
    """
    if corpus is None:
        return [], {}
    path = Path(corpus).expanduser()
    if path.is_dir():
        if is_beir_corpus_folder(path):
            return load_corpus_jsonl(path), {}
        return load_corpus_folder(path, password=password)
    if path.is_file() and path.suffix.lower() == ".jsonl":
        return load_corpus_jsonl(path), {}
    what = "is not a folder or a .jsonl file" if path.exists() else "does not exist"
    raise DatasetError(
        f"corpus {path} {what}; set corpus to a folder of documents (pdf, docx, md, txt), a BEIR "
        "corpus .jsonl file, or a folder of corpus*.jsonl shards"
    )


class RowDataset(ABC):
    """Skeleton of a loader whose questions are rows of one file.

    ``load()`` reads the corpus, reads the rows (:meth:`read_rows`), turns each row into
    :class:`Sample` fields (:meth:`row_fields`), validates them, checks reference doc ids
    against the corpus, and raises one :class:`DatasetError` with every problem found.

    Subclasses set the attributes below (as dataclass fields) and :attr:`unit` /
    :attr:`format_hint`.

    Attributes:
        path: The dataset file.
        corpus: The corpus path (see :func:`load_corpus`), or None.
        name: Dataset name; defaults to the file's stem.
        password: Password for encrypted PDFs in a corpus folder.
    """

    path: str
    corpus: str | None
    name: str | None
    password: str | None

    unit: ClassVar[str] = "line"
    """``"line"`` for line-based files, ``"item"`` for JSON arrays."""
    format_hint: ClassVar[str] = ""
    """Sentence of the error summary that says where the format is described."""

    def load(self) -> EvalDataset:
        """Read the dataset and its corpus.

        Returns:
            The samples in file order, the corpus, the source path and skipped corpus files.

        Raises:
            DatasetError: The file is missing or empty, or any row is invalid (all rows are
                checked; every problem is listed as ``file:line:field: message``).
        """
        path = Path(self.path).expanduser()
        if not path.is_file():
            raise DatasetError(f"dataset file {path} does not exist; set path to an existing file")
        documents, skipped = load_corpus(self.corpus, password=self.password)
        log = RowLog(path, unit=self.unit)
        for line, row in self.read_rows(path, log):
            fields = self.row_fields(line, row, log)
            if fields is not None:
                log.add_sample(line, fields, self.field_names(row))
        if self.corpus is not None:
            log.check_doc_ids(documents, skipped, str(self.corpus))
        log.raise_if_any(self.format_hint)
        if not log.samples:
            raise DatasetError(f"{path} holds no samples; add at least one row. {self.format_hint}")
        return EvalDataset(
            name=self.name or path.stem,
            samples=[sample for _, sample, _ in log.samples],
            corpus=documents,
            source=str(path),
            skipped=dict(skipped),
        )

    @abstractmethod
    def read_rows(self, path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
        """Read the file's rows as ``(line or item index, object)``; log unreadable rows."""

    @abstractmethod
    def row_fields(self, line: int, row: dict[str, Any], log: RowLog) -> dict[str, Any] | None:
        """Map one row to :class:`Sample` field values (not validated yet).

        Problems the Sample validation cannot see (a missing field the format requires) go
        to ``log``; return None to drop the row.
        """

    def field_names(self, row: Mapping[str, Any]) -> Mapping[str, str]:
        """Sample field name → the file's field name, for problem messages (identity here)."""
        return {}


@dataclass
class JsonlDataset(RowDataset):
    """Our format: one :class:`Sample` per line as a JSON object.

    Example line::

        {"id": "q1", "user_input": "Who approves access?", "reference": "The data owner.",
         "reference_doc_ids": ["it-access-policy"], "question_type": "role_responsibility"}

    Args:
        path: The ``.jsonl`` file.
        corpus: Folder of documents, BEIR corpus ``.jsonl`` (or folder of ``corpus*.jsonl``
            shards), or None for no corpus.
        name: Dataset name; defaults to the file's stem.
        password: Password for encrypted PDFs in a corpus folder.
    """

    path: str
    corpus: str | None = None
    name: str | None = None
    password: str | None = None

    format_hint: ClassVar[str] = (
        f"each line must be one JSON object matching the JSON Schema {SCHEMA_PATH}"
    )

    def read_rows(self, path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
        """See :func:`read_jsonl_rows`."""
        return read_jsonl_rows(path, log)

    def row_fields(self, line: int, row: dict[str, Any], log: RowLog) -> dict[str, Any] | None:
        """A line already holds Sample fields."""
        return row


@writes("jsonl", "our JSONL")
def write_jsonl(samples: Iterable[Sample], path: str | Path) -> Path:
    """Write samples in our JSONL format, one JSON object per line.

    Fields appear in the model's order; non-ASCII text is written as is (UTF-8); lines end
    with ``\\n``. Parent folders are created. Reading the file back with
    :class:`JsonlDataset` gives equal samples.

    Args:
        samples: The samples, written in the given order.
        path: Target file (overwritten).

    Returns:
        The path written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8", newline="\n") as handle:
        for sample in samples:
            data = sample.model_dump(mode="json")
            if data["recorded"] is None:  # a question without a recorded answer
                del data["recorded"]
            handle.write(json.dumps(data, ensure_ascii=False) + "\n")
    return target
