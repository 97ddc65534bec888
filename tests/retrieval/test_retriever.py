"""Retriever: top_k contexts for the generator, a deeper chunk ranking and its doc ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.errors import ConfigError, VectorIndexError
from rag_experiments.index.chroma import ChromaIndex
from rag_experiments.records import Chunk
from rag_experiments.retrieval.retriever import Retriever

# Five documents, two or three chunks each: chunk rankings repeat documents.
DOCS = {
    "it": ["reset your password in the portal", "password expiry is ninety days", "portal support"],
    "hr": ["holiday requests go to the line manager", "sick leave password of the day"],
    "fire": ["fire drills twice a year", "fire wardens check every floor"],
    "travel": ["travel booking needs manager approval", "expenses within thirty days"],
    "visit": ["visitors sign in at reception", "visitor badge and password for wifi"],
}


@pytest.fixture()
def bound(tmp_path: Path) -> tuple[Retriever, list[Chunk], HashEmbedder]:
    chunks = [
        Chunk(id=f"{d}#{i}", doc_id=d, text=t, position=i)
        for d, texts in DOCS.items()
        for i, t in enumerate(texts)
    ]
    emb = HashEmbedder(dim=1024)
    index = ChromaIndex(str(tmp_path / "chroma"))
    name = index.ensure(chunks, emb, "retriever-toy")
    retriever = Retriever(top_k=2, depth=6)
    retriever.bind(index, name, emb)
    return retriever, chunks, emb


def reference_ranking(emb: HashEmbedder, chunks: list[Chunk], query: str) -> list[Chunk]:
    m = emb.embed_documents([c.text for c in chunks]).astype(np.float64)
    sims = m @ emb.embed_query(query).astype(np.float64)
    return [chunks[i] for i in np.argsort(-sims, kind="stable")]


def test_top_k_contexts_and_deep_rankings(
    bound: tuple[Retriever, list[Chunk], HashEmbedder],
) -> None:
    retriever, chunks, emb = bound
    query = "password reset portal manager"
    result = retriever.retrieve(query)
    ranked = reference_ranking(emb, chunks, query)
    assert len(result.ranked_chunk_ids) == 6 and len(result.scores) == 6
    # Bag-of-words cosines by hand (query has 4 tokens, norm 2): it#0 shares 3 of its 6
    # tokens -> 3 / (2 * sqrt 6); it#2 shares 1 of 2 -> 1 / (2 * sqrt 2); then ties at
    # 1 / (2 * sqrt 5) (it#1, travel#0) and 1 / (2 * sqrt 6) (hr#1, visit#1).
    expected = [
        3 / (2 * 6**0.5),
        1 / (2 * 2**0.5),
        1 / (2 * 5**0.5),
        1 / (2 * 5**0.5),
        1 / (2 * 6**0.5),
        1 / (2 * 6**0.5),
    ]
    np.testing.assert_allclose(result.scores, expected, atol=1e-5)
    assert result.ranked_chunk_ids[:2] == [c.id for c in ranked[:2]]
    assert set(result.ranked_chunk_ids[2:4]) == {"it#1", "travel#0"}
    assert set(result.ranked_chunk_ids[4:6]) == {"hr#1", "visit#1"}
    assert result.chunk_ids == result.ranked_chunk_ids[:2]
    assert result.chunk_ids == ["it#0", "it#2"]
    assert result.contexts == ["reset your password in the portal", "portal support"]
    # Doc ranking: parents of the 6 ranked chunks, first occurrence wins, so fewer than 6.
    parents = [cid.split("#")[0] for cid in result.ranked_chunk_ids]
    assert result.doc_ids == list(dict.fromkeys(parents))
    assert result.doc_ids[0] == "it" and len(result.doc_ids) == 4  # it, travel, hr, visit
    assert len(set(result.doc_ids)) == len(result.doc_ids)


def test_depth_defaults_to_top_k_and_never_below_it() -> None:
    assert Retriever(top_k=3).ranking_depth == 3
    assert Retriever(top_k=5, depth=2).ranking_depth == 5
    assert Retriever(top_k=5, depth=100).ranking_depth == 100


def test_depth_beyond_corpus_returns_every_chunk(
    bound: tuple[Retriever, list[Chunk], HashEmbedder],
) -> None:
    retriever, chunks, _ = bound
    retriever.depth = 100
    result = retriever.retrieve("fire")
    assert sorted(result.ranked_chunk_ids) == sorted(c.id for c in chunks)
    assert sorted(result.doc_ids) == sorted(DOCS)
    assert set(result.chunk_ids) == {"fire#0", "fire#1"}  # tied: 1 / sqrt 5 each


def test_invalid_settings_and_unbound_use() -> None:
    with pytest.raises(ConfigError, match="top_k must be >= 1"):
        Retriever(top_k=0)
    with pytest.raises(ConfigError, match="depth"):
        Retriever(top_k=1, depth=0)
    with pytest.raises(VectorIndexError, match="not bound"):
        Retriever().retrieve("anything")
