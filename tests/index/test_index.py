"""ChromaIndex: build once and reuse, exact ranking on a toy corpus, collection naming,
and two processes racing to build the same collection."""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.errors import VectorIndexError
from rag_experiments.index.chroma import ChromaIndex, embedding_text
from rag_experiments.index.naming import collection_name, index_key
from rag_experiments.records import Chunk

TOY = {
    "pw": "To reset a forgotten password open the self service portal and answer the questions",
    "fire": "Fire drills happen twice a year and everyone leaves by the nearest exit",
    "travel": "Travel expenses are approved by the line manager before booking flights",
    "badge": "Visitors sign in at reception and wear a visitor badge at all times",
    "backup": "Backups of the file servers run every night and are kept for ninety days",
}


def toy_chunks() -> list[Chunk]:
    return [Chunk(id=f"{d}#0", doc_id=d, text=t, position=0) for d, t in TOY.items()]


def brute_force(emb: HashEmbedder, chunks: list[Chunk], query: str) -> list[tuple[str, float]]:
    """Reference ranking: cosine of the query with every chunk vector, highest first."""
    m = emb.embed_documents([c.text for c in chunks]).astype(np.float64)
    q = emb.embed_query(query).astype(np.float64)
    sims = m @ q / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    order = np.argsort(-sims, kind="stable")
    return [(chunks[i].id, float(sims[i])) for i in order]


# --- naming -----------------------------------------------------------------------------------
SPEC_KEYS = ["RAG eval: bge-small/chunk=512", "ab", "k" * 70, "10.0.0.1", "中文库"]


def test_collection_names_are_valid_distinct_and_deterministic(tmp_path: Path) -> None:
    from chromadb.api.segment import check_index_name  # Chroma's own validator

    keys = [*SPEC_KEYS, "a b", "a/b", "-a..b-", "x" * 200 + "1", "x" * 200 + "2"]
    names = [collection_name(k) for k in keys]
    for name in names:
        check_index_name(name)  # raises ValueError when invalid
        assert 3 <= len(name) <= 63
    assert len(set(names)) == len(names)  # "a b" and "a/b" sanitise alike but differ
    assert names == [collection_name(k) for k in keys]
    assert names[0].startswith("RAG-eval-bge-small-chunk-512-")
    # The real client accepts every one of them.
    index = ChromaIndex(str(tmp_path / "chroma"))
    for name in names[:5]:
        index.client.create_collection(name, embedding_function=None)


def test_index_key_holds_all_parts() -> None:
    key = index_key("0123456789abcdef", "fixed-512-64", "hash-256")
    assert key == "hash-256|fixed-512-64|0123456789abcdef"
    assert key != index_key("0123456789abcdef", "fixed-256-64", "hash-256")


# --- build, reuse, query ----------------------------------------------------------------------
def test_built_once_then_reused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rag_experiments.index.chroma")
    index = ChromaIndex(str(tmp_path / "chroma"))
    emb = HashEmbedder(dim=64)
    name = index.ensure(toy_chunks(), emb, "key-1")
    assert index.builds == 1
    assert f"Built vector index {name}: embedded 5 chunks" in caplog.text
    assert index.ensure(toy_chunks(), emb, "key-1") == name
    assert index.builds == 1
    assert f"Reusing vector index {name} (5 chunks)" in caplog.text
    # A fresh object on the same folder (the next run) reuses it too.
    again = ChromaIndex(str(tmp_path / "chroma"))
    assert again.ensure(toy_chunks(), emb, "key-1") == name and again.builds == 0
    # Another key is another collection.
    other = index.ensure(toy_chunks(), emb, "key-2")
    assert other != name and index.builds == 2
    # embed_title is part of the identity.
    assert index.ensure(toy_chunks(), emb, "key-1", embed_title=False) != name
    assert index.builds == 3


def test_query_ranking_equals_brute_force_cosine(tmp_path: Path) -> None:
    index = ChromaIndex(str(tmp_path / "chroma"), batch_size=2)  # several add() batches
    emb = HashEmbedder(dim=256)
    chunks = toy_chunks()
    name = index.ensure(chunks, emb, "toy")
    queries = [
        "how do I reset my password",
        "visitors sign in at reception and answer the questions every night",
        "the line manager approves backups of travel expenses twice a year",
    ]
    for query in queries:
        expected = brute_force(emb, chunks, query)
        hits = index.query(name, emb.embed_query(query), k=5)
        by_id = dict(expected)
        # Every returned score is that chunk's true cosine, and scores come best first …
        np.testing.assert_allclose([h[3] for h in hits], [by_id[h[0]] for h in hits], atol=1e-5)
        np.testing.assert_allclose([h[3] for h in hits], [s for _, s in expected], atol=1e-5)
        # … and where the brute-force scores are distinct, the order is the same id for id.
        for rank, (cid, score) in enumerate(expected):
            if all(abs(score - other) > 1e-6 for j, (_, other) in enumerate(expected) if j != rank):
                assert hits[rank][0] == cid
        for cid, doc_id, text, _ in hits:
            assert doc_id == cid.split("#")[0] and text == TOY[doc_id]
    # The second and third queries touch every document with distinct scores: full order.
    for query in queries[1:]:
        expected = brute_force(emb, chunks, query)
        assert len({round(s, 6) for _, s in expected}) == 5
        assert [h[0] for h in index.query(name, emb.embed_query(query), k=5)] == [
            c for c, _ in expected
        ]


def test_k_larger_than_corpus_returns_all(tmp_path: Path) -> None:
    index = ChromaIndex(str(tmp_path / "chroma"))
    emb = HashEmbedder(dim=64)
    name = index.ensure(toy_chunks(), emb, "toy")
    hits = index.query(name, emb.embed_query("password"), k=50)
    assert sorted(h[0] for h in hits) == sorted(c.id for c in toy_chunks())
    with pytest.raises(VectorIndexError, match="k must be >= 1"):
        index.query(name, emb.embed_query("password"), k=0)


def test_incomplete_collection_is_rebuilt(tmp_path: Path) -> None:
    index = ChromaIndex(str(tmp_path / "chroma"))
    emb = HashEmbedder(dim=64)
    name = index.ensure(toy_chunks(), emb, "toy")
    # Simulate a build killed half-way: complete flag off, fewer records.
    col = index.client.get_collection(name, embedding_function=None)
    col.delete(ids=["pw#0"])
    col.modify(metadata={**col.metadata, "complete": False})
    fresh = ChromaIndex(str(tmp_path / "chroma"))
    assert fresh.ensure(toy_chunks(), emb, "toy") == name
    assert fresh.builds == 1
    col = fresh.client.get_collection(name, embedding_function=None)
    assert col.count() == 5 and col.metadata["complete"] is True and col.metadata["n_chunks"] == 5


def test_title_is_embedded_and_metadata_stored(tmp_path: Path) -> None:
    index = ChromaIndex(str(tmp_path / "chroma"))
    emb = HashEmbedder(dim=512)
    chunks = [
        Chunk(
            id="d1#0",
            doc_id="d1",
            text="body text here",
            position=0,
            metadata={"title": "Zebra crossing", "page": 3},
        ),
        Chunk(id="d2#1", doc_id="d2", text="other body", position=1),
    ]
    assert embedding_text(chunks[0], True) == "Zebra crossing body text here"
    assert embedding_text(chunks[0], False) == "body text here"
    name = index.ensure(chunks, emb, "titled")
    hits = index.query(name, emb.embed_query("Zebra crossing body text here"), k=1)
    assert hits[0][0] == "d1#0" and hits[0][3] == pytest.approx(1.0, abs=1e-5)
    assert hits[0][2] == "body text here"  # the stored document is the chunk text alone
    got = index.client.get_collection(name, embedding_function=None).get(ids=["d1#0", "d2#1"])
    metas = dict(zip(got["ids"], got["metadatas"], strict=True))
    assert metas["d1#0"] == {"doc_id": "d1", "position": 0, "page": 3}
    assert metas["d2#1"] == {"doc_id": "d2", "position": 1}


def test_bad_inputs_raise_vector_index_error(tmp_path: Path) -> None:
    index = ChromaIndex(str(tmp_path / "chroma"))
    emb = HashEmbedder(dim=64)
    with pytest.raises(VectorIndexError, match="no chunks"):
        index.ensure([], emb, "empty")
    dup = [Chunk(id="a#0", doc_id="a", text="x", position=0)] * 2
    with pytest.raises(VectorIndexError, match=r"Duplicate chunk ids.*a#0"):
        index.ensure(dup, emb, "dup")
    with pytest.raises(VectorIndexError, match="No vector index named nope"):
        index.query("nope-0000000000", emb.embed_query("x"), k=1)
    with pytest.raises(VectorIndexError, match="batch_size"):
        ChromaIndex(str(tmp_path / "c2"), batch_size=0)


def test_chroma_failure_is_wrapped_with_fix(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    index = ChromaIndex(str(not_a_folder))
    with pytest.raises(VectorIndexError, match="delete the folder"):
        index.ensure(toy_chunks(), HashEmbedder(dim=64), "toy")


# --- two processes ----------------------------------------------------------------------------
class SlowHashEmbedder(HashEmbedder):
    """Takes 1 s to embed documents, so a second process arrives mid-build."""

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(1.0)
        return super().embed_documents(texts)


def _ensure_in_process(path: str, barrier: object) -> tuple[int, list[str]]:
    index = ChromaIndex(path)
    emb = SlowHashEmbedder(dim=64)
    barrier.wait()  # type: ignore[attr-defined]
    name = index.ensure(toy_chunks(), emb, "shared")
    hits = index.query(name, emb.embed_query("reset a forgotten password"), k=5)
    return index.builds, [h[0] for h in hits]


@pytest.mark.slow
def test_two_processes_build_once(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    path = str(tmp_path / "chroma")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(2)
        with ctx.Pool(2) as pool:
            results = pool.starmap(_ensure_in_process, [(path, barrier), (path, barrier)])
    builds = sorted(b for b, _ in results)
    assert builds == [0, 1]
    expected = [
        cid
        for cid, _ in brute_force(HashEmbedder(dim=64), toy_chunks(), "reset a forgotten password")
    ]
    assert results[0][1] == results[1][1] == expected
