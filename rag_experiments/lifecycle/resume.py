"""``rag-exp run … resume=<run_id or job dir>``: continue an interrupted run in the same MLflow
run, answering only the questions its checkpoint does not hold.

Every job checkpoints into its Hydra job directory (see
:mod:`rag_experiments.lifecycle.checkpoint`) and tags its run ``job.dir``. A resume finds the
job directory from that tag (or is given it), reopens the run (``MlflowTracker.start_run(
run_id=…)``; the config must be the one the run was started with, else MLflow refuses the
params) and keeps appending to the same ``responses.jsonl``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.lifecycle.checkpoint import CheckpointedTarget, ResponseCheckpoint
from rag_experiments.llm.factory import ModelSession

JOB_DIR_TAG = "job.dir"
RESUMED_TAG = "resumed"
RESUMED_AFTER_ERROR_TAG = "resumed_after_error"
"""Tag of a resumed run that finished: the ``error`` tag its earlier attempt ended with."""
ERROR_TAG = "error"
ERROR_FILE = "error.txt"


@dataclass
class JobCheckpoint:
    """Where a job checkpoints, and which run it resumes.

    Attributes:
        checkpoint: The job's checkpoint, or None (no Hydra job directory: library use).
        resume_run_id: The MLflow run to reopen, or None for a new run.
        dataset_digest: The resumed run's ``dataset.digest`` tag (None when unknown).
        previous_error: The resumed run's ``error`` tag (its earlier attempt failed), or None.
        previous_params: The resumed run's logged params (``{key: value}``, MLflow's strings).
    """

    checkpoint: ResponseCheckpoint | None
    resume_run_id: str | None = None
    dataset_digest: str | None = None
    previous_error: str | None = None
    previous_params: dict[str, str] = field(default_factory=dict)

    def refuse_mismatch(self, params: Mapping[str, Any], dataset_digest: str | None) -> None:
        """Before the resumed run is reopened: refuse a resume whose config or dataset differ
        from the run's, so a refused resume leaves the run as it was (status, ``error`` tag);
        once reopened, a failure would end it FAILED. Nothing happens for a new run.

        Args:
            params: The job's nested config as logged (``resume`` left out).
            dataset_digest: Digest of the dataset loaded for this job (None: not loaded yet).

        Raises:
            ConfigError: A param the run logged has another value now (MLflow would refuse
                it), or the dataset digest differs; the message names up to 3 keys and the fix.
        """
        if not self.resume_run_id:
            return
        if dataset_digest is not None:
            self.check_dataset(dataset_digest)
        from rag_experiments.tracking.params import flatten_params

        now = flatten_params(params)
        changed = [
            f"{key} was {old!r}, now {now[key]!r}"
            for key, old in self.previous_params.items()
            if key in now and now[key] != old
        ]
        if changed:
            more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
            raise ConfigError(
                f"cannot resume run {self.resume_run_id}: its config differs ("
                + "; ".join(changed[:3])
                + f"{more}). Resume with the overrides the run started with (its params in "
                "MLflow), or start a new run"
            )

    def check_dataset(self, dataset_digest: str) -> None:
        """Refuse a resume on another dataset than the run's.

        Args:
            dataset_digest: Digest of the dataset loaded for this job.

        Raises:
            ConfigError: The resumed run was made on another dataset.
        """
        if self.resume_run_id and self.dataset_digest and self.dataset_digest != dataset_digest:
            raise ConfigError(
                f"cannot resume run {self.resume_run_id}: it evaluated dataset digest "
                f"{self.dataset_digest[:12]}…, the dataset loaded now has "
                f"{dataset_digest[:12]}…. "
                "Resume with the dataset the run started with, or start a new run"
            )

    def attach(self, tracker: Any) -> None:
        """Inside the open run: write ``checkpoint.json`` and tag ``job.dir`` (and
        ``resumed``). A resumed run keeps its earlier attempt's ``error`` tag (why it stopped:
        ``Interrupted: stopped by SIGTERM …``) until :meth:`finish`."""
        if self.checkpoint is None:
            return
        if not self.resume_run_id:
            self.checkpoint.set_aside()  # a new run never reuses another run's answers
        self.checkpoint.write_meta(tracker.run_id, self.dataset_digest)
        tags = {JOB_DIR_TAG: str(self.checkpoint.job_dir.resolve())}
        if self.resume_run_id:
            tags[RESUMED_TAG] = "true"
        tracker.set_tags(tags)

    def finish(self, tracker: Any) -> None:
        """Inside the open run, once its work is done: a resumed run whose earlier attempt
        failed loses that attempt's failure marks (tag ``error``, artifact ``error.txt``), so
        a filter on ``tags.error`` no longer counts it, and keeps the history in tag
        ``resumed_after_error`` (the old ``error`` value). Nothing happens for a new run."""
        if not (self.resume_run_id and self.previous_error):
            return
        tracker.set_tags({RESUMED_AFTER_ERROR_TAG: self.previous_error})
        tracker.delete_tag(ERROR_TAG)
        tracker.delete_artifact(ERROR_FILE)

    def answers_all(self, sample_ids: Iterable[str]) -> bool:
        """Whether this job resumes a run whose checkpoint holds an answer for every one of
        ``sample_ids`` (the target will not be asked, so its reachability need not be checked).
        """
        if self.checkpoint is None or self.resume_run_id is None:
            return False
        return set(sample_ids) <= set(self.checkpoint.load())

    def wrap(self, target: Any, dataset_digest: str, usage: ModelSession) -> Any:
        """The target to evaluate: checkpointed when there is a job directory.

        Args:
            target: The built system under test.
            dataset_digest: Digest of the dataset loaded for this job.
            usage: The job's models, whose generator usage the checkpoint saves (and adds
                the earlier attempt's to, on a resume).

        Returns:
            A :class:`CheckpointedTarget`, or ``target`` itself without a checkpoint.

        Raises:
            ConfigError: The resumed run was made on another dataset.
        """
        if self.checkpoint is None:
            return target
        self.check_dataset(dataset_digest)
        return CheckpointedTarget(target, self.checkpoint, usage)


def job_checkpoint(
    resume: str | None, tracking_uri: str, job_dir: str | Path | None
) -> JobCheckpoint:
    """Decide where the job checkpoints and whether it resumes a run.

    Args:
        resume: The config's ``resume``: None (or empty), a run id or a job directory.
        tracking_uri: The resolved tracking URI (``MlflowTracker.uri``).
        job_dir: The job's own directory (Hydra's output folder), where a new run
            checkpoints; None outside a Hydra job (no checkpoint).

    Returns:
        The job's :class:`JobCheckpoint`.

    Raises:
        ConfigError: ``resume`` names neither a job directory nor a run with a ``job.dir``
            tag, or the run already FINISHED.
    """
    if not resume:
        return JobCheckpoint(ResponseCheckpoint(job_dir) if job_dir is not None else None)
    value = str(resume)
    if Path(value).is_dir():
        run_id = str(ResponseCheckpoint(value).read_meta()["run_id"])
        job_dir = Path(value)
        run, tags = _get_run(tracking_uri, run_id)
    else:
        run_id = value
        run, tags = _get_run(tracking_uri, run_id)
        tagged = tags.get(JOB_DIR_TAG)
        if not tagged:
            raise ConfigError(
                f"run {run_id} has no {JOB_DIR_TAG!r} tag (it was not started by `rag-exp run`, "
                "or before checkpoints existed): pass resume=<its job folder> instead"
            )
        job_dir = Path(tagged)
    if run.info.status == "FINISHED":
        raise ConfigError(
            f"run {run_id} already FINISHED: there is nothing to resume. Use `rag-exp rerun "
            f"{run_id}` to repeat it in a new run"
        )
    return JobCheckpoint(
        ResponseCheckpoint(job_dir),
        run_id,
        tags.get("dataset.digest"),
        tags.get(ERROR_TAG),
        dict(run.data.params),
    )


def _get_run(tracking_uri: str, run_id: str) -> tuple[Any, dict[str, str]]:
    """MLflow's run ``run_id`` and every tag of ours on it (``job.dir`` is kept in the run's
    ``tags.json``; a run logged before has it as an MLflow tag)."""
    from rag_experiments.tracking.store import all_tags, get_run, open_store

    client = open_store(tracking_uri)
    run = get_run(
        client, run_id, where="tracking.uri (resume=<id> looks in the configured tracking store)"
    )
    return run, all_tags(client, run)
