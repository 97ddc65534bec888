"""Per-query checkpoints: every answered question is appended to ``<job dir>/responses.jsonl``
as soon as it completes, so a run killed mid-way (``kill -9``, a crashed judge, a lost node)
is resumed without answering those questions again.

Layout of a job directory (Hydra's ``hydra.run.dir`` or a sweep job's subdir)::

    checkpoint.json    {"run_id": …, "dataset_digest": …}   written when the run opens
    responses.jsonl    {"id": <sample id>, "response": <RagResponse fields>}  one per answer

Only successful answers are stored: a question whose target failed (timeout, server error) is
asked again on resume. A line cut short by a kill is ignored; a sample id seen twice keeps
its first answer, so every sample appears exactly once.

Metric values are not checkpointed: they are recomputed over all rows after the answers,
and an LLM judge's calls are answered from the response cache (``paths.llm_cache``) when a
resumed run asks them again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError
from rag_experiments.records import RagResponse, Sample

log = logging.getLogger(__name__)

RESPONSES_FILE = "responses.jsonl"
META_FILE = "checkpoint.json"


class ResponseCheckpoint:
    """Append-only JSONL store of answered questions, keyed by sample id (thread-safe).

    Args:
        job_dir: The folder holding ``responses.jsonl`` (created when missing).
    """

    def __init__(self, job_dir: str | Path) -> None:
        self.job_dir = Path(job_dir)
        self.path = self.job_dir / RESPONSES_FILE
        self._lock = threading.Lock()

    def load(self) -> dict[str, RagResponse]:
        """Read every stored answer.

        Returns:
            ``{sample id: response}`` (first answer per id); empty when there is no file.
        """
        done: dict[str, RagResponse] = {}
        if not self.path.exists():
            return done
        fields = {f.name for f in dataclasses.fields(RagResponse)}
        lines = self.path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                sid = str(row["id"])
                resp = RagResponse(**{k: v for k, v in row["response"].items() if k in fields})
            except (ValueError, KeyError, TypeError) as exc:  # a line cut short by a kill
                log.warning("%s:%d: unreadable checkpoint line skipped (%s)", self.path, n, exc)
                continue
            done.setdefault(sid, resp)
        return done

    def append(self, sample_id: str, response: RagResponse) -> None:
        """Store one answer and flush it to disk before returning.

        Args:
            sample_id: The sample's id.
            response: Its successful response.
        """
        line = json.dumps({"id": sample_id, "response": dataclasses.asdict(response)},
                          ensure_ascii=False, default=str)
        with self._lock:
            self.job_dir.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    def set_aside(self) -> Path | None:
        """Rename the answers of an earlier run in this folder (``hydra.run.dir`` reused) to
        ``responses.<its run id>.jsonl``, so a new run starts empty.

        Returns:
            The new name, or None when there was nothing to set aside.
        """
        if not self.path.exists():
            return None
        try:
            old = str(self.read_meta()["run_id"])
        except ConfigError:
            old = "unknown"
        target = self.path.with_name(f"responses.{old}.jsonl")
        self.path.replace(target)
        log.warning("%s held the answers of run %s: moved to %s (resume that run with "
                    "resume=%s after moving them back)", self.path, old, target.name, old)
        return target

    def write_meta(self, run_id: str, dataset_digest: str | None = None) -> None:
        """Write ``checkpoint.json`` (the MLflow run this checkpoint belongs to)."""
        self.job_dir.mkdir(parents=True, exist_ok=True)
        meta = {"run_id": run_id, "dataset_digest": dataset_digest}
        (self.job_dir / META_FILE).write_text(json.dumps(meta) + "\n", encoding="utf-8")

    def read_meta(self) -> dict[str, Any]:
        """Read ``checkpoint.json``.

        Returns:
            ``{"run_id": …, "dataset_digest": …}``.

        Raises:
            ConfigError: The file is missing or not JSON.
        """
        path = self.job_dir / META_FILE
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{path} is missing or unreadable ({exc}): resume=<dir> must be the job folder "
                "of an interrupted run (it holds checkpoint.json and responses.jsonl)"
            ) from exc
        if not isinstance(meta, dict) or not meta.get("run_id"):
            raise ConfigError(f"{path} holds no run_id; pass resume=<run_id> instead")
        return meta


class CheckpointedTarget:
    """Wraps a target: answers already in the checkpoint are returned from it; every new
    successful answer is appended to it as soon as it completes.

    Args:
        inner: The system under test.
        checkpoint: Where answers go.

    Attributes:
        reused: Samples answered from the checkpoint in this run.
    """

    def __init__(self, inner: Any, checkpoint: ResponseCheckpoint) -> None:
        self.inner = inner
        self.checkpoint = checkpoint
        self.done = checkpoint.load()
        self.reused = 0

    @property
    def max_concurrency(self) -> int:
        """The inner target's."""
        return int(self.inner.max_concurrency)

    def prepare(self, dataset: EvalDataset) -> None:
        """Prepare the inner target; log how many answers the checkpoint already holds."""
        ids = {s.id for s in dataset.samples}
        n = len(ids & set(self.done))
        if n:
            log.info("Resuming: %d of %d questions already answered in %s", n, len(ids),
                     self.checkpoint.path)
        self.inner.prepare(dataset)

    def answer(self, sample: Sample) -> RagResponse:
        """The checkpointed answer, or the inner target's (stored when it succeeded)."""
        if sample.id in self.done:
            self.reused += 1
            return self.done[sample.id]
        resp = self.inner.answer(sample)
        if resp.error is None:
            self.checkpoint.append(sample.id, resp)
        return resp

    def describe(self) -> dict[str, str]:
        """The inner target's identity."""
        return self.inner.describe()
