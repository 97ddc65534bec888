"""Embedders: the hashing-trick embedder, the SQLite cache and the bundled MiniLM model."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rag_experiments.embedding.cache import CachedEmbedder
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.embedding.sentence_transformers import (
    SentenceTransformerEmbedder,
    bundled_model_path,
)
from rag_experiments.errors import ConfigError


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- HashEmbedder -----------------------------------------------------------------------------
def test_hash_embedder_is_deterministic_and_normalised() -> None:
    texts = ["How do I reset my password?", "Fire safety drill", "x"]
    a = HashEmbedder(dim=64).embed_documents(texts)
    b = HashEmbedder(dim=64).embed_documents(texts)
    assert a.dtype == np.float32 and a.shape == (3, 64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(HashEmbedder(dim=64).embed_query(texts[0]), a[0])
    assert HashEmbedder(dim=64).id == "hash-64"
    assert HashEmbedder(dim=64).dim == 64


def test_hash_embedder_bag_of_words_cosine() -> None:
    # With 2**16 buckets these few tokens do not collide, so the cosine equals the
    # bag-of-words cosine computed by hand: {a, b} vs {a, c} -> 1 / (sqrt 2 * sqrt 2) = 0.5.
    emb = HashEmbedder(dim=2**16)
    ab, ac, aab = emb.embed_documents(["alpha beta", "alpha gamma", "alpha alpha beta"])
    assert cosine(ab, ac) == pytest.approx(0.5, abs=1e-6)
    # {a:2, b:1} vs {a:1, b:1}: (2 + 1) / (sqrt 5 * sqrt 2) = 0.9487
    assert cosine(aab, ab) == pytest.approx(3 / (np.sqrt(5) * np.sqrt(2)), abs=1e-6)
    # Lowercase \w+ tokens: case and punctuation do not matter; counts are normalised away.
    np.testing.assert_array_equal(emb.embed_query("Alpha, BETA!"), ab)
    np.testing.assert_allclose(emb.embed_query("alpha beta alpha beta"), ab, atol=1e-7)


def test_hash_embedder_similar_texts_are_closer() -> None:
    emb = HashEmbedder()
    q = emb.embed_query("how do I reset my password")
    near, far = emb.embed_documents(
        ["password reset procedure: reset my password", "fire safety drill"]
    )
    assert cosine(q, near) > cosine(q, far)


def test_hash_embedder_token_free_text_gets_unit_e0() -> None:
    vecs = HashEmbedder(dim=8).embed_documents(["", "?!"])
    expected = np.zeros(8, dtype=np.float32)
    expected[0] = 1.0
    np.testing.assert_array_equal(vecs, [expected, expected])


def test_hash_embedder_rejects_tiny_dim() -> None:
    with pytest.raises(ConfigError, match="dim"):
        HashEmbedder(dim=1)


# --- CachedEmbedder ---------------------------------------------------------------------------
class CountingEmbedder:
    """HashEmbedder that records every call and every text it embeds."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=32)
        self.calls = 0
        self.texts: list[str] = []

    @property
    def id(self) -> str:
        return self.inner.id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts.extend(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        self.texts.append(text)
        return self.inner.embed_query(text)


def test_cached_embedder_second_call_hits_cache(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, str(tmp_path / "sub" / "emb.sqlite"))
    texts = ["one", "two", "one", "three"]
    first = cached.embed_documents(texts)
    assert inner.calls == 1
    assert inner.texts == ["one", "two", "three"]  # duplicates embedded once, in one batch
    assert (cached.stats.hits, cached.stats.misses) == (0, 4)
    np.testing.assert_array_equal(first, HashEmbedder(dim=32).embed_documents(texts))

    second = cached.embed_documents(texts)
    assert inner.calls == 1
    np.testing.assert_array_equal(second, first)
    assert second.dtype == np.float32
    assert (cached.stats.hits, cached.stats.misses) == (4, 4)
    assert cached.id == "hash-32" and cached.dim == 32


def test_cached_embedder_persists_and_embeds_only_missing(tmp_path: Path) -> None:
    path = str(tmp_path / "emb.sqlite")
    CachedEmbedder(CountingEmbedder(), path).embed_documents(["a", "b"])
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, path)
    out = cached.embed_documents(["b", "c", "a"])
    assert inner.texts == ["c"]
    np.testing.assert_array_equal(out, HashEmbedder(dim=32).embed_documents(["b", "c", "a"]))
    assert cached.embed_documents([]).shape == (0, 32)


def test_cached_embedder_caches_queries_apart_from_documents(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, str(tmp_path / "emb.sqlite"))
    cached.embed_documents(["reset password"])
    q1 = cached.embed_query("reset password")  # a query vector may differ: separate entry
    q2 = cached.embed_query("reset password")
    assert inner.calls == 2
    assert q1.shape == (32,)
    np.testing.assert_array_equal(q1, q2)


def _fill_cache(path: str, start: int) -> int:
    cached = CachedEmbedder(HashEmbedder(dim=32), path)
    for i in range(5):
        cached.embed_documents([f"text {j}" for j in range(start + 40 * i, start + 40 * i + 60)])
    return cached.stats.misses


def test_cached_embedder_two_processes_share_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "emb.sqlite")
    CachedEmbedder(HashEmbedder(dim=32), path)  # create the schema once up front
    with mp.get_context("spawn").Pool(2) as pool:
        misses = pool.starmap(_fill_cache, [(path, 0), (path, 30)])
    assert all(m > 0 for m in misses)
    inner = CountingEmbedder()
    texts = [f"text {j}" for j in range(0, 250)]
    out = CachedEmbedder(inner, path).embed_documents(texts)
    assert inner.calls == 0
    np.testing.assert_array_equal(out, HashEmbedder(dim=32).embed_documents(texts))


# --- SentenceTransformerEmbedder --------------------------------------------------------------
def test_sentence_transformer_missing_path_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="never downloaded"):
        SentenceTransformerEmbedder(model=str(tmp_path / "no-such-model"))


def test_sentence_transformer_id_is_stable_without_loading() -> None:
    a = SentenceTransformerEmbedder()
    b = SentenceTransformerEmbedder(normalize=False, max_seq_length=128)
    assert a.id.startswith("st:minilm:") and a.id.endswith(":norm1:seq256")
    assert b.id.endswith(":norm0:seq128")
    assert a.id.split(":")[2] == b.id.split(":")[2] and len(a.id.split(":")[2]) == 8
    assert a._model is None  # nothing loaded yet


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(show_progress=False)


@pytest.mark.slow
def test_minilm_vectors(minilm: SentenceTransformerEmbedder) -> None:
    docs = minilm.embed_documents(["Password reset procedure", "Fire safety drill"])
    q = minilm.embed_query("How do I reset my password?")
    assert minilm.dim == 384
    assert docs.shape == (2, 384) and docs.dtype == np.float32
    assert q.shape == (384,) and q.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(docs, axis=1), 1.0, rtol=1e-5)
    assert float(q @ docs[0]) > float(q @ docs[1])


@pytest.mark.slow
def test_minilm_matches_sentence_transformers_directly(minilm: SentenceTransformerEmbedder) -> None:
    from sentence_transformers import SentenceTransformer

    text = "Visitors must sign in at reception and wear a badge."
    reference = SentenceTransformer(str(bundled_model_path()), device="cpu").encode(
        [text], normalize_embeddings=True
    )[0]
    np.testing.assert_allclose(minilm.embed_query(text), reference, atol=1e-5)
    np.testing.assert_allclose(minilm.embed_documents([text])[0], reference, atol=1e-5)
