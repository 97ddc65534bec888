"""What a run prints for a new user: no "judged" for a run that judged nothing, and no INFO
line per HTTP request (httpx's logger at WARNING in the run's logging config)."""

from __future__ import annotations

import logging

import pytest
from hydra import compose

from rag_experiments.data.base import EvalDataset
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import RagResponse, Sample
from rag_experiments.runner import evaluate


class _Retrieval:
    """A retrieval-only target: the same two documents for every question."""

    max_concurrency = 1

    def prepare(self, dataset: EvalDataset) -> None:
        pass

    def answer(self, sample: Sample) -> RagResponse:
        return RagResponse(retrieved_contexts=["a", "b"], retrieved_doc_ids=["d1", "d2"])

    def describe(self) -> dict[str, str]:
        return {"target": "retrieval"}


def test_a_run_without_judged_metrics_does_not_say_judged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    samples = [Sample(id=f"q{i}", user_input=f"q{i}?", reference_doc_ids=["d2"]) for i in (1, 2)]
    caplog.set_level(logging.INFO, logger="rag_experiments.runner")
    result = evaluate(
        EvalDataset("toy", samples, []),
        _Retrieval(),
        [RetrievalMetrics(cutoffs=[1, 2], measures=["MRR"], chunk_level=False)],
        progress=False,
    )
    assert [row["MRR@2"].value for row in result.values] == [0.5, 0.5]  # d2 at rank 2
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("Evaluated 2 questions in ") for m in messages), messages
    assert not any("judged" in m for m in messages), messages


@pytest.mark.parametrize("primary", ["config", "generate"])
def test_httpx_logs_warnings_only(compose_cfg, primary: str) -> None:
    if primary == "generate":
        from rag_experiments.generate.config import register_generate_config

        register_generate_config()
    cfg = compose(config_name=primary, return_hydra_config=True)
    assert cfg.hydra.job_logging.loggers.httpx.level == "WARNING"
    assert cfg.hydra.job_logging.root.level == "INFO"  # the rest of the run still logs INFO


@pytest.mark.slow
def test_run_help_starts_with_our_usage() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "rag_experiments", "run", "--help"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "usage: rag-exp run [-m] [--cfg job] [group=option ...] [key=value ...]"
    assert "chunker: fixed, none, semantic" in lines
    assert "powered by Hydra" not in done.stdout
    assert "== Config ==" not in done.stdout  # the whole config is `--cfg job`, not the help
    assert lines[-1] == "Hydra's own flags (--multirun, --cfg, --info …): rag-exp run --hydra-help"
