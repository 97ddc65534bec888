"""Loaders for the question files of peer tools, mapped onto
:class:`~rag_experiments.records.Sample`.

Four formats:

* :class:`SeedJsonDataset` — the JSON array written by the seed tool this project grew from::

      [{"question": "...", "ground_truth": "...", "type": "procedural",
        "context": "...", "source": "policy.pdf", "page": 3}]

* :class:`KeywordsJsonlDataset` — JSON Lines with expected keywords::

      {"question": "...", "keywords": ["MFA", "VPN"], "reference_answer": "...",
       "category": "security", "id": "k1", "source": "policy.pdf"}

* :class:`RagasDataset` — a RAGAS EvaluationDataset (JSONL, JSON or CSV) and
  :class:`DeepEvalDataset` — DeepEval goldens JSON: questions with the answers a system
  already gave (``recorded``, scored by ``target=recorded``); :func:`write_ragas` and
  :func:`write_deepeval` write them (``rag-exp export``).

All share :class:`~rag_experiments.data.jsonl.RowDataset` (reading, all-problems-at-once
errors, corpus loading and the doc-id check); this module only maps field names.
"""

from __future__ import annotations

import ast
import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from rag_experiments.data.jsonl import (
    RowDataset,
    RowLog,
    json_type_name,
    read_json_array_items,
    read_jsonl_rows,
)
from rag_experiments.data.writers import writes
from rag_experiments.errors import DatasetError
from rag_experiments.records import Sample


def _rename(
    row: Mapping[str, Any], names: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``row`` into Sample fields (renamed by ``names``: file name → Sample name) and
    the remaining keys (which become metadata)."""
    fields = {names[key]: value for key, value in row.items() if key in names}
    extra = {key: value for key, value in row.items() if key not in names}
    return fields, extra


def _require(line: int, row: Mapping[str, Any], keys: tuple[str, ...], log: RowLog) -> None:
    """Log a ``Field required`` problem for every key of ``keys`` missing from ``row``."""
    for key in keys:
        if key not in row:
            log.problem(line, key, "Field required")


def doc_ids_from_source(value: Any) -> list[str] | None:
    """Doc ids from a ``source`` value: a file name (or list of them) relative to the corpus
    folder, with its extension dropped — the id rule of
    :func:`~rag_experiments.data.corpus.load_corpus_folder` (``"hr/leave.pdf"`` → ``"hr/leave"``).

    Args:
        value: A non-empty string or a list of non-empty strings (backslashes are read as ``/``).

    Returns:
        The ids in order, or None when ``value`` has another shape.
    """
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        return None
    return [str(PurePosixPath(v.strip().replace("\\", "/")).with_suffix("")) for v in values]


@dataclass
class SeedJsonDataset(RowDataset):
    """The seed tool's JSON array ``[{"question", "ground_truth", "type"}, ...]``.

    Mapping: ``question`` → ``user_input``, ``ground_truth`` → ``reference``, ``type`` →
    ``question_type`` (any label; missing → None), ``answerable`` (a boolean, optional) is
    honoured; every other key (``context``, ``source``, ``page`` …) is kept in ``metadata``.
    Ids are ``f"q{index:04d}"`` with the 1-based array index (``q0001`` …). ``question`` and
    ``ground_truth`` are required. Problems are reported by 1-based item index.

    Args:
        path: The ``.json`` file.
        corpus: Folder of documents, BEIR corpus ``.jsonl``, or None.
        name: Dataset name; defaults to the file's stem.
        password: Password for encrypted PDFs in a corpus folder.
    """

    path: str
    corpus: str | None = None
    name: str | None = None
    password: str | None = None

    unit: ClassVar[str] = "item"
    format_hint: ClassVar[str] = (
        'the file must be a JSON array of objects {"question": str, "ground_truth": str, '
        '"type": str (optional), "answerable": bool (optional), other keys kept as metadata}'
    )
    _NAMES: ClassVar[dict[str, str]] = {
        "question": "user_input",
        "ground_truth": "reference",
        "type": "question_type",
        "answerable": "answerable",
    }

    def read_rows(self, path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
        """See :func:`~rag_experiments.data.jsonl.read_json_array_items`."""
        return read_json_array_items(path, log)

    def row_fields(self, line: int, row: dict[str, Any], log: RowLog) -> dict[str, Any] | None:
        """Rename the seed keys; the rest goes to metadata."""
        _require(line, row, ("ground_truth",), log)
        fields, extra = _rename(row, self._NAMES)
        return {"id": f"q{line:04d}", **fields, "metadata": extra}

    def field_names(self, row: Mapping[str, Any]) -> Mapping[str, str]:
        """Sample name → seed name."""
        return {sample: seed for seed, sample in self._NAMES.items()}


@dataclass
class KeywordsJsonlDataset(RowDataset):
    """JSON Lines ``{"question", "keywords", "reference_answer", "category"}``.

    Mapping: ``question`` → ``user_input``, ``keywords`` (list of strings) → ``keywords``,
    ``reference_answer`` → ``reference`` (optional, default ``""``), ``category`` →
    ``question_type`` (optional). Optional: ``id`` (a string or integer; default
    ``f"q{line:04d}"`` with the 1-based line number), ``answerable`` (boolean),
    ``reference_doc_ids`` (list of doc ids) or else ``source`` (a file name or list of file
    names relative to the corpus folder; the extension is dropped to form the doc id, see
    :func:`doc_ids_from_source`). Every other key, and ``source``, is kept in ``metadata``.
    ``question`` and ``keywords`` are required.

    Args:
        path: The ``.jsonl`` file.
        corpus: Folder of documents, BEIR corpus ``.jsonl``, or None.
        name: Dataset name; defaults to the file's stem.
        password: Password for encrypted PDFs in a corpus folder.
    """

    path: str
    corpus: str | None = None
    name: str | None = None
    password: str | None = None

    format_hint: ClassVar[str] = (
        'each line must be a JSON object {"question": str, "keywords": [str, ...], '
        '"reference_answer": str, "category": str, optional "id", "answerable", '
        '"reference_doc_ids" or "source"}'
    )
    _NAMES: ClassVar[dict[str, str]] = {
        "id": "id",
        "question": "user_input",
        "keywords": "keywords",
        "reference_answer": "reference",
        "category": "question_type",
        "answerable": "answerable",
        "reference_doc_ids": "reference_doc_ids",
    }

    def read_rows(self, path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
        """See :func:`~rag_experiments.data.jsonl.read_jsonl_rows`."""
        return read_jsonl_rows(path, log)

    def row_fields(self, line: int, row: dict[str, Any], log: RowLog) -> dict[str, Any] | None:
        """Rename the keys, default the id, derive doc ids from ``source``."""
        _require(line, row, ("keywords",), log)
        fields, extra = _rename(row, self._NAMES)
        qid = fields.get("id", f"q{line:04d}")
        if isinstance(qid, int) and not isinstance(qid, bool):
            qid = str(qid)
        fields["id"] = qid
        if "reference_doc_ids" not in fields and "source" in row:
            ids = doc_ids_from_source(row["source"])
            if ids is None:
                log.problem(
                    line,
                    "source",
                    "expected a file name or a list of file names, got "
                    f"{json_type_name(row['source'])}",
                )
            else:
                fields["reference_doc_ids"] = ids
        return {**fields, "metadata": extra}

    def field_names(self, row: Mapping[str, Any]) -> Mapping[str, str]:
        """Sample name → keywords-format name (``source`` when doc ids came from it)."""
        names = {sample: theirs for theirs, sample in self._NAMES.items()}
        if "reference_doc_ids" not in row and "source" in row:
            names["reference_doc_ids"] = "source"
        return names


# --- RAGAS and DeepEval files: questions with the answers a system already gave ---------------

RECORDED_FIELDS: tuple[str, ...] = (
    "response",
    "retrieved_contexts",
    "retrieved_ids",
    "retrieved_doc_ids",
    "latency_ms",
    "citations",
)
"""Fields of :class:`~rag_experiments.records.RecordedAnswer`, by their Sample-side names."""

_SAMPLE_EXTRAS: tuple[str, ...] = (
    "id",
    "question_type",
    "answerable",
    "reference_doc_ids",
    "keywords",
    "relevance",
)
"""Sample fields neither peer format has; written beside theirs (RAGAS' and DeepEval's readers
ignore unknown keys) so an exported run loads back unchanged."""


def _recorded(values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``recorded`` object from answer fields (None when the row records nothing)."""
    rec = {k: values[k] for k in RECORDED_FIELDS if values.get(k) is not None}
    return rec or None


def _string_id(line: int, row: Mapping[str, Any], key: str) -> Any:
    """The row's id (an integer id becomes its string), else ``q<line>``."""
    qid = row.get(key)
    if qid is None:
        return f"q{line:04d}"
    if isinstance(qid, int) and not isinstance(qid, bool):
        return str(qid)
    return qid


def read_csv_rows(
    path: Path, log: RowLog, decoded: tuple[str, ...]
) -> list[tuple[int, dict[str, Any]]]:
    """Read a CSV file with a header into ``(line number, row)`` pairs.

    Empty cells are left out of the row (a missing value). Cells of the ``decoded`` columns
    hold a value written as JSON (``["a", "b"]``, ``true``, ``12.5``) or as a Python literal
    (``['a', 'b']``, ``True``: what RAGAS' ``EvaluationDataset.to_csv`` writes for lists, with
    ``csv.DictWriter``); a cell that is neither is logged.

    Args:
        path: The ``.csv`` file (UTF-8, optional BOM).
        log: Where problems go; every data row counts in :attr:`RowLog.rows`.
        decoded: Columns whose cells are decoded as above (the others stay strings).

    Returns:
        The rows, in file order, with the physical line number where each starts.

    Raises:
        DatasetError: The file cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"cannot read {path} as UTF-8 text: {error}") from error
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None:  # reads the header
        return []
    rows: list[tuple[int, dict[str, Any]]] = []
    line = reader.line_num + 1
    for raw in reader:
        log.rows += 1
        row: dict[str, Any] = {}
        for key, cell in raw.items():
            if key is None or cell is None or cell == "":
                continue
            if key not in decoded:
                row[key] = cell
                continue
            try:
                row[key] = json.loads(cell)
            except json.JSONDecodeError:
                try:
                    row[key] = ast.literal_eval(cell)
                except (ValueError, SyntaxError):
                    log.problem(
                        line,
                        key,
                        "expected a JSON value or a Python literal (a list "
                        'is written ["a", "b"]), got '
                        f"{cell[:40]!r}",
                    )
        rows.append((line, row))
        line = reader.line_num + 1
    return rows


@dataclass
class RagasDataset(RowDataset):
    """A RAGAS ``EvaluationDataset`` of single-turn samples, as JSON Lines (``to_jsonl``), a
    JSON array (``from_list`` input) or CSV (``to_csv``), chosen by the file's extension.

    Mapping (RAGAS' names are ours): ``user_input``, ``reference`` (missing → ``""``),
    ``reference_contexts``; the answer goes to ``recorded`` (scored by ``target=recorded``):
    ``response``, ``retrieved_contexts``, ``retrieved_context_ids`` (RAGAS' chunk ids, strings
    or integers) → ``retrieved_ids``. Optional keys RAGAS ignores and :func:`write_ragas` writes:
    ``id`` (default ``q<line>``), ``question_type``, ``answerable``, ``reference_doc_ids``,
    ``keywords``, ``relevance``, ``retrieved_doc_ids``, ``latency_ms``, ``citations``, ``metadata``
    (without ``id``, a row is ``q<line>`` by its file line; a CSV's header is line 1). Every
    other key (``rubrics``, ``persona_name`` …) is kept in ``metadata``. In CSV, list, boolean
    and number columns are JSON or Python literals (RAGAS writes lists as ``['a', 'b']``); an
    empty cell is a missing value, so a CSV cannot hold an empty-string response.

    Args:
        path: The ``.jsonl``, ``.json`` or ``.csv`` file.
        corpus: Folder of documents, BEIR corpus ``.jsonl``, or None.
        name: Dataset name; defaults to the file's stem.
        password: Password for encrypted PDFs in a corpus folder.
    """

    path: str
    corpus: str | None = None
    name: str | None = None
    password: str | None = None

    format_hint: ClassVar[str] = (
        'each row must be a RAGAS single-turn sample {"user_input": str, "response": str, '
        '"retrieved_contexts": [str], "reference": str, "reference_contexts": [str]} '
        "(.jsonl, .json array or .csv; in CSV, lists as JSON or Python literals)"
    )
    _NAMES: ClassVar[dict[str, str]] = {
        "id": "id",
        "user_input": "user_input",
        "reference": "reference",
        "reference_contexts": "reference_contexts",
        "question_type": "question_type",
        "answerable": "answerable",
        "reference_doc_ids": "reference_doc_ids",
        "keywords": "keywords",
        "relevance": "relevance",
        "metadata": "metadata",
    }
    _ANSWER: ClassVar[dict[str, str]] = {
        "response": "response",
        "retrieved_contexts": "retrieved_contexts",
        "retrieved_context_ids": "retrieved_ids",
        "retrieved_doc_ids": "retrieved_doc_ids",
        "latency_ms": "latency_ms",
        "citations": "citations",
    }
    _CSV_DECODED: ClassVar[tuple[str, ...]] = (
        "retrieved_contexts",
        "reference_contexts",
        "retrieved_context_ids",
        "reference_context_ids",
        "reference_doc_ids",
        "retrieved_doc_ids",
        "keywords",
        "relevance",
        "answerable",
        "latency_ms",
        "citations",
        "metadata",
        "multi_responses",
        "rubrics",
    )

    @property
    def unit(self) -> str:  # type: ignore[override]
        """``item`` for a JSON array, else ``line``."""
        return "item" if Path(self.path).suffix.lower() == ".json" else "line"

    def read_rows(self, path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
        """JSON Lines, JSON array or CSV, by extension (anything else is read as JSON Lines)."""
        suffix = path.suffix.lower()
        if suffix == ".json":
            return read_json_array_items(path, log)
        if suffix == ".csv":
            return read_csv_rows(path, log, self._CSV_DECODED)
        return read_jsonl_rows(path, log)

    def row_fields(self, line: int, row: dict[str, Any], log: RowLog) -> dict[str, Any] | None:
        """RAGAS names are Sample names; the answer goes to ``recorded``."""
        present = {k: v for k, v in row.items() if v is not None}  # null = not given
        fields, extra = _rename(present, {**self._NAMES, **self._ANSWER})
        metadata = fields.pop("metadata", None)
        if metadata is not None and not isinstance(metadata, dict):
            log.problem(line, "metadata", f"expected an object, got {json_type_name(metadata)}")
            return None
        answer = {k: fields.pop(k) for k in RECORDED_FIELDS if k in fields}
        ids = answer.get("retrieved_ids")
        if isinstance(ids, list):  # RAGAS allows integer context ids
            answer["retrieved_ids"] = [
                str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in ids
            ]
        fields["id"] = _string_id(line, fields, "id")
        return {**fields, "metadata": {**(metadata or {}), **extra}, "recorded": _recorded(answer)}

    def field_names(self, row: Mapping[str, Any]) -> Mapping[str, str]:
        """Sample name → RAGAS name."""
        return {"recorded": "response/retrieved_contexts"}


@dataclass
class DeepEvalDataset(RowDataset):
    """DeepEval goldens or test cases as the JSON array ``EvaluationDataset.save_as("json")``
    writes (and ``add_goldens_from_json_file`` reads).

    Mapping: ``input`` → ``user_input``, ``expected_output`` → ``reference`` (null → ``""``),
    ``context`` (DeepEval's ideal context) → ``reference_contexts``; the answer goes to
    ``recorded``: ``actual_output`` → ``response`` (null or missing = no response),
    ``retrieval_context`` → ``retrieved_contexts``. ``additional_metadata`` may hold ``id``,
    ``question_type``, ``answerable``, ``reference_doc_ids``, ``keywords``, ``relevance``,
    ``retrieved_ids``, ``retrieved_doc_ids``, ``latency_ms`` and ``citations`` (what
    :func:`write_deepeval` writes there); its other keys, and every other non-null key
    (``name``, ``comments``, ``tools_called`` …), are kept in ``metadata``. Multi-turn goldens
    (``turns``) are not supported. Problems are reported by 1-based item index.

    Args:
        path: The ``.json`` file.
        corpus: Folder of documents, BEIR corpus ``.jsonl``, or None.
        name: Dataset name; defaults to the file's stem.
        password: Password for encrypted PDFs in a corpus folder.
    """

    path: str
    corpus: str | None = None
    name: str | None = None
    password: str | None = None

    unit: ClassVar[str] = "item"
    format_hint: ClassVar[str] = (
        'the file must be a JSON array of DeepEval goldens {"input": str, "actual_output": '
        'str or null, "expected_output": str or null, "retrieval_context": [str], '
        '"context": [str], "additional_metadata": {...}}'
    )
    _NAMES: ClassVar[dict[str, str]] = {
        "input": "user_input",
        "expected_output": "reference",
        "context": "reference_contexts",
        "actual_output": "response",
        "retrieval_context": "retrieved_contexts",
    }

    def read_rows(self, path: Path, log: RowLog) -> list[tuple[int, dict[str, Any]]]:
        """See :func:`~rag_experiments.data.jsonl.read_json_array_items`."""
        return read_json_array_items(path, log)

    def row_fields(self, line: int, row: dict[str, Any], log: RowLog) -> dict[str, Any] | None:
        """Rename DeepEval's keys; our extras come from ``additional_metadata``."""
        if row.get("turns"):
            log.problem(
                line,
                "turns",
                "multi-turn goldens are not supported; use single-turn "
                "goldens (input, actual_output, retrieval_context)",
            )
            return None
        fields, extra = _rename(row, self._NAMES)
        fields = {k: v for k, v in fields.items() if v is not None}
        extra = {k: v for k, v in extra.items() if v is not None}
        meta = extra.pop("additional_metadata", None) or {}
        if not isinstance(meta, dict):
            log.problem(
                line,
                "additional_metadata",
                f"expected an object or null, got {json_type_name(meta)}",
            )
            return None
        ours = {k: meta[k] for k in (*_SAMPLE_EXTRAS, *RECORDED_FIELDS) if k in meta}
        rest = {k: v for k, v in meta.items() if k not in ours}
        answer = {
            **{k: ours.pop(k) for k in RECORDED_FIELDS if k in ours},
            **{k: fields.pop(k) for k in RECORDED_FIELDS if k in fields},
        }
        fields.update(ours)
        fields["id"] = _string_id(line, fields, "id")
        return {**fields, "metadata": {**rest, **extra}, "recorded": _recorded(answer)}

    def field_names(self, row: Mapping[str, Any]) -> Mapping[str, str]:
        """Sample name → DeepEval name."""
        names = {sample: theirs for theirs, sample in self._NAMES.items()}
        names.update({k: f"additional_metadata.{k}" for k in _SAMPLE_EXTRAS})
        names["recorded"] = "actual_output/retrieval_context"
        return names


def _extras(sample: Sample) -> dict[str, Any]:
    """Our Sample fields the peer formats lack, with default values left out."""
    data = sample.model_dump(mode="json", include=set(_SAMPLE_EXTRAS))
    defaults = {
        "question_type": None,
        "answerable": True,
        "reference_doc_ids": [],
        "keywords": [],
        "relevance": {},
    }
    return {k: v for k, v in data.items() if k == "id" or defaults.get(k) != v}


def ragas_row(sample: Sample) -> dict[str, Any]:
    """One RAGAS single-turn sample (plus our extras, see :class:`RagasDataset`)."""
    rec = sample.recorded
    row: dict[str, Any] = {
        "user_input": sample.user_input,
        "retrieved_contexts": list(rec.retrieved_contexts) if rec else [],
        "reference_contexts": list(sample.reference_contexts),
        "response": rec.response if rec else None,
        "reference": sample.reference,
        **_extras(sample),
    }
    if rec is not None:
        if rec.retrieved_ids is not None:
            row["retrieved_context_ids"] = list(rec.retrieved_ids)
        if rec.retrieved_doc_ids is not None:
            row["retrieved_doc_ids"] = list(rec.retrieved_doc_ids)
        if rec.latency_ms is not None:
            row["latency_ms"] = rec.latency_ms
        if rec.citations is not None:
            row["citations"] = [c.model_dump(mode="json") for c in rec.citations]
    if sample.metadata:
        row["metadata"] = sample.metadata
    return row


@writes("ragas", "RAGAS EvaluationDataset (.jsonl, .json or .csv by --out's extension)")
def write_ragas(samples: Sequence[Sample], path: str | Path) -> Path:
    """Write samples as a RAGAS EvaluationDataset: ``.csv`` (lists as JSON, which RAGAS'
    and Python's literal readers both read), ``.json`` (an array) or else JSON Lines.
    :class:`RagasDataset` reads the file back into equal samples (CSV: but for an
    empty-string response, which becomes missing).

    Returns:
        The path written (parent folders are created).
    """
    rows = [ragas_row(s) for s in samples]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    suffix = target.suffix.lower()
    if suffix == ".csv":
        columns = list(dict.fromkeys(k for row in rows for k in row))
        with target.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: _csv_cell(v) for k, v in row.items()})
    elif suffix == ".json":
        target.write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    else:
        with target.open("w", encoding="utf-8", newline="\n") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return target


def _csv_cell(value: Any) -> Any:
    """A CSV cell: strings as they are, None empty, anything else as JSON."""
    if value is None or isinstance(value, str):
        return "" if value is None else value
    return json.dumps(value, ensure_ascii=False)


def deepeval_row(sample: Sample) -> dict[str, Any]:
    """One DeepEval golden, as ``EvaluationDataset.save_as("json")`` writes it (our extras in
    ``additional_metadata``, see :class:`DeepEvalDataset`)."""
    rec = sample.recorded
    extras = _extras(sample)
    if rec is not None:
        extras.update(
            {
                k: v
                for k, v in rec.model_dump(mode="json").items()
                if k in ("retrieved_ids", "retrieved_doc_ids", "latency_ms", "citations")
                and v is not None
            }
        )
    return {
        "input": sample.user_input,
        "actual_output": rec.response if rec else None,
        "expected_output": sample.reference or None,
        "retrieval_context": list(rec.retrieved_contexts) if rec else None,
        "context": list(sample.reference_contexts) or None,
        "name": None,
        "comments": None,
        "source_file": None,
        "tools_called": None,
        "expected_tools": None,
        "additional_metadata": {**sample.metadata, **extras},
    }


@writes("deepeval", "DeepEval goldens JSON")
def write_deepeval(samples: Sequence[Sample], path: str | Path) -> Path:
    """Write samples as a DeepEval goldens JSON array; :class:`DeepEvalDataset` reads it back
    into equal samples (a sample's metadata keys must not clash with the extras' names).

    Returns:
        The path written (parent folders are created).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    rows = [deepeval_row(s) for s in samples]
    target.write_text(json.dumps(rows, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return target
