"""Run names follow the retrieval: the default name and a preset's ``${rx.run_name:…}`` add the
retriever (unless it is the default dense one) and the reranker (unless none), so runs and a
sweep's children that differ only in them are told apart; the default keeps the old name."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from omegaconf import DictConfig

from rag_experiments.config.resolvers import retrieval_suffix
from rag_experiments.job import _default_run_name

DENSE = {"_target_": "rag_experiments.retrieval.retriever.Retriever", "top_k": 5}
BM25 = {"_target_": "rag_experiments.retrieval.bm25.Bm25Retriever"}
HTTP = {"_target_": "rag_experiments.retrieval.rerank.HttpReranker", "candidates": 20}


@pytest.mark.parametrize(
    ("retriever", "reranker", "suffix"),
    [
        (DENSE, None, ""),  # the default: the names of earlier runs
        (None, None, ""),
        (BM25, None, "-bm25"),
        (BM25, HTTP, "-bm25-rerank-http"),
        (DENSE, HTTP, "-rerank-http"),
        ({"_target_": "my_pkg.SpladeIndex"}, None, "-spladeindex"),  # a user's class
    ],
)
def test_retrieval_suffix(retriever, reranker, suffix: str) -> None:
    assert retrieval_suffix(retriever, reranker) == suffix


@pytest.mark.slow  # composes the config seven times
def test_default_and_preset_names_carry_a_non_default_retrieval(
    compose_cfg: Callable[..., DictConfig],
) -> None:
    metrics = "metrics=retrieval"
    assert _default_run_name(compose_cfg(metrics), "sample") == "sample-semantic-retrieval"
    named = _default_run_name(compose_cfg(metrics, "retriever=hybrid", "reranker=fake"), "sample")
    assert named == "sample-semantic-retrieval-hybrid-rerank-fake"
    names = {
        choice: compose_cfg("experiment=scifact", *choice).run_name
        for choice in [(), ("retriever=dense",), ("retriever=bm25",), ("reranker=http",)]
    }
    assert names == {
        (): "scifact-minilm",  # as before
        ("retriever=dense",): "scifact-minilm",
        ("retriever=bm25",): "scifact-minilm-bm25",
        ("reranker=http",): "scifact-minilm-rerank-http",
    }
    mine = compose_cfg("experiment=scifact", "retriever=bm25", "run_name=mine")
    assert mine.run_name == "mine"  # a name given on the command line is kept as given


@pytest.mark.parametrize(
    ("chunker", "name"),
    [
        ("rag_experiments.chunking.semantic.SemanticChunker", "sample-semantic-custom"),
        ("my_pkg.MyChunker", "sample-MyChunker-custom"),  # a user's class: no bundled option
    ],
)
def test_the_default_name_says_the_chunker_option_as_typed(
    chunker: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41 (4): the default name was ``sample-SemanticChunker-custom`` (the class). Outside
    a Hydra job (an earlier test in this process may have left Hydra's config set)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: False))
    cfg = OmegaConf.create({"chunker": {"_target_": chunker}, "metrics": {"name": "custom"}})
    assert _default_run_name(cfg, "sample") == name
