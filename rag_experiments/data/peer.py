"""Loaders for the question files of peer tools, mapped onto
:class:`~rag_experiments.records.Sample`.

Two formats:

* :class:`SeedJsonDataset` — the JSON array written by the seed tool this project grew from::

      [{"question": "...", "ground_truth": "...", "type": "procedural",
        "context": "...", "source": "policy.pdf", "page": 3}]

* :class:`KeywordsJsonlDataset` — JSON Lines with expected keywords::

      {"question": "...", "keywords": ["MFA", "VPN"], "reference_answer": "...",
       "category": "security", "id": "k1", "source": "policy.pdf"}

Both share :class:`~rag_experiments.data.jsonl.RowDataset` (reading, all-problems-at-once
errors, corpus loading and the doc-id check); this module only maps field names.
"""

from __future__ import annotations

from collections.abc import Mapping
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
                log.problem(line, "source", "expected a file name or a list of file names, got "
                                            f"{json_type_name(row['source'])}")
            else:
                fields["reference_doc_ids"] = ids
        return {**fields, "metadata": extra}

    def field_names(self, row: Mapping[str, Any]) -> Mapping[str, str]:
        """Sample name → keywords-format name (``source`` when doc ids came from it)."""
        names = {sample: theirs for theirs, sample in self._NAMES.items()}
        if "reference_doc_ids" not in row and "source" in row:
            names["reference_doc_ids"] = "source"
        return names
