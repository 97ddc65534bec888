"""Issue 41 (3): a run's MLflow page showed 24 tags of ours (45 on ``make run``) before its
metrics. Only what people filter and search on stays an MLflow tag
(:data:`~rag_experiments.tracking.record.VISIBLE_TAGS`); the others go into ``tags.json``, which
every reader reads with the tags (:meth:`RunStore.all_tags`), and a run logged before the split
(every tag an MLflow tag, no ``tags.json``) reads the same."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import DictConfig

from rag_experiments.job import run_job
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.record import ARTIFACTS, VISIBLE_TAGS
from rag_experiments.tracking.store import RunStore, all_tags

TARGET_TAGS = {  # a baseline target's describe() on the fake models, as the runner logs it
    "target": "baseline",
    "chunker": "semantic-size800-min200",
    "retriever": "dense",
    "embedder": "hash-256",
    "index.collection": "hash-256-semantic",
    "prompt.answer": "answer-v1",
    "llm.provider": "fake",
    "llm.model": "fake-chat",
    "llm.digest": "67cdde16c27cdf2a",
}


def _own(tags: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in tags.items() if not k.startswith("mlflow.")}


def test_the_tracker_keeps_tags_outside_the_visible_set_in_tags_json(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    tracker = MlflowTracker(uri, traces=False)
    with tracker.start_run(params={}, config_yaml="", tags={"metrics.backend": "custom"}) as rid:
        tracker.set_tags(TARGET_TAGS)
        tracker.set_tags({"job.dir": "/jobs/1", "judge.provider": "fake"})
    client = MlflowClient(uri)
    run = client.get_run(rid)
    shown = {"metrics.backend", "target", "chunker", "retriever", "embedder", "prompt.answer"}
    assert set(_own(run.data.tags)) == shown | {"llm.model"}
    kept = json.loads(Path(client.download_artifacts(rid, ARTIFACTS.tags)).read_text())
    assert kept == {
        "index.collection": "hash-256-semantic",
        "job.dir": "/jobs/1",
        "judge.provider": "fake",
        "llm.digest": "67cdde16c27cdf2a",
        "llm.provider": "fake",
    }
    store = RunStore(uri)
    assert _own(store.all_tags(store.get_run(rid))) == {
        "metrics.backend": "custom",
        **TARGET_TAGS,
        "job.dir": "/jobs/1",
        "judge.provider": "fake",
    }

    # resumed: the earlier kept tags stay; a deleted kept tag leaves tags.json
    again = MlflowTracker(uri, traces=False)
    with again.start_run(params={}, config_yaml="", tags={}, run_id=rid):
        again.set_tags({"resumed_after_error": "Interrupted", "generator.model": "fake-chat"})
        again.delete_tag("job.dir")
    tags = all_tags(client, client.get_run(rid))
    assert tags["judge.provider"] == "fake" and tags["generator.model"] == "fake-chat"
    assert "job.dir" not in tags
    assert client.get_run(rid).data.tags["resumed_after_error"] == "Interrupted"


def test_a_run_logged_before_the_split_is_read_from_its_tags(tmp_path: Path) -> None:
    """No ``tags.json``: every tag is an MLflow tag, read as it is (resume=, gate, rerun)."""
    from rag_experiments.analysis.gate import store_io
    from rag_experiments.lifecycle.resume import job_checkpoint

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("old")
    old = {"job.dir": str(tmp_path / "job"), "dataset.questions_digest": "q1", **TARGET_TAGS}
    run = client.create_run(experiment, tags=old)
    store = RunStore(uri)
    assert _own(store.all_tags(store.get_run(run.info.run_id))) == old
    assert store_io.read_run(store, run.info.run_id).tags["dataset.questions_digest"] == "q1"
    job = job_checkpoint(run.info.run_id, uri, None)
    assert job.checkpoint is not None and job.checkpoint.job_dir == tmp_path / "job"


@pytest.mark.slow
def test_a_fake_run_shows_at_most_15_tags_of_ours_and_is_resumable_by_id(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    """The run of ``rag-exp run judge=fake llm=fake embedder=hash`` showed 24 tags of ours;
    now 11, and what was hidden (the models' providers and digests, the questions' digest) is
    read back (by the gate: ``dataset.questions_digest``)."""
    from rag_experiments.analysis.gate import store_io

    run_job(compose_cfg("judge=fake", "llm=fake", "embedder=hash", "max_samples=2"))
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    (run,) = client.search_runs([exp.experiment_id])
    own = _own(run.data.tags)
    assert len(own) <= 15 and set(own) <= VISIBLE_TAGS
    assert {"dataset.name", "target", "chunker", "llm.model", "judge.model"} <= set(own)
    tags = all_tags(client, run)
    for key in ("judge.provider", "judge.digest", "generator.cache_mode", "dataset.source"):
        assert key in tags and key not in own
    store = RunStore(uri)
    assert store_io.read_run(store, run.info.run_id).tags["dataset.questions_digest"]
    # resume=<id> of a run whose job.dir is in tags.json: tests/lifecycle/test_lifecycle_resume.py
