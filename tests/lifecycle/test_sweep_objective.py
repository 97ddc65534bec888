"""Which swept keys can move a sweep's objective: doc-level retrieval metrics are measured at a
fixed depth whatever ``retriever.top_k`` is (top_k only sets the generator's contexts), the
chunk-level ones see the top_k contexts; a sweep warns at its start about a key its objective
cannot depend on."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.index.chroma import ChromaIndex
from rag_experiments.lifecycle.callbacks import ObjectiveCheckCallback
from rag_experiments.lifecycle.objective import (
    objective_value,
    unmoved_keys,
    unmoved_warnings,
)
from rag_experiments.metrics.aggregate import aggregate, to_metrics
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import Chunk, RagResponse, Sample
from rag_experiments.retrieval.retriever import Retriever

CHUNKS = [
    Chunk(id="it#0", doc_id="it", text="reset your password in the portal", position=0),
    Chunk(id="it#1", doc_id="it", text="portal support", position=1),
    Chunk(id="fire#0", doc_id="fire", text="fire drills twice a year", position=0),
    Chunk(id="hr#0", doc_id="hr", text="holiday requests go to the line manager", position=0),
]


def _objectives(tmp_path: Path, top_k: int) -> dict[str, float]:
    """Retrieve with the real retriever (hash embedder, Chroma) at ``top_k`` and return the
    objective ``nDCG@10`` and ``chunk.nDCG@10`` of one question."""
    emb = HashEmbedder(dim=1024)
    index = ChromaIndex(str(tmp_path / "chroma"))
    retriever = Retriever(top_k=top_k, depth=10)
    retriever.bind(index, index.ensure(CHUNKS, emb, "objective-toy"), emb)
    sample = Sample(
        id="q1",
        user_input="password reset portal",
        reference_doc_ids=["it"],
        reference_contexts=["portal support"],
    )
    hits = retriever.retrieve(sample.user_input)
    assert hits.ranked_chunk_ids[:2] == ["it#0", "it#1"]  # cosine 3/sqrt(18) > 1/sqrt(6)
    response = RagResponse(
        retrieved_contexts=hits.contexts,
        retrieved_ids=hits.chunk_ids,
        retrieved_doc_ids=hits.doc_ids,
    )
    metrics = RetrievalMetrics(cutoffs=[10], measures=["nDCG"])
    rows = metrics.evaluate([sample], [response])
    summary = to_metrics(aggregate([s.name for s in metrics.specs()], rows, [None]))
    return {e: objective_value(e, summary) for e in ("nDCG@10", "chunk.nDCG@10")}


@pytest.mark.slow  # Chroma
def test_chunk_level_objective_moves_with_top_k_doc_level_does_not(tmp_path: Path) -> None:
    one = _objectives(tmp_path / "k1", top_k=1)
    two = _objectives(tmp_path / "k2", top_k=2)
    # doc level: the relevant doc "it" is first in the 10-deep ranking at both top_k -> 1
    assert one["nDCG@10"] == two["nDCG@10"] == pytest.approx(1.0)
    # chunk level: the reference "portal support" is the 2nd chunk; top_k=1 never shows it
    # ("portal" is 1 of its 2 words < 0.7) -> 0; top_k=2 finds it at rank 2 -> 1/log2(3)
    assert one["chunk.nDCG@10"] == pytest.approx(0.0)
    assert two["chunk.nDCG@10"] == pytest.approx(1 / math.log2(3))


@pytest.mark.parametrize(
    ("expr", "swept", "unmoved"),
    [
        ("nDCG@10", ["retriever.top_k", "chunker.size"], ["retriever.top_k"]),
        ("0.5*nDCG@10+0.5*by_type/procedural/R@5", ["retriever.top_k"], ["retriever.top_k"]),
        ("chunk.nDCG@10", ["retriever.top_k"], []),
        ("0.7*nDCG@10+0.3*faithfulness", ["retriever.top_k"], []),
        ("chunk.R@5", ["llm", "llm.temperature", "retriever.top_k"], ["llm", "llm.temperature"]),
        ("faithfulness", ["llm.temperature"], []),
        (None, ["retriever.top_k"], []),
    ],
)
def test_unmoved_keys(expr: str | None, swept: list[str], unmoved: list[str]) -> None:
    assert unmoved_keys(expr, swept) == unmoved


def test_sweep_start_warns_naming_the_key_and_the_objective(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = OmegaConf.create(
        {
            "objective": "nDCG@10",
            "hydra": {
                "overrides": {"task": ["retriever.top_k=3,5", "metrics=retrieval"]},
                "sweeper": {"params": {"chunker.size": "range(256, 1152, step=128)"}},
            },
        }
    )
    with caplog.at_level(logging.WARNING, logger="rag_experiments.lifecycle.callbacks"):
        ObjectiveCheckCallback().on_multirun_start(config)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == unmoved_warnings("nDCG@10", ["retriever.top_k"])
    assert len(lines) == 1
    assert lines[0].startswith("objective=nDCG@10 cannot depend on swept key retriever.top_k")
