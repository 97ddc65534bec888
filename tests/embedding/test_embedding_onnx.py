"""ONNX Runtime backends of the MiniLM embedder (``embedder.backend=onnx|onnx-int8``).

The reference is the PyTorch backend of the same bundled model: the ONNX graph is a trace of
it, so float32 vectors must agree to rounding (cosine >= 0.999); dynamic int8 quantisation
moves them more (measured on 256 SciFact abstracts: min cosine 0.988, mean 0.993), so its
bound is 0.98. One export per test session, in a temporary cache folder.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from hydra.utils import instantiate

from rag_experiments.build import build
from rag_experiments.embedding.onnx_runtime import ONNX_FILES, ensure_export
from rag_experiments.embedding.sentence_transformers import SentenceTransformerEmbedder
from rag_experiments.errors import ConfigError

TEXTS = [
    "How do I reset my password?",
    "The fire drill takes place every first Monday of the month at 10 am.",
    "Vitamin D deficiency is associated with an increased risk of respiratory infections "
    "in randomised controlled trials.",
    "x",
]


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the float32 and int8 exports (made once per session)."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    SentenceTransformerEmbedder(backend="onnx-int8", cache_dir=str(cache)).embed_query("warm")
    return cache


@pytest.fixture(scope="session")
def vectors(onnx_cache: Path) -> dict[str, np.ndarray]:
    """Document vectors of :data:`TEXTS` per backend."""
    return {
        b: SentenceTransformerEmbedder(backend=b, cache_dir=str(onnx_cache)).embed_documents(TEXTS)
        for b in ("torch", "onnx", "onnx-int8")
    }


@pytest.mark.slow
def test_onnx_vectors_match_torch(vectors: dict[str, np.ndarray]) -> None:
    for b in ("onnx", "onnx-int8"):
        assert vectors[b].shape == (len(TEXTS), 384) and vectors[b].dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(vectors[b], axis=1), 1.0, rtol=1e-5)
    assert _cosines(vectors["onnx"], vectors["torch"]).min() >= 0.999
    assert _cosines(vectors["onnx-int8"], vectors["torch"]).min() >= 0.98


@pytest.mark.slow
def test_onnx_query_equals_document_vector(
    onnx_cache: Path, vectors: dict[str, np.ndarray]
) -> None:
    # MiniLM has no query prompt, so a query is embedded as a document (same session).
    emb = SentenceTransformerEmbedder(backend="onnx", cache_dir=str(onnx_cache))
    np.testing.assert_allclose(emb.embed_query(TEXTS[1]), vectors["onnx"][1], atol=1e-5)
    assert emb.dim == 384


@pytest.mark.slow
def test_export_happens_once(onnx_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    emb = SentenceTransformerEmbedder(backend="onnx-int8", cache_dir=str(onnx_cache))
    folder = emb.export_dir
    assert folder.parent == onnx_cache / "onnx"
    files = {b: folder / name for b, name in ONNX_FILES.items()}
    assert all(f.is_file() for f in files.values())
    before = {b: f.stat().st_mtime_ns for b, f in files.items()}
    with caplog.at_level(logging.INFO, logger="rag_experiments.embedding.onnx_runtime"):
        for backend in ("onnx", "onnx-int8"):
            SentenceTransformerEmbedder(backend=backend, cache_dir=str(onnx_cache)).embed_query("q")
            path, exported = ensure_export(emb.model, folder, backend)
            assert path == files[backend] and exported is False
    assert {b: f.stat().st_mtime_ns for b, f in files.items()} == before
    assert not [r for r in caplog.records if "once" in r.getMessage()]
    assert sorted(p.name for p in folder.iterdir()) == sorted(ONNX_FILES.values())  # no tmp


def test_ids_differ_per_backend(tmp_path: Path) -> None:
    ids = {
        b: SentenceTransformerEmbedder(backend=b, cache_dir=str(tmp_path)).id
        for b in ("torch", "onnx", "onnx-int8")
    }
    assert len(set(ids.values())) == 3
    assert ids["onnx"] == ids["torch"] + ":onnx"
    assert ids["onnx-int8"] == ids["torch"] + ":onnx-int8"
    assert list(tmp_path.iterdir()) == []  # nothing is exported before the first use


def test_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"embedder.backend='foo'.*torch, onnx, onnx-int8"):
        SentenceTransformerEmbedder(backend="foo")


def test_unknown_backend_fails_when_the_job_is_built(compose_cfg) -> None:
    cfg = compose_cfg("embedder.backend=foo", "metrics=retrieval", "llm=fake", "judge=fake")
    with pytest.raises(ConfigError, match="torch, onnx, onnx-int8"):
        build(cfg)


@pytest.mark.slow
def test_composed_onnx_backend_embeds(
    compose_cfg, onnx_cache: Path, vectors: dict[str, np.ndarray]
) -> None:
    cfg = compose_cfg("embedder.backend=onnx")
    assert cfg.embedder.cache_dir.endswith("/cache")  # ${paths.cache_dir}
    cfg = compose_cfg("embedder.backend=onnx", f"paths.cache_dir={onnx_cache}")
    emb = instantiate(cfg.embedder)
    assert isinstance(emb, SentenceTransformerEmbedder)
    assert emb.backend == "onnx" and emb.cache_dir == str(onnx_cache)
    np.testing.assert_allclose(emb.embed_documents(TEXTS), vectors["onnx"], atol=1e-5)
