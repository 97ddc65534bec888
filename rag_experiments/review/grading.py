"""Grade a run in the browser (``rag-exp review --run <run id>``): people give 0/1 verdicts on
a seeded, stratified sample of the run's rows, blind to the judge until they submit.

Routes (JSON unless said otherwise)::

    GET   /              the page (HTML): grader name, one row at a time, keys 1/0, n/p
    GET   /items?grader= the sample: question, contexts, answer, reference; for the rows this
                         grader has submitted, their labels and then the judge's verdicts
    POST  /label         {grader, id, labels: {metric: 0|1}}: append, sync, answer with the
                         judge's verdicts and the agreement so far
    GET   /agreement     kappa of each grader with the judge and between graders, per metric
    GET   /health        {"status": "ok", …}

Where labels go (:mod:`rag_experiments.qualify.graded`): each is appended to the run's labels
file ``<workspace>/<run id>/labels.jsonl`` and fsync'd **before** the answer (nothing acknowledged
is lost to a closed tab or a killed server), then the file is logged on the run
(``grading/labels.jsonl``) and each label put on its question's trace as a ``HUMAN`` feedback
(:mod:`rag_experiments.tracking.human_feedback`; idempotent). A failed sync is retried at the next
label and when the app starts, which replays the whole file (labels already on the traces are
kept as they are, never doubled).

Why not MLflow's own review UI: ``mlflow.genai.labeling`` (labeling sessions) is Databricks-only
in MLflow 3.17, and its open review queues (``mlflow.genai.review_queues``) work offline but show
the judge's feedback two clicks away (View full trace, Assess), record every grader as ``default``
without MLflow's auth, and show neither the retrieved contexts and reference apart from the
trace's JSON nor agreement after a submission; see ``docs/how-to/grading.md``.

Security is the review app's (:func:`~rag_experiments.review.app.install_security`): token
header on every POST, loopback ``Host`` names, CSP without inline script; no route takes a path.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flask import Flask, jsonify, render_template, request

from rag_experiments.errors import RagExpError, ReviewError
from rag_experiments.qualify.agreement import LABEL_SETS
from rag_experiments.qualify.graded import (
    ARTIFACT_DIR,
    LABELS_NAME,
    Label,
    LabelsFile,
    agreement_report,
    grading_sample,
    verdict,
)
from rag_experiments.review.app import _error, _json_body, install_security
from rag_experiments.tracking.human_feedback import log_human_label
from rag_experiments.tracking.record import PerQueryRow
from rag_experiments.tracking.store import RunStore

log = logging.getLogger(__name__)

GRADER = re.compile(r"[\w.@ -]{1,64}")
"""A grader's name: letters, digits, ``_ . @ -`` and spaces, 1–64 characters."""


def default_metrics(rows: Sequence[PerQueryRow]) -> list[str]:
    """The run's graded metrics (declared with labels) whose values are in [0, 1]."""
    out = []
    for name in LABEL_SETS:
        values = [r.values.get(name, math.nan) for r in rows]
        valid = [v for v in values if not math.isnan(v)]
        if valid and all(0.0 <= v <= 1.0 for v in valid):
            out.append(name)
    return out


class Grading:
    """The state of one run's grading: its sample, its labels file, the sync to MLflow.

    Args:
        store: The run's tracking store.
        run_id: The run.
        folder: Where the labels file lives (``<folder>/<run id>/labels.jsonl``).
        metrics: The metric columns to grade (default :func:`default_metrics`).
        n: Rows in the sample.
        seed: Seed of the sample.

    Raises:
        TrackingError: The run cannot be read.
        ReviewError: The run has no metric to grade, or a named one is not a [0, 1] column.
    """

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        folder: str | Path,
        metrics: Sequence[str] | None = None,
        n: int = 20,
        seed: int = 0,
    ) -> None:
        self.store, self.run_id = store, run_id
        self.rows = store.read_rows(run_id)
        chosen = list(metrics) if metrics else default_metrics(self.rows)
        columns = set(self.rows[0].values) if self.rows else set()
        bad = [m for m in chosen if m not in columns]
        if not chosen or bad:
            what = "no metric to grade" if not chosen else "no column " + ", ".join(bad)
            raise ReviewError(
                f"run {run_id}: {what}; its columns: {', '.join(sorted(columns))}; pass "
                "--metric <column> (a [0, 1] judged metric such as faithfulness)"
            )
        self.metrics = chosen
        self.sample = grading_sample(self.rows, chosen, n, seed)
        self.by_id = {r.id: r for r in self.rows}
        self.labels = LabelsFile(Path(folder) / run_id / LABELS_NAME, run_id)
        self._lock = threading.Lock()
        self._synced: set[tuple[str, str, str, float]] = set()

    def items(self, grader: str) -> list[dict[str, Any]]:
        """The sample as the page shows it; judge verdicts only on rows ``grader`` submitted."""
        current = self.labels.current()
        out = []
        for row in self.sample:
            mine = {
                m: current[(row.id, m, grader)].value
                for m in self.metrics
                if (row.id, m, grader) in current
            }
            item = {
                "id": row.id,
                "question_type": row.question_type,
                "question": row.user_input,
                "contexts": list(row.retrieved_contexts),
                "answer": row.response,
                "reference": row.reference,
                "labels": mine,
            }
            if len(mine) == len(self.metrics):
                item["judge"] = self.judge(row.id)
            out.append(item)
        return out

    def judge(self, sample_id: str) -> dict[str, int | None]:
        """The judge's verdict per graded metric on a row (None: no verdict)."""
        row = self.by_id[sample_id]
        return {m: verdict(row.values.get(m, math.nan)) for m in self.metrics}

    def add(self, grader: str, sample_id: str, labels: dict[str, int]) -> dict[str, Any]:
        """Record a submission (on disk first), then sync it; the judge and agreement.

        Raises:
            ReviewError: A bad grader name, a row not in the sample, a metric not graded or a
                value other than 0/1.
        """
        if not GRADER.fullmatch(grader or ""):
            raise ReviewError("give your name (letters, digits, . _ @ - and spaces; ≤ 64)")
        if sample_id not in {r.id for r in self.sample}:
            raise ReviewError(f"row {sample_id!r} is not in this grading sample")
        if set(labels) != set(self.metrics):
            raise ReviewError(f"give a verdict for each of {', '.join(self.metrics)}")
        if any(v not in (0, 1) or isinstance(v, bool) for v in labels.values()):
            raise ReviewError("verdicts are 1 (yes) or 0 (no)")
        with self._lock:
            for metric in self.metrics:
                self.labels.add(Label(sample_id, metric, float(labels[metric]), grader))
        self.sync()
        return {"judge": self.judge(sample_id), "agreement": self.agreement()}

    def agreement(self) -> list[dict[str, Any]]:
        """:func:`~rag_experiments.qualify.graded.agreement_report` as JSON rows."""
        rows = []
        for a in agreement_report(self.labels.current(), self.rows):
            r = a.result
            rows.append({
                "metric": a.metric, "a": a.a, "b": a.b, "n": r.n,
                "raw": None if math.isnan(r.raw) else round(r.raw, 4),
                "kappa": None if math.isnan(r.kappa) else round(r.kappa, 4),
            })  # fmt: skip
        return rows

    def sync(self) -> bool:
        """Log the labels file on the run and put every label in force on its trace
        (idempotent); True when everything is synced. A failure is logged and left for the
        next call."""
        with self._lock:
            current = self.labels.current()
            try:
                for (sid, metric, grader), label in current.items():
                    key = (sid, metric, grader, label.value)
                    if key in self._synced:
                        continue
                    log_human_label(self.store.uri, self.run_id, sid, metric, label.value, grader)
                    self._synced.add(key)
                if current:
                    self.store.log_artifacts(self.run_id, self.labels.path.parent, ARTIFACT_DIR)
            except RagExpError as exc:
                log.warning(
                    "grading: labels kept in %s, not yet in MLflow: %s", self.labels.path, exc
                )
                return False
        return True


def create_grading_app(
    store: RunStore,
    run_id: str,
    folder: str | Path,
    *,
    metrics: Sequence[str] | None = None,
    n: int = 20,
    seed: int = 0,
    mlflow_ui: str = "http://127.0.0.1:5000",
    loopback_only: bool = True,
) -> Flask:
    """Build the grading app of a run (see the module docstring); replays its labels file into
    MLflow first.

    Returns:
        The Flask app; ``app.extensions["rag_exp_grading"]`` is the :class:`Grading`.

    Raises:
        TrackingError: The run cannot be read.
        ReviewError: Nothing to grade (see :class:`Grading`).
    """
    grading = Grading(store, run_id, folder, metrics, n, seed)
    grading.sync()
    app = Flask("rag_experiments.review", root_path=str(Path(__file__).parent))
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.config.update(MAX_CONTENT_LENGTH=2**16)
    install_security(app, loopback_only)
    app.extensions["rag_exp_grading"] = grading

    @app.get("/")
    def index() -> Any:
        return render_template(
            "grade.html",
            token=app.config["REVIEW_TOKEN"],
            run_id=run_id,
            metrics=grading.metrics,
            n=len(grading.sample),
            labels_path=str(grading.labels.path),
            run_link=f"{mlflow_ui.rstrip('/')}/#/experiments/"
            f"{store.get_run(run_id).experiment_id}/runs/{run_id}",
        )

    @app.get("/items")
    def items() -> Any:
        grader = request.args.get("grader", "")
        return jsonify(metrics=grading.metrics, items=grading.items(grader))

    @app.post("/label")
    def label() -> Any:
        body = _json_body()
        if not isinstance(body, dict) or not isinstance(body.get("labels"), dict):
            raise ReviewError("send {grader, id, labels: {metric: 0 or 1}}")
        return jsonify(
            grading.add(str(body.get("grader", "")), str(body.get("id", "")), body["labels"])
        )

    @app.get("/agreement")
    def agreement() -> Any:
        return jsonify(agreement=grading.agreement())

    @app.get("/health")
    def health() -> Any:
        return jsonify(status="ok", run_id=run_id, labels=len(grading.labels.lines()))

    @app.errorhandler(ReviewError)
    def review_error(exc: ReviewError) -> Any:
        return _error(str(exc), exc.status)

    @app.errorhandler(RagExpError)
    def rag_exp_error(exc: RagExpError) -> Any:
        return _error(str(exc), 400)

    return app
