"""``rag-exp export``: a run's questions with its answers and contexts, as a dataset file that
``target=recorded`` (here or in a peer tool) scores again without calling the system.

The run's per-query table (``per_query_results.csv``, read by
:func:`~rag_experiments.tracking.mlflow_tracker.read_table`) becomes one
:class:`~rag_experiments.records.Sample` per row with its answer in ``recorded``, written as

* ``ragas``: a RAGAS EvaluationDataset (:func:`~rag_experiments.data.peer.write_ragas`;
  ``.jsonl``, ``.json`` or ``.csv`` by the output's extension), read by ``dataset=ragas``;
* ``deepeval``: DeepEval goldens JSON (:func:`~rag_experiments.data.peer.write_deepeval`),
  read by ``dataset=deepeval``;
* ``jsonl``: our JSONL (:func:`~rag_experiments.data.jsonl.write_jsonl`), read by
  ``dataset=jsonl``.

What a row carries: id, question, reference, question type, answerability, reference doc ids,
and — for runs logged since this command exists — reference contexts and keywords; the
response, retrieved contexts, chunk ids, doc ids and latency. A row whose target failed, or
that had no recorded response, is exported without a response (re-scored as NaN
``no_response``). Not carried: sample metadata and graded relevance (``relevance``, BEIR),
which the per-query table does not hold.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag_experiments.common.cliargs import add_tracking_uri, parse_store_command
from rag_experiments.data.writers import ExportFormat, export_writers
from rag_experiments.errors import DatasetError
from rag_experiments.records import RecordedAnswer, Sample
from rag_experiments.tracking.record import ARTIFACTS, PerQueryRow

WRITERS: dict[str, ExportFormat] = export_writers()
"""Export format → writer, as the writers of :mod:`rag_experiments.data` declare them."""


def table_samples(rows: Sequence[dict[str, Any]]) -> list[Sample]:
    """Samples with their recorded answers from per-query table rows.

    Args:
        rows: Rows of ``per_query_results.csv`` as dicts (missing cells NaN or None), read
            by :meth:`~rag_experiments.tracking.record.PerQueryRow.from_cells`.

    Returns:
        One sample per row, in table order.

    Raises:
        DatasetError: A row cannot become a sample (no id or question).
    """
    samples = []
    for number, cells in enumerate(rows, start=1):
        row = PerQueryRow.from_cells(cells, metrics=())
        failed = row.error is not None
        try:
            samples.append(
                Sample(
                    id=row.id,
                    user_input=row.user_input,
                    reference=row.reference,
                    reference_doc_ids=row.reference_doc_ids,
                    reference_contexts=row.reference_contexts,
                    keywords=row.keywords,
                    question_type=row.question_type,
                    answerable=row.answerable,
                    recorded=RecordedAnswer(
                        response=row.response if row.has_response else None,
                        retrieved_contexts=row.retrieved_contexts,
                        retrieved_ids=row.retrieved_ids,
                        retrieved_doc_ids=row.retrieved_doc_ids,
                        latency_ms=None if failed or math.isnan(row.latency_ms) else row.latency_ms,
                    ),
                )
            )
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise DatasetError(
                f"row {number} of the per-query table cannot be exported: {exc}"
            ) from exc
    return samples


def export_run(run_id: str, fmt: str, out: str | Path, tracking_uri: str) -> Path:
    """Write run ``run_id``'s questions with its answers to ``out`` in format ``fmt``.

    Args:
        run_id: An MLflow run with a per-query table.
        fmt: ``ragas``, ``deepeval`` or ``jsonl`` (see the module docstring).
        out: Output file.
        tracking_uri: Where the run is.

    Returns:
        The path written.

    Raises:
        DatasetError: Unknown format, or a row that cannot be exported.
        TrackingError: The run or its table cannot be fetched.
    """
    from rag_experiments.tracking.store import RunStore

    if fmt not in WRITERS:
        raise DatasetError(f"unknown export format {fmt!r}; use one of {', '.join(WRITERS)}")
    samples = table_samples(RunStore(tracking_uri).read_table(run_id).to_dict(orient="records"))
    return WRITERS[fmt].write(samples, out)


def export_command(argv: list[str]) -> int:
    """``rag-exp export <run_id> --format ragas|deepeval|jsonl --out FILE [--tracking-uri]``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp export",
        description="Write a run's questions with its answers and contexts as a dataset file, "
        "to score them again without calling the system (rag-exp run dataset=<format> "
        "dataset.path=FILE target=recorded) or in RAGAS / DeepEval.",
    )
    parser.add_argument("run_id", help=f"MLflow run id (its {ARTIFACTS.per_query_csv} is read)")
    parser.add_argument(
        "--format",
        required=True,
        choices=sorted(WRITERS),
        help="; ".join(f"{f.name}: {f.help}" for f in WRITERS.values()),
    )
    parser.add_argument("--out", required=True, help="output file (overwritten)")
    add_tracking_uri(parser, "the run")
    opts = parse_store_command(parser, argv)
    path = export_run(opts.run_id, opts.format, opts.out, opts.tracking_uri)
    print(f"wrote {path}")
    return 0
