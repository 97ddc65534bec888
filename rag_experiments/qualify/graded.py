"""People's verdicts on a run's rows: the labels file, the sample to grade, and agreement.

``rag-exp review --run <run id>`` (:mod:`rag_experiments.review.grading`) asks people for a
0/1 verdict per chosen metric on a sample of the run's rows. Every label is appended, as given,
to the run's **labels file** (:class:`LabelsFile`, fsync'd before the page is answered) in the
format ``calibration.labels`` reads (:func:`~rag_experiments.metrics.calibration.load_labels`),
one JSON object a line::

    {"id": "q03", "metric": "faithfulness", "value": 1.0, "grader": "ana",
     "run_id": "…", "time": "2026-12-03T14:40:00Z"}

A later line of the same ``(id, metric, grader)`` is that grader's revision (it replaces the
earlier one); different graders' labels of a row are kept apart. The file is also logged on the
run as the artifact ``grading/labels.jsonl``, so everything that takes labels takes the run id:
``rag-exp agreement <run id>`` (:func:`agreement_report`), ``calibration.labels=<run id>``
(:func:`run_labels_file`) and ``rag-exp judge-check judge_check.data=<run id>``
(:func:`graded_pairs`).

**The judge's verdict** of a row for metric ``m`` is ``1`` when its value is ≥
:data:`VERDICT_THRESHOLD` and ``0`` below (NaN: no verdict, the row is left out of that
metric's agreement).

**The sample** (:func:`grading_sample`): rows are grouped into strata by question type and by
the judge's verdicts on the chosen metrics (e.g. ``(factual, faithfulness=0)``); each stratum is
shuffled with the seed and the sample takes one row of each stratum in turn (equal allocation,
a stratum that runs out drops out) until ``n`` rows; the sample is then shuffled with the same
seed. Equal allocation over-samples the rare verdicts (a judge that says 1 on 90% of rows still
gets its 0s checked), which is what an agreement estimate needs (Cochran, *Sampling
Techniques*, 3rd ed., 1977, §5.5).

**Agreement**: Cohen's kappa (:func:`~rag_experiments.qualify.agreement.agreement`) of each
grader with the judge and of each pair of graders, on the rows both labeled.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rag_experiments.common.appendlog import AppendLog
from rag_experiments.errors import DatasetError
from rag_experiments.qualify.agreement import MetricAgreement, agreement
from rag_experiments.qualify.pairs import LabeledPair
from rag_experiments.tracking.record import PerQueryRow
from rag_experiments.tracking.store import RunStore, quiet_downloads

VERDICT_THRESHOLD = 0.5
"""A judged value at or above this is the verdict 1, below it 0."""

ARTIFACT_DIR = "grading"
"""Where the labels file is logged on the run (``grading/labels.jsonl``)."""
LABELS_NAME = "labels.jsonl"

VERDICTS = ("0", "1")
"""The verdict labels, as :func:`~rag_experiments.qualify.agreement.agreement` counts them."""


def verdict(value: float) -> int | None:
    """The judge's verdict of a value in [0, 1]: 1 at or above :data:`VERDICT_THRESHOLD`, 0
    below, None for NaN."""
    if value is None or math.isnan(value):
        return None
    return 1 if value >= VERDICT_THRESHOLD else 0


@dataclass(frozen=True)
class Label:
    """One person's verdict on one row for one metric.

    Attributes:
        id: The row's sample id.
        metric: The metric column.
        value: 1.0 or 0.0.
        grader: Who gave it.
        time: When (ISO 8601, UTC).
    """

    id: str
    metric: str
    value: float
    grader: str
    time: str = ""

    def to_json(self, run_id: str) -> dict[str, Any]:
        """The labels-file line (see the module docstring)."""
        return {
            "id": self.id,
            "metric": self.metric,
            "value": self.value,
            "grader": self.grader,
            "run_id": run_id,
            "time": self.time,
        }


class LabelsFile:
    """A run's labels file: append-only, each label on disk before :meth:`add` returns.

    Args:
        path: The file (created on the first label).
        run_id: The graded run (written on every line).
    """

    def __init__(self, path: str | Path, run_id: str) -> None:
        self.path = Path(path)
        self.run_id = run_id
        self._log = AppendLog(self.path)

    def add(self, label: Label) -> Label:
        """Append ``label`` (stamped with the time when it has none) and fsync it.

        Raises:
            OSError: The file cannot be written.
        """
        if not label.time:
            now = datetime.now(timezone.utc).isoformat(timespec="seconds")
            label = Label(label.id, label.metric, label.value, label.grader, now)
        self._log.append(label.to_json(self.run_id))
        return label

    def lines(self) -> list[Label]:
        """Every line as given, in file order (revisions included)."""
        return read_label_lines(self.path)

    def current(self) -> dict[tuple[str, str, str], Label]:
        """The labels in force: ``{(id, metric, grader): latest label}``."""
        return current_labels(self.lines())


def read_label_lines(path: str | Path) -> list[Label]:
    """The labels of a labels file, in file order (a torn last line is skipped).

    Raises:
        DatasetError: A line lacks ``id``, ``metric``, ``value`` or ``grader``.
    """
    out = []
    for record in AppendLog(path).read():
        row = record.value
        if not isinstance(row, dict) or not {"id", "metric", "value", "grader"} <= set(row):
            raise DatasetError(
                f"{path}:{record.number}: not a label line (needs id, metric, value, grader)"
            )
        out.append(
            Label(
                str(row["id"]),
                str(row["metric"]),
                float(row["value"]),
                str(row["grader"]),
                str(row.get("time", "")),
            )
        )
    return out


def current_labels(lines: Iterable[Label]) -> dict[tuple[str, str, str], Label]:
    """The latest label per ``(id, metric, grader)`` (a later line is a revision)."""
    out: dict[tuple[str, str, str], Label] = {}
    for label in lines:
        out[(label.id, label.metric, label.grader)] = label
    return out


# --- the sample ------------------------------------------------------------------------------
def grading_sample(
    rows: Sequence[PerQueryRow], metrics: Sequence[str], n: int, seed: int = 0
) -> list[PerQueryRow]:
    """A seeded sample of ``n`` rows stratified by question type and the judge's verdicts
    (see the module docstring).

    Args:
        rows: The run's rows.
        metrics: The metric columns to grade (rows with no judged value on any are skipped).
        n: Rows to draw (all eligible rows when fewer).
        seed: Seed of the shuffles.

    Returns:
        The sample, in a seeded random order.
    """
    strata: dict[tuple, list[PerQueryRow]] = {}
    for row in rows:
        verdicts = tuple(verdict(row.values.get(m, math.nan)) for m in metrics)
        if all(v is None for v in verdicts):
            continue
        strata.setdefault((row.question_type or "", verdicts), []).append(row)
    rng = random.Random(seed)
    queues = []
    for key in sorted(strata, key=repr):
        members = list(strata[key])
        rng.shuffle(members)
        queues.append(members)
    picked: list[PerQueryRow] = []
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    rng.shuffle(picked)
    return picked


# --- agreement -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Agreement:
    """Agreement of two raters on one metric.

    Attributes:
        metric: The metric column.
        a: The first rater (a grader's name).
        b: The second (another grader, or ``"judge"``).
        result: n, raw agreement and Cohen's kappa.
    """

    metric: str
    a: str
    b: str
    result: MetricAgreement


def agreement_report(
    labels: Mapping[tuple[str, str, str], Label], rows: Sequence[PerQueryRow]
) -> list[Agreement]:
    """Each grader against the judge, then each pair of graders, per metric.

    Args:
        labels: The labels in force (:func:`current_labels`).
        rows: The run's rows (the judge's values).

    Returns:
        One :class:`Agreement` per (metric, rater pair) with at least one shared row.
    """
    judge = {(r.id, m): verdict(v) for r in rows for m, v in r.values.items()}
    by: dict[str, dict[str, dict[str, int]]] = {}  # metric -> grader -> id -> label
    for (sid, metric, grader), label in labels.items():
        by.setdefault(metric, {}).setdefault(grader, {})[sid] = int(label.value >= 0.5)
    out = []
    for metric in sorted(by):
        graders = by[metric]
        for grader in sorted(graders):
            ids = [i for i in graders[grader] if judge.get((i, metric)) is not None]
            if ids:
                human = [str(graders[grader][i]) for i in ids]
                machine = [str(judge[(i, metric)]) for i in ids]
                out.append(
                    Agreement(metric, grader, "judge", agreement(human, machine, VERDICTS, metric))
                )
        for a, b in itertools.combinations(sorted(graders), 2):
            ids = sorted(set(graders[a]) & set(graders[b]))
            if ids:
                la = [str(graders[a][i]) for i in ids]
                lb = [str(graders[b][i]) for i in ids]
                out.append(Agreement(metric, a, b, agreement(la, lb, VERDICTS, metric)))
    return out


# --- a graded run as the input of other commands ----------------------------------------------
def run_labels_file(store: RunStore, run_id: str) -> Path:
    """The labels file logged on a graded run (downloaded to a local path).

    Raises:
        TrackingError: The run cannot be reached.
        DatasetError: The run has no ``grading/labels.jsonl`` (it was never graded).
    """
    path = f"{ARTIFACT_DIR}/{LABELS_NAME}"
    if path not in store.list_artifacts(run_id, ARTIFACT_DIR):
        raise DatasetError(
            f"run {run_id} has no {path}: grade it first with `rag-exp review --run {run_id}`"
        )
    with quiet_downloads():
        return store.download(run_id, path)


def graded_pairs(store: RunStore, run_id: str, metric: str = "faithfulness") -> list[LabeledPair]:
    """A graded run's rows as judge-check pairs: question, contexts, answer and the people's
    verdict on ``metric`` (the majority of its graders; a tie is left out).

    Raises:
        TrackingError: The run cannot be reached.
        DatasetError: The run was not graded, or no row has a label on ``metric``.
    """
    labels = current_labels(read_label_lines(run_labels_file(store, run_id)))
    votes: dict[str, list[float]] = {}
    for (sid, m, _), label in labels.items():
        if m == metric:
            votes.setdefault(sid, []).append(label.value)
    with quiet_downloads():
        rows = store.read_rows(run_id)
    pairs = []
    for row in rows:
        values = votes.get(row.id)
        if not values or sum(values) * 2 == len(values):
            continue
        pairs.append(
            LabeledPair(
                id=row.id,
                question=row.user_input,
                contexts=tuple(row.retrieved_contexts),
                answer=row.response,
                faithful=sum(values) * 2 > len(values),
            )
        )
    if not pairs:
        raise DatasetError(f"run {run_id} has no row labeled on {metric} by a majority")
    return pairs
