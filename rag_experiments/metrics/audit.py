"""The judge audit trail and judge usage of a run.

Every judged metric yields one JSON-ready audit record per row (claims and verdicts, generated
questions, per-context verdicts, the judge's raw text, and its usage as ``judge_calls``,
``judge_prompt_tokens``, ``judge_completion_tokens``). :func:`collect_audit` joins them per
question into the rows of ``judge_audit.jsonl`` and sums the usage into run-level values, the
same way for every backend.

**One record shape for explanations.** Whatever else a backend keeps, every judged metric's
record holds :data:`RATIONALE_KEY`: a list of readable lines saying why the row got its value
(the claims with their verdicts, the per-context verdicts, the generated questions, the
backend's own reason) or, when the judgement failed, the error message; ``[]`` when no judge
was asked. Readers that show a verdict (MLflow trace assessments, scorers) read only these
lines, never a backend's own fields.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rag_experiments.records import Sample

USAGE_KEYS = ("judge_calls", "judge_prompt_tokens", "judge_completion_tokens")
"""Per-record usage counters summed over metrics."""

RATIONALE_KEY = "rationale"
"""Key of the explanation lines in every judged metric's audit record (``list[str]``)."""


def collect_audit(
    audits: Mapping[str, Sequence[dict[str, Any]]], samples: Sequence[Sample]
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Join the metrics' audit records per question and sum judge usage.

    Args:
        audits: ``{metric name: one record per sample}`` (a metric whose records do not
            number one per sample, e.g. because it crashed, is left out).
        samples: The samples, in row order.

    Returns:
        ``(rows, run_values)``. ``rows`` (empty without audits): per question ``id``,
        ``question_type``, the summed ``judge_calls`` / tokens and one entry per metric name.
        ``run_values``: ``judge_calls`` (total), ``judge_calls_per_question`` (mean over all
        questions), ``judge_calls_per_question_max``, ``judge_prompt_tokens``,
        ``judge_completion_tokens`` (totals) and ``judge_tokens_per_question`` (mean).
    """
    kept = [
        (name, list(records)) for name, records in audits.items() if len(records) == len(samples)
    ]
    if not kept or not samples:
        return [], {}
    rows = []
    for i, sample in enumerate(samples):
        row: dict[str, Any] = {"id": sample.id, "question_type": sample.question_type}
        row.update({k: 0 for k in USAGE_KEYS})
        for name, records in kept:
            rec = records[i]
            row[name] = rec
            for k in USAGE_KEYS:
                row[k] += int(rec.get(k, 0))
        rows.append(row)
    calls = [r["judge_calls"] for r in rows]
    prompt_tokens = sum(r["judge_prompt_tokens"] for r in rows)
    completion_tokens = sum(r["judge_completion_tokens"] for r in rows)
    n = len(rows)
    run_values = {
        "judge_calls": float(sum(calls)),
        "judge_calls_per_question": sum(calls) / n,
        "judge_calls_per_question_max": float(max(calls)),
        "judge_prompt_tokens": float(prompt_tokens),
        "judge_completion_tokens": float(completion_tokens),
        "judge_tokens_per_question": (prompt_tokens + completion_tokens) / n,
    }
    return rows, run_values


def to_jsonl(rows: Sequence[dict[str, Any]]) -> str:
    """One JSON object per line (UTF-8 text kept as is; NaN written as ``null``)."""
    return "".join(_dumps_nan_as_null(r) + "\n" for r in rows)


def _dumps_nan_as_null(row: dict[str, Any]) -> str:
    """``json.dumps(nan_to_none(row))``, walking the row only when it holds a NaN (the encoder
    refuses NaN with ``allow_nan=False``; tuples are written as lists either way)."""
    try:
        return json.dumps(row, ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN (or an infinity, which nan_to_none keeps as json.dumps does)
        return json.dumps(nan_to_none(row), ensure_ascii=False)


def nan_to_none(value: Any) -> Any:
    """``value`` with every NaN float, in nested dicts, lists and tuples, replaced by None
    (JSON has no NaN); tuples become lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nan_to_none(v) for v in value]
    return value
