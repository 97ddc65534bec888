"""``rag-exp rerun``: the rerun repeats the logged config in a new run tagged ``rerun_of``, every
per-query value is identical, the generator is answered from the response cache (0 model
calls), and a changed dataset is refused before any run opens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
from omegaconf import DictConfig

from rag_experiments.commands.rerun import RERUN_TAG, rerun
from rag_experiments.errors import ConfigError, DatasetError
from rag_experiments.fakes.rerank_server import FakeRerankServer
from rag_experiments.job import run_job
from rag_experiments.llm.fake import FakeChat
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.retrieval.rerank import CHECK_TEXT

SAMPLE = PROJECT_ROOT / "datasets" / "sample"

pytestmark = pytest.mark.slow  # every test runs whole jobs twice


class CacheableFakeChat(FakeChat):
    """The fake model, but cached like a real one (FakeChat itself opts out of the cache)."""

    cacheable = True
    model_calls = 0

    def complete(self, messages, schema=None, **options):  # type: ignore[no-untyped-def]
        CacheableFakeChat.model_calls += 1
        return super().complete(messages, schema, **options)


def _first_run(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, *extra: str
) -> tuple[str, str]:
    data = tmp_path / "small.jsonl"
    data.write_text("\n".join((SAMPLE / "eval.jsonl").read_text().splitlines()[:6]) + "\n")
    cfg = compose_cfg(
        "dataset=jsonl", f"dataset.path={data}", f"dataset.corpus={SAMPLE / 'docs'}",
        "dataset.name=small", "embedder=hash", "llm=fake",
        f"llm._target_={__name__}.CacheableFakeChat", "metrics=retrieval", "metrics.generate=true",
        *extra,
    )  # fmt: skip
    run_job(cfg)
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    (run,) = _runs(uri)
    return run.info.run_id, uri


def _runs(uri: str) -> list[mlflow.entities.Run]:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    return list(client.search_runs([exp.experiment_id]))


def test_rerun_is_identical_with_no_model_call(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id, uri = _first_run(compose_cfg, tmp_path)
    first = mlflow.MlflowClient(uri).get_run(run_id)
    assert first.data.metrics["generator.llm_calls"] == 6
    assert first.data.metrics["generator.llm_cache_hits"] == 0
    CacheableFakeChat.model_calls = 0

    report = rerun(run_id, uri)

    assert CacheableFakeChat.model_calls == 0  # every answer came from the response cache
    assert report.model_calls == {"generator": 0.0}
    new = mlflow.MlflowClient(uri).get_run(report.new_run_id)
    assert new.info.run_id != run_id and new.info.status == "FINISHED"
    assert new.data.tags[RERUN_TAG] == run_id
    assert new.data.metrics["generator.llm_cache_hits"] == 6
    assert report.identical, report.format()
    assert report.changed_metrics == {} and report.changed_cells == []
    assert new.data.metrics["nDCG_at_10"] == first.data.metrics["nDCG_at_10"]
    assert "identical" in report.format()
    capsys.readouterr()


def test_rerun_keeps_the_original_name_unless_given_one(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    # the default name is made at run time (it has grown retriever/reranker suffixes); a rerun
    # takes the name its original got, so old runs' reruns are named as they were
    run_id, uri = _first_run(compose_cfg, tmp_path, "retriever=bm25")
    client = mlflow.MlflowClient(uri)
    name = client.get_run(run_id).info.run_name
    assert name == "small-semantic-retrieval-bm25"
    client.set_tag(run_id, "mlflow.runName", "named-by-an-older-version")
    same = client.get_run(rerun(run_id, uri).new_run_id)
    assert same.info.run_name == "named-by-an-older-version"
    renamed = client.get_run(rerun(run_id, uri, ["run_name=mine"]).new_run_id)
    assert renamed.info.run_name == "mine"


def test_rerun_of_a_reranked_run_sends_no_rerank_request(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    """Rerank answers live in the LLM cache like chat answers: the rerun sends the rerank
    server nothing but its preflight check, counts the reranker's calls as cache hits, and
    every per-query value (the reranked contexts among them) is identical."""
    with FakeRerankServer() as server:
        run_id, uri = _first_run(
            compose_cfg, tmp_path, "reranker=http", f"reranker.url={server.url}"
        )
        ranked = [b for b in server.bodies if b["query"] != CHECK_TEXT]
        assert len(ranked) == 6  # one rerank request per question (6 questions)
        first = mlflow.MlflowClient(uri).get_run(run_id)
        assert first.data.metrics["reranker.llm_calls"] == 6
        assert first.data.metrics["reranker.llm_cache_hits"] == 0
        before = len(server.bodies)

        report = rerun(run_id, uri)

        after = server.bodies[before:]
    assert [b["query"] for b in after] == [CHECK_TEXT]  # the preflight check only
    assert report.model_calls == {"generator": 0.0, "reranker": 0.0}
    assert report.identical, report.format()
    new = mlflow.MlflowClient(uri).get_run(report.new_run_id)
    assert new.data.metrics["reranker.llm_cache_hits"] == 6


def test_rerun_refuses_a_changed_dataset(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    run_id, uri = _first_run(compose_cfg, tmp_path)
    data = tmp_path / "small.jsonl"
    data.write_text(data.read_text().replace("?", " ?", 1))  # one question edited
    with pytest.raises(DatasetError, match="digest"):
        rerun(run_id, uri)
    assert len(_runs(uri)) == 1  # no run was opened


def test_rerun_of_a_subset_run_checks_the_subset_it_evaluated(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    """The run's dataset digest is that of the ``max_samples`` subset it evaluated; the rerun
    draws the same subset and must not mistake it for a changed dataset."""
    run_id, uri = _first_run(compose_cfg, tmp_path, "max_samples=4")
    first = mlflow.MlflowClient(uri).get_run(run_id)
    assert first.data.metrics["n_samples"] == 4
    report = rerun(run_id, uri)
    assert report.identical, report.format()
    data = tmp_path / "small.jsonl"
    data.write_text(data.read_text().replace("?", " ?", 1))  # the check still holds
    with pytest.raises(DatasetError, match="digest"):
        rerun(run_id, uri)


@pytest.mark.parametrize("command", ["rerun", "merge"])
def test_an_override_that_is_not_key_value_is_refused_before_the_store_is_read(command) -> None:
    from rag_experiments.commands.merge import merge_command
    from rag_experiments.commands.rerun import rerun_command

    run = {"rerun": rerun_command, "merge": merge_command}[command]
    with pytest.raises(ConfigError, match=r"overrides must be key=value, got \['judge'\]"):
        run(["--tracking-uri", "sqlite:////nonexistent/x.db", "someid", "llm.model=m", "judge"])


def test_rerun_of_a_gated_run_reports_identity_without_its_gate(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag_experiments.cli import main
    from rag_experiments.errors import GateFailed

    # a floor this run does not reach (a perfect MRR@10; a bound beyond the metric's range would
    # be refused before the run): the original run's gate fails (exit 1) after it is logged
    data = tmp_path / "small.jsonl"
    data.write_text("\n".join((SAMPLE / "eval.jsonl").read_text().splitlines()[:6]) + "\n")
    cfg = compose_cfg(
        "dataset=jsonl", f"dataset.path={data}", f"dataset.corpus={SAMPLE / 'docs'}",
        "dataset.name=small", "embedder=hash", "llm=fake", "metrics=retrieval", "gate=default",
    )  # fmt: skip
    cfg.gate.rules = {"MRR@10": {"min": 1.0}}
    with pytest.raises(GateFailed) as failed:
        run_job(cfg)
    assert failed.value.exit_code == 1
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    (run,) = _runs(uri)
    assert run.data.metrics["MRR_at_10"] < 1.0  # the hash embedder's ranking is not perfect
    assert run.data.tags["gate.result"] == "fail"
    capsys.readouterr()

    assert main(["rerun", run.info.run_id, "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    assert "identical" in out  # the identity report is printed; no gate line
    assert "gate FAIL" not in out
    (new,) = [r for r in _runs(uri) if r.data.tags.get(RERUN_TAG) == run.info.run_id]
    assert "gate.result" not in new.data.tags
