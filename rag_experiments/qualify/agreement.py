"""Judge–human agreement: is the LLM judge's verdict the one a person would give?

Two commands:

* ``rag-exp grade-sheet <run_id> --n 20 --seed 0`` draws ``n`` graded questions of a run
  (seeded), and writes a **blinded** sheet ``grade_sheet_<sheet_id>.csv`` — question,
  reference, numbered contexts, response and one empty column per judged metric; the judge's
  verdicts are not in it — and a separate key ``grade_sheet_<sheet_id>.key.json`` (the
  sample ids and the judge's labels). Give graders the sheet only.
* ``rag-exp agreement <filled.csv>`` reads the filled sheet and its key, and computes per
  metric the raw agreement (share of items where the human label equals the judge's) and
  Cohen's kappa (``sklearn.metrics.cohen_kappa_score``); ordinal scales also get the
  quadratic-weighted kappa. The values are printed and logged to the original run as metrics
  ``agreement.<metric>.raw`` / ``.kappa`` / ``.kappa_quadratic`` / ``.n`` and artifact
  ``agreement/<sheet_id>.json``.

Label sets (what graders write; the judge's score is mapped the same way):

============================  =====================================  ===========================
metric column                 labels                                 judge score → label
============================  =====================================  ===========================
``faithfulness``              ``faithful``, ``partial``,             s ≥ 0.8 faithful; 0.4 ≤ s <
                              ``unfaithful``                         0.8 partial; s < 0.4
                                                                     unfaithful
``context_recall``            ``complete``, ``partial``, ``missing`` same thresholds
``answer_judge.accuracy``     ``1`` … ``5``                          the judge's raw 1–5 grade
``answer_judge.completeness`` ``1`` … ``5``                          (``answer_judge.<c>_raw``)
``answer_judge.relevance``    ``1`` … ``5``
============================  =====================================  ===========================

Cohen's kappa: κ = (p_o − p_e) / (1 − p_e), with p_o the observed agreement and p_e the
agreement expected by chance from the two raters' label frequencies (Cohen 1960, *Educational
and Psychological Measurement* 20(1)). κ is undefined (NaN, not logged) when both raters use a
single label.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rag_experiments.errors import DatasetError
from rag_experiments.metrics.definitions import LabelSet, LiveMapping, declared_outputs
from rag_experiments.tracking.record import ARTIFACTS, PerQueryRow
from rag_experiments.tracking.store import RunStore

LABEL_SETS: Mapping[str, LabelSet] = LiveMapping(
    lambda: {d.name: ls for d in declared_outputs() if (ls := d.label_set()) is not None}
)
"""Metric column → how people grade it (see the module docstring): every declared output with
``labels`` (:class:`~rag_experiments.metrics.definitions.MetricDefinition`), so a metric that
declares labels is graded without a change here."""

SHEET_FIXED = ("item", "sheet_id", "question", "reference", "contexts", "response")


def _contexts(items: Sequence[str]) -> str:
    return "\n\n".join(f"[{i}] {c}" for i, c in enumerate(items, 1))


def grade_sheet(
    run_id: str, tracking_uri: str, n: int = 20, seed: int = 0, out_dir: str | Path = "."
) -> tuple[Path, Path]:
    """Write the blinded grade sheet and its key for a run.

    Args:
        run_id: A run with judged metrics (its ``per_query_results.csv``).
        tracking_uri: Where the run is.
        n: Questions to draw (all graded ones when fewer).
        seed: Seed of the draw and of the item order.
        out_dir: Folder for the two files.

    Returns:
        ``(sheet path, key path)``.

    Raises:
        TrackingError: The run or its table cannot be fetched.
        DatasetError: The run has no judged metric of :data:`LABEL_SETS` with a value.
    """
    rows = RunStore(tracking_uri).read_rows(run_id)
    metrics = [
        m
        for m, ls in LABEL_SETS.items()
        if any(ls.source in r.values and not math.isnan(r.values[ls.source]) for r in rows)
    ]
    if not metrics:
        raise DatasetError(
            f"run {run_id} has no judged metric to grade (looked for "
            f"{', '.join(ls.source for ls in LABEL_SETS.values())}); run it with metrics=custom"
        )

    def judged(row: PerQueryRow, m: str) -> bool:
        return not math.isnan(row.values[LABEL_SETS[m].source])

    eligible = [i for i, r in enumerate(rows) if any(judged(r, m) for m in metrics)]
    rng = random.Random(seed)
    picked = rng.sample(eligible, min(n, len(eligible)))  # random order: items are shuffled
    sheet_id = f"{run_id[:8]}-s{seed}-n{len(picked)}"
    sheet_rows, items = [], []
    for item, i in enumerate(picked, 1):
        row = rows[i]
        sheet_rows.append({
            "item": item, "sheet_id": sheet_id, "question": row.user_input,
            "reference": row.reference, "contexts": _contexts(row.retrieved_contexts),
            "response": row.response, **{m: "" for m in metrics}, "notes": "",
        })  # fmt: skip
        judge = {
            m: LABEL_SETS[m].to_label(row.values[LABEL_SETS[m].source])
            for m in metrics
            if judged(row, m)
        }
        items.append({"item": item, "sample_id": row.id, "judge": judge})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sheet = out / f"grade_sheet_{sheet_id}.csv"
    key = out / f"grade_sheet_{sheet_id}.key.json"
    pd.DataFrame(sheet_rows).fillna("").to_csv(sheet, index=False)
    key.write_text(json.dumps({
        "sheet_id": sheet_id, "run_id": run_id, "tracking_uri": tracking_uri, "seed": seed,
        "labels": {m: list(LABEL_SETS[m].labels) for m in metrics}, "items": items,
    }, indent=2) + "\n", encoding="utf-8")  # fmt: skip
    return sheet, key


@dataclass
class MetricAgreement:
    """Agreement on one metric.

    Attributes:
        metric: The metric column.
        n: Items graded by the human and the judge.
        raw: Share of items with the same label, in [0, 1].
        kappa: Cohen's kappa, in [-1, 1] (NaN when undefined).
        kappa_quadratic: Quadratic-weighted kappa (ordinal scales), NaN otherwise.
    """

    metric: str
    n: int
    raw: float
    kappa: float
    kappa_quadratic: float


def agreement(
    human: Sequence[str],
    judge: Sequence[str],
    labels: Sequence[str],
    metric: str = "",
    ordinal: bool = False,
) -> MetricAgreement:
    """Raw agreement and Cohen's kappa of two label sequences.

    Args:
        human: One label per item.
        judge: The judge's label per item (same order).
        labels: The label set (its order is the ordinal order).
        metric: Name carried into the result.
        ordinal: Also compute the quadratic-weighted kappa.

    Returns:
        The :class:`MetricAgreement`.
    """
    import warnings

    from sklearn.metrics import cohen_kappa_score

    n = len(human)
    raw = sum(h == j for h, j in zip(human, judge, strict=True)) / n if n else math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # undefined (NaN) when only one label is used
        kappa = float(cohen_kappa_score(human, judge, labels=list(labels))) if n else math.nan
        quad = (
            float(cohen_kappa_score(human, judge, labels=list(labels), weights="quadratic"))
            if n and ordinal
            else math.nan
        )
    return MetricAgreement(metric, n, raw, kappa, quad)


def score_sheet(
    filled: str | Path, key_path: str | Path | None = None
) -> tuple[dict, list[MetricAgreement]]:
    """Compare a filled sheet with its key.

    Args:
        filled: The sheet with the graders' labels (blank cells = not graded).
        key_path: Its key; default ``grade_sheet_<sheet_id>.key.json`` beside the sheet.

    Returns:
        ``(key, one MetricAgreement per metric)``.

    Raises:
        DatasetError: Unreadable sheet or key, mismatched sheet id, or labels outside the
            metric's label set (every bad cell is listed).
    """
    filled = Path(filled)
    try:
        sheet = pd.read_csv(filled, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"cannot read the grade sheet {filled}: {exc}") from exc
    if "sheet_id" not in sheet.columns or "item" not in sheet.columns or sheet.empty:
        raise DatasetError(f"{filled} is not a grade sheet (no item/sheet_id columns or no rows)")
    sheet_id = sheet["sheet_id"].iloc[0]
    key_path = Path(key_path) if key_path else filled.parent / f"grade_sheet_{sheet_id}.key.json"
    try:
        key = json.loads(key_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(
            f"cannot read the key {key_path} ({exc}): pass --key <key.json>"
        ) from exc
    if key.get("sheet_id") != sheet_id:
        raise DatasetError(f"{key_path} is the key of sheet {key.get('sheet_id')}, not {sheet_id}")
    judge_by_item = {int(it["item"]): it["judge"] for it in key["items"]}
    errors, results = [], []
    for metric, labels in key["labels"].items():
        if metric not in sheet.columns:
            continue
        human, judged = [], []
        for _, row in sheet.iterrows():
            label = str(row[metric]).strip().lower()
            if not label:
                continue
            if label not in labels:
                errors.append(
                    f"{filled.name}: item {row['item']}: {metric}: {label!r} is not "
                    f"one of {', '.join(labels)}"
                )
                continue
            judge = judge_by_item.get(int(row["item"]), {}).get(metric)
            if judge is not None:
                human.append(label)
                judged.append(judge)
        ordinal = LABEL_SETS[metric].ordinal if metric in LABEL_SETS else False
        results.append(agreement(human, judged, labels, metric, ordinal))
    if errors:
        raise DatasetError(
            "the grade sheet has labels outside the label sets:\n" + "\n".join(errors)
        )
    return key, results


def log_agreement(
    key: dict, results: Sequence[MetricAgreement], tracking_uri: str | None = None
) -> None:
    """Log the agreement to the original run (metrics ``agreement.<metric>.*`` and artifact
    ``agreement/<sheet_id>.json``); NaN values are not logged.

    Raises:
        TrackingError: The run cannot be reached.
    """
    store = RunStore(tracking_uri or key["tracking_uri"])
    values = {}
    for r in results:
        for name, v in (
            ("n", float(r.n)),
            ("raw", r.raw),
            ("kappa", r.kappa),
            ("kappa_quadratic", r.kappa_quadratic),
        ):
            if not math.isnan(v):
                values[f"agreement.{r.metric}.{name}"] = v
    store.log_metrics(key["run_id"], values)
    store.log_dict(
        key["run_id"],
        {"sheet_id": key["sheet_id"], "seed": key["seed"], "results": [vars(r) for r in results]},
        f"{ARTIFACTS.agreement_dir}/{key['sheet_id']}.json",
    )
