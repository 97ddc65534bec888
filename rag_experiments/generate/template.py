"""Template mode: a reproducible ground truth from tabular data, with no LLM.

Each row of a CSV or JSONL file is one document of the corpus; each (row, column) with a
value becomes a question from that column's template, whose reference answer is the value.

- **Documents**: id ``<file stem>/row-<n>`` (``n`` = 1-based data row), title = the row's key
  value, text = one ``column: value`` line per non-empty column, key column first. They are
  written to ``<out>/corpus.jsonl`` (BEIR format), the corpus to evaluate against.
- **Questions**: ``questions[column]`` is a Python format string; placeholders are ``{key}``
  (the row's key value), ``{column}`` (the column name, underscores as spaces) and any column
  name of the row (``{owner}``). Without templates every column but the key gets
  ``"What is the {column} of {key}?"``. Type: ``types[column]``, else ``default_type``.
- **Selection**: all candidates in file, row, column order; shuffled with
  ``random.Random(seed)``; questions whose normalised text repeats an earlier one are dropped
  (``duplicate_exact``); the first ``n`` are kept (``n <= 0``: all) and written back in file
  order. Same input, settings and seed → the same file, byte for byte.
"""

from __future__ import annotations

import csv
import json
import random
import string
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_experiments.data.jsonl import write_jsonl
from rag_experiments.errors import ConfigError, DatasetError, RowProblem
from rag_experiments.generate.checkpoint import Checkpoint
from rag_experiments.generate.dedup import question_key
from rag_experiments.generate.summary import GenerationSummary
from rag_experiments.records import Sample

TABLE_EXTENSIONS: tuple[str, ...] = (".csv", ".jsonl")
DEFAULT_TEMPLATE = "What is the {column} of {key}?"
CORPUS_FILE = "corpus.jsonl"


@dataclass(frozen=True)
class TemplateSettings:
    """Template-mode options (``template.*`` in ``conf/generate.yaml``, plus ``n`` and
    ``seed``).

    Attributes:
        key_column: The column that names a row's subject (required).
        questions: Column → question template (see the module docstring); empty = every
            non-key column with :data:`DEFAULT_TEMPLATE`.
        types: Column → question type.
        default_type: Type of columns not in ``types``.
        n: Questions to keep (``<= 0``: all).
        seed: Shuffle seed.
    """

    key_column: str
    questions: Mapping[str, str] = field(default_factory=dict)
    types: Mapping[str, str] = field(default_factory=dict)
    default_type: str = "lookup"
    n: int = 40
    seed: int = 0


@dataclass(frozen=True)
class _Row:
    doc_id: str
    source: str
    number: int
    values: dict[str, str]


def table_files(docs: str | Path | list[str | Path]) -> tuple[list[Path], dict[str, str]]:
    """The CSV/JSONL files of ``docs`` (a file, a folder, or a list), and skipped others.

    Raises:
        DatasetError: A path does not exist.
    """
    paths = [Path(docs)] if isinstance(docs, (str, Path)) else [Path(p) for p in docs]
    files: list[Path] = []
    skipped: dict[str, str] = {}
    for path in (p.expanduser() for p in paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        elif path.is_file():
            found = [path]
        else:
            raise DatasetError(f"docs: {path} does not exist; pass CSV/JSONL files or a folder")
        for file in found:
            if file.suffix.lower() in TABLE_EXTENSIONS:
                files.append(file)
            else:
                skipped[str(file)] = (
                    f"unsupported_extension: template mode reads "
                    f"{', '.join(TABLE_EXTENSIONS)} files"
                )
    return files, skipped


def _read_table(path: Path, problems: list[RowProblem]) -> list[tuple[int, dict[str, str]]]:
    """Rows of a CSV (header line + rows) or JSONL file (objects) as string dicts."""
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(RowProblem(str(path), 0, "", f"cannot read as UTF-8 text ({exc})"))
        return rows
    if path.suffix.lower() == ".csv":
        for number, record in enumerate(csv.DictReader(text.splitlines()), start=1):
            rows.append(
                (number, {str(k): (v or "").strip() for k, v in record.items() if k is not None})
            )
        return rows
    number = 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(RowProblem(str(path), line_no, "", f"invalid JSON ({exc.msg})"))
            continue
        if not isinstance(value, dict):
            problems.append(RowProblem(str(path), line_no, "", "expected a JSON object"))
            continue
        number += 1
        rows.append((number, {str(k): _cell(v) for k, v in value.items()}))
    return rows


def _cell(value: Any) -> str:
    """A JSON value as text: strings as they are, ``null`` as empty, others as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, ensure_ascii=False)


def _fields(template: str) -> set[str]:
    """Placeholder names of a format string."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def generate_from_template(
    docs: str | Path | list[str | Path], out: Path, settings: TemplateSettings
) -> GenerationSummary:
    """Write ``<out>/eval.jsonl`` and ``<out>/corpus.jsonl`` from tables (see the module
    docstring).

    Args:
        docs: CSV/JSONL files, or a folder of them.
        out: Output folder (its ``eval.jsonl`` and ``corpus.jsonl`` are replaced).
        settings: Templates, key column, ``n`` and seed.

    Returns:
        The summary (``rejects_by_filter`` counts ``duplicate_exact`` and ``empty_value``).

    Raises:
        ConfigError: No key column, or a template names a column no row has.
        DatasetError: A file lacks the key column, has bad lines, or there are no rows.
    """
    started = time.perf_counter()
    if not settings.key_column:
        raise ConfigError("template mode needs template.key_column=<column naming each row>")
    files, skipped = table_files(docs)
    problems: list[RowProblem] = []
    rows: list[_Row] = []
    for file in files:
        for number, values in _read_table(file, problems):
            if not values.get(settings.key_column):
                problems.append(
                    RowProblem(
                        str(file),
                        number,
                        settings.key_column,
                        f"no value in key column {settings.key_column!r}; "
                        f"columns: {', '.join(values)}",
                    )
                )
                continue
            rows.append(_Row(f"{file.stem}/row-{number}", file.name, number, values))
    if problems:
        raise DatasetError(
            f"{len(problems)} problem(s) in the template-mode tables; fix them:", problems
        )
    if not rows:
        raise DatasetError(f"no table rows in {docs}; pass CSV or JSONL files with rows")

    columns = list(dict.fromkeys(c for row in rows for c in row.values))
    templates = dict(settings.questions) or {
        c: DEFAULT_TEMPLATE for c in columns if c != settings.key_column
    }
    for column, template in templates.items():
        unknown = _fields(template) - {"key", "column", *columns}
        if column not in columns or unknown:
            what = (
                f"column {column!r} is in no row"
                if column not in columns
                else (f"template {template!r} names unknown fields {sorted(unknown)}")
            )
            raise ConfigError(f"template.questions: {what}; columns are {', '.join(columns)}")

    rejects: Counter[str] = Counter()
    candidates: list[tuple[int, Sample]] = []
    for row in rows:
        key = row.values[settings.key_column]
        context = _row_text(row.values, settings.key_column)
        for column, template in templates.items():
            value = row.values.get(column, "")
            if not value:
                rejects["empty_value"] += 1
                continue
            fields = {**row.values, "key": key, "column": column.replace("_", " ")}
            question = template.format_map(fields)
            candidates.append(
                (
                    len(candidates),
                    Sample(
                        id="pending",
                        user_input=question,
                        reference=value,
                        reference_doc_ids=[row.doc_id],
                        reference_contexts=[context],
                        keywords=[value],
                        question_type=settings.types.get(column, settings.default_type),
                        metadata={
                            "source": row.source,
                            "row": row.number,
                            "column": column,
                            "template": template,
                        },
                    ),
                )
            )
    random.Random(settings.seed).shuffle(candidates)
    seen: set[str] = set()
    chosen: list[tuple[int, Sample]] = []
    for order, sample in candidates:
        key = question_key(sample.user_input)
        if key in seen:
            rejects["duplicate_exact"] += 1
            continue
        seen.add(key)
        chosen.append((order, sample))
    if settings.n > 0:
        chosen = chosen[: settings.n]
    chosen.sort(key=lambda item: item[0])
    samples = [
        s.model_copy(update={"id": f"tpl-{i:04d}"}) for i, (_, s) in enumerate(chosen, start=1)
    ]

    checkpoint = Checkpoint(out)
    checkpoint.reset()
    write_jsonl(samples, checkpoint.eval_path)
    corpus_path = Path(out) / CORPUS_FILE
    with corpus_path.open("w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(
                json.dumps(
                    {
                        "_id": row.doc_id,
                        "title": row.values[settings.key_column],
                        "text": _row_text(row.values, settings.key_column),
                        "metadata": {"source": row.source, "row": row.number},
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    checkpoint.write_manifest(
        {
            "format_version": 1,
            "mode": "template",
            "corpus": str(corpus_path),
            "tables": [str(f) for f in files],
            "settings": {
                "key_column": settings.key_column,
                "questions": templates,
                "types": dict(settings.types),
                "default_type": settings.default_type,
                "n": settings.n,
                "seed": settings.seed,
            },
            "skipped_files": skipped,
        }
    )
    return GenerationSummary(
        mode="template",
        eval_path=str(checkpoint.eval_path),
        corpus=str(corpus_path),
        n_requested=settings.n if settings.n > 0 else len(samples),
        accepted_by_type=dict(Counter(str(s.question_type) for s in samples)),
        rejects_by_filter=dict(rejects),
        skipped_files=skipped,
        n_documents=len(rows),
        n_chunks=len(rows),
        n_eligible_chunks=len(rows),
        n_planned=len(candidates),
        n_attempts=len(candidates),
        wall_time_s=time.perf_counter() - started,
    )


def _row_text(values: Mapping[str, str], key_column: str) -> str:
    """``column: value`` lines of a row's non-empty values, key column first."""
    ordered = [key_column, *(c for c in values if c != key_column)]
    return "\n".join(f"{c}: {values[c]}" for c in ordered if values.get(c))
