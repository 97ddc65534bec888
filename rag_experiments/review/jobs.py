"""The background generation job of the review app.

One job at a time runs :func:`~rag_experiments.generate.app.run_generate` in a thread: the
same generation, checkpoints and MLflow run (experiment ``datasets``) as ``rag-exp generate``,
into ``<workspace>/generation/``. The job keeps a snapshot the page polls (``GET /progress``):
its state, the latest :class:`~rag_experiments.generate.generator.GenerationProgress`, the
outcome counts read back from the checkpoint when it ends, an error message, and the link to
its MLflow run. Each time the generator accepts a pair, the new samples of ``eval.jsonl`` are
handed to ``on_samples`` (the review state turns them into cards). :meth:`GenerationJob.cancel`
sets the generator's cancel event: it stops before its next wave of calls, like Ctrl-C, and
everything accepted stays on disk and in the cards. The final snapshot is written to the
workspace, so the outcome and the MLflow link survive a restart of the app.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rag_experiments.build import build_tracker
from rag_experiments.errors import RagExpError, ReviewError
from rag_experiments.generate.app import GenerationInterrupted, run_generate
from rag_experiments.generate.checkpoint import Checkpoint, CheckpointState
from rag_experiments.generate.generator import GenerationProgress
from rag_experiments.records import Sample

log = logging.getLogger(__name__)

JOB_STATES: tuple[str, ...] = ("idle", "running", "done", "cancelled", "failed")


@dataclass
class JobSnapshot:
    """What the page shows about the generation job.

    Attributes:
        state: One of :data:`JOB_STATES`.
        progress: The latest progress (``accepted``, ``rejected``, ``remaining`` per type …).
        n_accepted: Answerable pairs in the output folder.
        n_unanswerable: Unanswerable questions in the output folder.
        rejects_by_reason: Rejected attempts per filter (``answer_too_short`` …).
        errors_by_reason: Attempts failed on a model error, per reason.
        error: Why the job failed (``failed`` only).
        message: A sentence for the page (what happened, what to do).
        stage: The latest step the generation logged (``Embedding 120 chunks with …``): what
            it does before the first attempt (reading documents, building the index, loading
            the model), which takes minutes with embedded models.
        mlflow_url: The job's MLflow run in the UI, once the run exists.
        started_at: Unix time the job started.
        finished_at: Unix time it ended.
    """

    state: str = "idle"
    progress: dict[str, Any] | None = None
    n_accepted: int = 0
    n_unanswerable: int = 0
    rejects_by_reason: dict[str, int] = field(default_factory=dict)
    errors_by_reason: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    message: str | None = None
    stage: str | None = None
    mlflow_url: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return asdict(self)


class GenerationJob:
    """One generation in a background thread.

    Args:
        cfg: The composed ``generate`` config (see
            :func:`~rag_experiments.review.options.compose_generate_config`).
        on_samples: Called (in the job's thread) with every sample of ``eval.jsonl`` after a
            pair was accepted, and once at the end.
        mlflow_ui: Base URL of the MLflow UI for the run link.
        record: File the final snapshot is written to (None = not written).
    """

    def __init__(
        self,
        cfg: DictConfig,
        on_samples: Callable[[list[Sample]], None],
        mlflow_ui: str = "http://127.0.0.1:5000",
        record: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.record = record
        self.out = Path(str(cfg.out))
        self.on_samples = on_samples
        self.mlflow_ui = mlflow_ui.rstrip("/")
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._snapshot = JobSnapshot()
        self._seen = -1
        self._tracker: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the generation thread."""
        with self._lock:
            self._snapshot = JobSnapshot(
                state="running", started_at=time.time(), message="Generating …"
            )
        self._thread = threading.Thread(target=self._run, name="rag-exp-review-job", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Ask the generation to stop before its next wave of model calls."""
        self._cancel.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def snapshot(self) -> JobSnapshot:
        """A copy of the current snapshot."""
        with self._lock:
            data = self._snapshot.to_dict()
        return JobSnapshot(**data)

    # --- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        state, error = "done", None
        stages = _StageHandler(self._set_stage)
        package_log = logging.getLogger("rag_experiments")
        level = package_log.level
        if package_log.getEffectiveLevel() > logging.INFO:
            package_log.setLevel(logging.INFO)  # records the handler needs; no handler prints them
        package_log.addHandler(stages)
        try:
            self._tracker = build_tracker(self.cfg, run_name=str(self.cfg.run_name))
            run_generate(
                self.cfg, tracker=self._tracker, on_progress=self._progress, cancel=self._cancel
            )
        except GenerationInterrupted:
            state = "cancelled"
        except RagExpError as exc:
            state, error = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - report any failure on the page
            log.exception("review generation job failed")
            state, error = "failed", f"unexpected {type(exc).__name__}: {exc}"
        finally:
            package_log.removeHandler(stages)
            package_log.setLevel(level)
        try:
            self._sync(force=True)
        except RagExpError as exc:
            state, error = "failed", error or str(exc)
        self._finish(state, error)

    def _set_stage(self, text: str) -> None:
        with self._lock:
            self._snapshot.stage = text

    def _progress(self, progress: GenerationProgress) -> None:
        with self._lock:
            self._snapshot.progress = asdict(progress)
            self._snapshot.mlflow_url = self._run_url()
        self._sync(accepted=progress.n_accepted + sum(progress.unanswerable.values()))

    def _sync(self, accepted: int | None = None, force: bool = False) -> None:
        """Hand the samples of ``eval.jsonl`` to ``on_samples`` when their number changed."""
        if not force and accepted == self._seen:
            return
        samples = Checkpoint(self.out).samples()
        self._seen = len(samples)
        self.on_samples(samples)

    def _run_url(self) -> str | None:
        tracker = self._tracker
        if tracker is None or not getattr(tracker, "run_id", None):
            return None
        return f"{self.mlflow_ui}/#/experiments/{tracker.experiment_id}/runs/{tracker.run_id}"

    def _finish(self, state: str, error: str | None) -> None:
        """Record the outcome counts from the checkpoint and the message for the page."""
        checkpoint = Checkpoint(self.out)
        loaded = CheckpointState()
        skipped: dict[str, str] = {}
        if checkpoint.exists():
            skipped = dict((checkpoint.read_manifest() or {}).get("skipped_files") or {})
            loaded = checkpoint.load()
        rejects = Counter(loaded.attempts_by("rejected"))
        errors = Counter(loaded.attempts_by("error"))
        n_accepted = sum(loaded.samples_by_type(answerable=True).values())
        n_unanswerable = len(loaded.samples) - n_accepted
        with self._lock:
            snap = self._snapshot
            snap.state, snap.error, snap.finished_at = state, error, time.time()
            snap.n_accepted, snap.n_unanswerable = n_accepted, n_unanswerable
            snap.rejects_by_reason, snap.errors_by_reason = dict(rejects), dict(errors)
            snap.mlflow_url = self._run_url()
            snap.message = _message(
                state, error, n_accepted, n_unanswerable, rejects, errors, skipped
            )
            data = snap.to_dict()
        if self.record is not None:
            tmp = self.record.with_name(self.record.name + ".tmp")
            tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, self.record)


class _StageHandler(logging.Handler):
    """Hands the INFO (and higher) messages the generation logs in the job's own thread to
    ``on_stage``: the page shows the latest as the job's current step (the log lines of the
    terminal, where the user could not see them)."""

    def __init__(self, on_stage: Callable[[str], None]) -> None:
        super().__init__(logging.INFO)
        self.on_stage = on_stage
        self.thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread:
            return
        try:
            self.on_stage(record.getMessage()[:300])
        except Exception:  # noqa: BLE001 - a log line must never break the job
            self.handleError(record)


def _message(
    state: str,
    error: str | None,
    n_accepted: int,
    n_unanswerable: int,
    rejects: Counter[str],
    errors: Counter[str],
    skipped: dict[str, str] | None = None,
) -> str:
    """The page's sentence about a finished job; never silent about an empty result or about
    uploads that could not be read (``skipped``: file → reason)."""
    if skipped:
        unread = "; ".join(f"{name}: {why}" for name, why in sorted(skipped.items()))
        note = (
            f" Not read ({len(skipped)} file(s), left out of the corpus): {unread}. "
            "Remove or fix them and upload again."
        )
    else:
        note = ""
    return _outcome(state, error, n_accepted, n_unanswerable, rejects, errors) + note


def _outcome(
    state: str,
    error: str | None,
    n_accepted: int,
    n_unanswerable: int,
    rejects: Counter[str],
    errors: Counter[str],
) -> str:
    """The sentence about what the job produced (see :func:`_message`)."""
    if state == "failed":
        return f"Generation failed: {error}"
    kept = f"{n_accepted} pairs and {n_unanswerable} unanswerable questions are ready to review"
    if n_accepted + n_unanswerable == 0:
        reasons = ", ".join(f"{k} {v}" for k, v in rejects.most_common()) or "none"
        failed = ", ".join(f"{k} {v}" for k, v in errors.most_common())
        return (
            "No pair was accepted. Rejected attempts by reason: "
            + reasons
            + (f"; model errors: {failed}" if failed else "")
            + ". Try a larger model, more or longer documents, or a higher attempt factor."
        )
    if state == "cancelled":
        return f"Cancelled; {kept} (run Generate again to continue)."
    return f"Done: {kept}."


class JobManager:
    """Holds the current job; at most one runs at a time.

    Args:
        record: The file where jobs write their final snapshot; before a job is started, the
            snapshot read from it is shown (the last generation of an earlier app).
    """

    def __init__(self, record: Path | None = None) -> None:
        self._lock = threading.Lock()
        self.job: GenerationJob | None = None
        self.record = record
        self._last = JobSnapshot()
        if record is not None and record.is_file():
            try:
                self._last = JobSnapshot(**json.loads(record.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("ignoring %s: %s", record, exc)

    def start(self, job: GenerationJob) -> GenerationJob:
        """Start ``job`` unless another one is running.

        Raises:
            ReviewError: A generation is already running (409).
        """
        with self._lock:
            if self.job is not None and self.job.running:
                raise ReviewError(
                    "a generation is already running: wait for it or cancel it", status=409
                )
            self.job = job
            job.start()
            return job

    def snapshot(self) -> JobSnapshot:
        """The current job's snapshot (the recorded last one, or ``idle``, before a job)."""
        with self._lock:
            job = self.job
        return job.snapshot() if job is not None else JobSnapshot(**self._last.to_dict())

    def cancel(self) -> bool:
        """Cancel the running job; False when none runs."""
        with self._lock:
            job = self.job
        if job is None or not job.running:
            return False
        job.cancel()
        return True

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel a running job and wait up to ``timeout`` seconds for it."""
        with self._lock:
            job = self.job
        if job is not None and job.running:
            job.cancel()
            job.join(timeout)
