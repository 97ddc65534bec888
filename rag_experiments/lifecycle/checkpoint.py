"""Per-query checkpoints: every answered question is appended to ``<job dir>/responses.jsonl``
as soon as it completes, so a run killed mid-way (``kill -9``, a crashed judge, a lost node)
is resumed without answering those questions again.

Layout of a job directory (Hydra's ``hydra.run.dir`` or a sweep job's subdir)::

    checkpoint.json    {"run_id": …, "dataset_digest": …}   written when the run opens
    responses.jsonl    {"id": <sample id>, "run_id": …, "response": <RagResponse fields>}
    usage.json         {"run_id": …, "counts": {"calls": …, "cache_hits": …, …}}
                       the generator's usage, written before each answer is stored

Only successful answers are stored: a question whose target failed (timeout, server error) is
asked again on resume. ``responses.jsonl`` is an :class:`~rag_experiments.common.appendlog.
AppendLog`: a line cut short by a kill is skipped on load and cut off before the next append
(so the first answer after a crash is kept); a sample id seen twice keeps its first answer, so
every sample appears exactly once.

A checkpoint belongs to one run: every answer carries the run id of ``checkpoint.json``, an
append by a run other than the one ``checkpoint.json`` names is refused
(:class:`CheckpointOwnerError`), and answers of another run found in the file are skipped on
load.

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

from rag_experiments.common.appendlog import AppendLog
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError
from rag_experiments.llm.factory import ModelSession
from rag_experiments.records import RagResponse, Sample

log = logging.getLogger(__name__)

RESPONSES_FILE = "responses.jsonl"
META_FILE = "checkpoint.json"
USAGE_FILE = "usage.json"
"""The generator's usage (:meth:`~rag_experiments.llm.usage.UsageMeter.counts`) written just
before each answer is stored; a resumed run adds it back (``generator.llm_calls`` … and
``generator.llm_cache_hit_rate`` cover the whole run)."""
USAGE_ROLE = "generator"


class CheckpointOwnerError(ConfigError):
    """An answer of one run was about to be appended to the checkpoint of another run (two
    runs share a job folder)."""


class ResponseCheckpoint:
    """Append-only JSONL store of answered questions, keyed by sample id (thread-safe).

    The store belongs to the run named in ``checkpoint.json`` once :meth:`write_meta` is
    called (or ``run_id`` is given): from then on every answer is stamped with that run id and
    an append is refused when ``checkpoint.json`` names another run.

    Args:
        job_dir: The folder holding ``responses.jsonl`` (created when missing).
        run_id: The run that appends here, when known before :meth:`write_meta`.
    """

    def __init__(self, job_dir: str | Path, run_id: str | None = None) -> None:
        self.job_dir = Path(job_dir)
        self.path = self.job_dir / RESPONSES_FILE
        self.run_id = run_id
        self._log = AppendLog(self.path)

    def load(self) -> dict[str, RagResponse]:
        """Read every stored answer of this checkpoint's run.

        Answers stamped with a run id other than the one in ``checkpoint.json`` are skipped
        with a warning; unstamped ones (older checkpoints) are kept. Unreadable lines (a line
        torn by a kill) are skipped with a warning.

        Returns:
            ``{sample id: response}`` (first answer per id); empty when there is no file.
        """
        done: dict[str, RagResponse] = {}
        owner = self._meta_run_id()
        fields = {f.name for f in dataclasses.fields(RagResponse)}
        foreign = 0
        for record in self._log.read():
            row = record.value
            try:
                sid = str(row["id"])
                resp = RagResponse(**{k: v for k, v in row["response"].items() if k in fields})
            except (KeyError, TypeError, AttributeError) as exc:
                log.warning(
                    "%s:%d: unreadable checkpoint line skipped (%s)", self.path, record.number, exc
                )
                continue
            if owner is not None and row.get("run_id") not in (None, owner):
                foreign += 1
                continue
            done.setdefault(sid, resp)
        if foreign:
            log.warning(
                "%s: %d answers of a run other than %s skipped (two runs shared this job folder)",
                self.path,
                foreign,
                owner,
            )
        return done

    def append(self, sample_id: str, response: RagResponse) -> None:
        """Store one answer and flush it to disk before returning.

        Args:
            sample_id: The sample's id.
            response: Its successful response.

        Raises:
            CheckpointOwnerError: ``checkpoint.json`` names a run other than this
                checkpoint's (another run took over the job folder).
        """
        if self.run_id is not None:
            owner = self._meta_run_id()
            if owner is not None and owner != self.run_id:
                raise CheckpointOwnerError(
                    f"{self.job_dir / META_FILE} belongs to run {owner}, not to run "
                    f"{self.run_id}: two runs are using job folder {self.job_dir}. Give each "
                    "run its own folder (hydra.run.dir / hydra.sweep.dir) and resume run "
                    f"{self.run_id} with resume=<run id>"
                )
        self._log.append(
            {"id": sample_id, "run_id": self.run_id, "response": dataclasses.asdict(response)}
        )

    def write_usage(self, counts: dict[str, int]) -> None:
        """Save the generator's usage counters (atomically) for a resume of this run."""
        path = self.job_dir / USAGE_FILE
        tmp = path.with_name(f"{USAGE_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({"run_id": self.run_id, "counts": counts}), encoding="utf-8")
        os.replace(tmp, path)

    def read_usage(self) -> dict[str, int]:
        """The usage counters an earlier attempt of this checkpoint's run saved; ``{}`` when
        none (no file, unreadable, or another run's)."""
        try:
            saved = json.loads((self.job_dir / USAGE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(saved, dict) or saved.get("run_id") != self._meta_run_id():
            return {}
        counts = saved.get("counts")
        return {str(k): int(v) for k, v in counts.items()} if isinstance(counts, dict) else {}

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
        log.warning(
            "%s held the answers of run %s: moved to %s (resume that run with "
            "resume=%s after moving them back)",
            self.path,
            old,
            target.name,
            old,
        )
        return target

    def write_meta(self, run_id: str, dataset_digest: str | None = None) -> None:
        """Write ``checkpoint.json`` (atomically): the MLflow run this checkpoint belongs to
        from now on (its answers are stamped with ``run_id``)."""
        self.job_dir.mkdir(parents=True, exist_ok=True)
        meta = {"run_id": run_id, "dataset_digest": dataset_digest}
        path = self.job_dir / META_FILE
        tmp = path.with_name(f"{META_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        self.run_id = run_id

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

    def _meta_run_id(self) -> str | None:
        """The run id in ``checkpoint.json``, or None when there is no readable one."""
        try:
            return str(self.read_meta()["run_id"])
        except ConfigError:
            return None


class CheckpointedTarget:
    """Wraps a target: answers already in the checkpoint are returned from it; every new
    successful answer is appended to it as soon as it completes, with the generator's usage
    so far (``usage.json``). Built for a resume, it first adds the usage the earlier attempt
    saved to the generator's meter.

    Args:
        inner: The system under test.
        checkpoint: Where answers go.
        usage: The job's models (the generator's meter is read and added to).

    Attributes:
        reused: Samples answered from the checkpoint in this run.
    """

    def __init__(self, inner: Any, checkpoint: ResponseCheckpoint, usage: ModelSession) -> None:
        self.inner = inner
        self.checkpoint = checkpoint
        self.usage = usage
        self.done = checkpoint.load()
        self.reused = 0
        self._usage_lock = threading.Lock()
        earlier = checkpoint.read_usage() if self.done else {}
        if earlier:
            usage.add_usage(USAGE_ROLE, earlier)

    @property
    def max_concurrency(self) -> int:
        """The inner target's."""
        return int(self.inner.max_concurrency)

    def prepare(self, dataset: EvalDataset) -> None:
        """Prepare the inner target; log how many answers the checkpoint already holds."""
        ids = {s.id for s in dataset.samples}
        n = len(ids & set(self.done))
        if n:
            log.info(
                "Resuming: %d of %d questions already answered in %s",
                n,
                len(ids),
                self.checkpoint.path,
            )
        self.inner.prepare(dataset)

    def answer(self, sample: Sample) -> RagResponse:
        """The checkpointed answer, or the inner target's (stored when it succeeded)."""
        if sample.id in self.done:
            self.reused += 1
            return self.done[sample.id]
        resp = self.inner.answer(sample)
        if resp.error is None:
            # usage first, then the answer: a kill between the two leaves usage.json counting
            # a call whose answer is asked again on resume (it was made: counted twice is
            # true), never a stored answer whose call is missing from the counts
            with self._usage_lock:  # counts read and written under one lock: never go back
                counts = self.usage.usage_counts(USAGE_ROLE)
                if counts is not None:
                    self.checkpoint.write_usage(counts)
            self.checkpoint.append(sample.id, resp)
        return resp

    def describe(self) -> dict[str, str]:
        """The inner target's identity."""
        return self.inner.describe()
