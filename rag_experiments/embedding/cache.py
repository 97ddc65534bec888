"""A persistent embedding cache in SQLite, shared by runs and by parallel sweep jobs."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag_experiments.common.sqlite_store import connect, init_store, write
from rag_experiments.errors import ConfigError
from rag_experiments.protocols import Embedder

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    embedder_id TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dim INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (embedder_id, text_sha256)
)
"""

LOOKUP_CHUNK = 500
"""Keys per ``SELECT … IN (…)`` (well under SQLite's bound-parameter limit)."""

QUERY_SUFFIX = "#query"
"""Appended to the embedder id for query vectors, which may differ from document vectors
of the same text (models with a query prompt)."""


@dataclass
class CacheStats:
    """Texts served from the cache (``hits``) and sent to the inner embedder (``misses``),
    counted per text since the :class:`CachedEmbedder` was made."""

    hits: int = 0
    misses: int = 0


def text_key(text: str) -> str:
    """SHA-256 hex digest of the UTF-8 text: the cache key of a text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CachedEmbedder:
    """Wraps an embedder with a SQLite cache keyed by ``(embedder id, sha256(text))``.

    Only texts not yet cached go to the inner embedder, all in one call (duplicates within a
    call are embedded once). Vectors are stored as raw float32 bytes. The database uses WAL
    journaling and a 60 s busy timeout, so two processes (a parallel sweep) can read and
    write it at once; a row written twice is written once (``INSERT OR IGNORE``).

    Args:
        inner: The embedder whose vectors are cached.
        path: SQLite file; its folder is created if needed.

    Attributes:
        stats: Hit and miss counts.

    Raises:
        ConfigError: The cache file cannot be opened (bad path, not a database).
    """

    def __init__(self, inner: Embedder, path: str = ".cache/embeddings.sqlite") -> None:
        self.inner = inner
        self.path = Path(path)
        self.stats = CacheStats()
        init_store(
            self.path,
            _SCHEMA,
            "the embedding cache",
            "Set paths.embedding_cache to a writable file "
            "(or delete a corrupt one; it is rebuilt).",
        )

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection committed on success and closed afterwards."""
        return connect(self.path)

    def check(self) -> None:
        """The inner embedder's check."""
        self.inner.check()

    @property
    def id(self) -> str:
        """The inner embedder's id (the cache does not change vectors)."""
        return self.inner.id

    @property
    def dim(self) -> int:
        """The inner embedder's dimension."""
        return self.inner.dim

    def _lookup(self, conn: sqlite3.Connection, eid: str, keys: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), LOOKUP_CHUNK):
            part = keys[i : i + LOOKUP_CHUNK]
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                f"SELECT text_sha256, dim, vector FROM embeddings "
                f"WHERE embedder_id = ? AND text_sha256 IN ({marks})",
                [eid, *part],
            )
            for key, dim, blob in rows:
                vec = np.frombuffer(blob, dtype=np.float32)
                if vec.shape[0] == dim:
                    found[key] = vec
        return found

    def _cached(
        self, eid: str, texts: Sequence[str], compute: Callable[[list[str]], np.ndarray]
    ) -> np.ndarray:
        keys = [text_key(t) for t in texts]
        with self._connect() as conn:
            found = self._lookup(conn, eid, sorted(set(keys)))
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key not in found and key not in missing:
                missing[key] = text
        n_hits = sum(1 for k in keys if k in found)
        self.stats.hits += n_hits
        self.stats.misses += len(keys) - n_hits
        if missing:
            vectors = np.asarray(compute(list(missing.values())), dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(missing):
                raise ConfigError(
                    f"Embedder {self.inner.id} returned shape {vectors.shape} for "
                    f"{len(missing)} texts; expected ({len(missing)}, dim). Check the "
                    "embedder config."
                )
            rows = []
            for key, vec in zip(missing, vectors, strict=True):
                vec = np.ascontiguousarray(vec, dtype=np.float32)
                found[key] = vec
                rows.append((eid, key, int(vec.shape[0]), vec.tobytes()))
            write(
                self.path,
                "INSERT OR IGNORE INTO embeddings (embedder_id, text_sha256, dim, vector) "
                "VALUES (?, ?, ?, ?)",
                rows,
            )
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts, from the cache where possible.

        Args:
            texts: The texts.

        Returns:
            float32 ``(len(texts), dim)``, identical to the inner embedder's vectors.

        Raises:
            ConfigError: The inner embedder returned the wrong number of vectors.
        """
        return self._cached(self.inner.id, texts, self.inner.embed_documents)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query, from the cache where possible (stored apart from documents).

        Args:
            text: The query.

        Returns:
            float32 ``(dim,)``.
        """
        return self._cached(
            self.inner.id + QUERY_SUFFIX,
            [text],
            lambda ts: np.stack([self.inner.embed_query(t) for t in ts]),
        )[0]
