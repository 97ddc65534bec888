"""The persistent vector index of the baseline: one ChromaDB collection per index key.

A collection is built once per ``(corpus, chunker config, embedder, embed_title)`` and then
reused by every later run and every job of a parallel sweep. Chroma never embeds anything
here: we always pass our own vectors (its default embedding function would try to download
a model).

A collection is *complete* only when its metadata says ``{"complete": True, "n_chunks": N}``
(written after the last ``add``) and it holds N records; anything else (a build killed
half-way) is deleted and rebuilt. Builds are serialised across processes with a
:class:`filelock.FileLock` per collection, and the state is re-checked after the lock is
acquired, so of two jobs that start together one builds and the other reuses.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from filelock import FileLock, Timeout

from rag_experiments.errors import RagExpError, VectorIndexError
from rag_experiments.index.naming import collection_name
from rag_experiments.protocols import Embedder
from rag_experiments.records import Chunk

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

log = logging.getLogger(__name__)

OPEN_LOCK = "open.lock"
"""Lock file (inside the database folder) held while a process opens the database."""

SPACE = "cosine"
"""Distance of every collection: Chroma's cosine distance ``d = 1 - cos(q, v)``."""


def embedding_text(chunk: Chunk, embed_title: bool) -> str:
    """The text embedded for a chunk: ``title + " " + text`` when ``embed_title`` and the chunk
    has a non-empty ``metadata["title"]`` (as BEIR and MTEB embed documents), else ``text``."""
    title = chunk.metadata.get("title") if embed_title else None
    if title:
        return f"{title} {chunk.text}"
    return chunk.text


def _chunk_metadata(chunk: Chunk) -> dict[str, Any]:
    meta: dict[str, Any] = {"doc_id": chunk.doc_id, "position": chunk.position}
    page = chunk.metadata.get("page")
    if page is not None:
        meta["page"] = int(page)
    return meta


def collection_space(collection: Collection, meta: dict[str, Any]) -> str | None:
    """The distance space of a Chroma collection: its configuration's ``hnsw.space`` (Chroma
    1.x), else the legacy metadata key ``hnsw:space``; Chroma's default ``l2`` when neither
    is set."""
    hnsw = (collection.configuration or {}).get("hnsw") or {}
    return str(hnsw.get("space") or meta.get("hnsw:space") or "l2")


class ChromaIndex:
    """ChromaDB ``PersistentClient`` collections built from our chunks and vectors.

    Args:
        path: Folder of the persistent Chroma database (created if missing).
        batch_size: Records per ``add`` call; None (or anything larger) means the client's
            ``get_max_batch_size()``.
        ef_construction: HNSW build-time candidate list size (Chroma's default is 100).
        ef_search: HNSW query-time candidate list size (Chroma's default is 100). HNSW search
            is approximate: with Chroma's defaults, BEIR SciFact nDCG@10 with MiniLM came out
            0.6417 against 0.6451 for exact cosine; larger values close that gap (see README).
        max_neighbors: HNSW graph degree M (Chroma's default is 16).

    The three HNSW settings are part of the collection's identity (a change builds a new
    collection; vectors come from the embedding cache).

    Attributes:
        builds: How many collections this object has built (not reused); for tests and logs.

    Raises:
        VectorIndexError: ``batch_size`` < 1.
    """

    def __init__(
        self,
        path: str = ".cache/chroma",
        batch_size: int | None = None,
        ef_construction: int = 200,
        ef_search: int = 200,
        max_neighbors: int = 32,
    ) -> None:
        if batch_size is not None and batch_size < 1:
            raise VectorIndexError(f"index batch_size must be >= 1 or null, got {batch_size}.")
        if min(ef_construction, ef_search, max_neighbors) < 1:
            raise VectorIndexError(
                "HNSW settings ef_construction, ef_search and max_neighbors must be >= 1, got "
                f"{ef_construction}, {ef_search}, {max_neighbors}."
            )
        self.hnsw = {
            "space": SPACE,
            "ef_construction": int(ef_construction),
            "ef_search": int(ef_search),
            "max_neighbors": int(max_neighbors),
        }
        self.path = Path(path)
        self.batch_size = batch_size
        self.builds = 0
        self._client: ClientAPI | None = None
        self._collections: dict[str, Collection] = {}

    # -- plumbing ------------------------------------------------------------------------------
    @contextmanager
    def _chroma(self, action: str) -> Iterator[None]:
        """Re-raise any ChromaDB failure as :class:`VectorIndexError` naming the fix."""
        try:
            yield
        except RagExpError:
            raise
        except Exception as exc:  # Chroma's Rust core raises many types
            raise VectorIndexError(
                f"ChromaDB failed to {action} (database {self.path}): "
                f"{type(exc).__name__}: {exc}. If the database is damaged or was written by "
                f"another Chroma version, delete the folder {self.path} (indexes are rebuilt "
                "on the next run)."
            ) from exc

    @property
    def client(self) -> ClientAPI:
        """The ``PersistentClient`` (opened on first use, telemetry off)."""
        if self._client is None:
            import chromadb
            from chromadb.config import Settings

            with self._chroma("open the database"):
                self.path.mkdir(parents=True, exist_ok=True)
                # Opening a new database creates its tables (migrations); two processes doing
                # that at once fail with "table ... already exists", so opening is serialised.
                with FileLock(str(self.path / OPEN_LOCK)):
                    self._client = chromadb.PersistentClient(
                        path=str(self.path), settings=Settings(anonymized_telemetry=False)
                    )
        return self._client

    def _get(self, name: str) -> Collection | None:
        """The collection, or None when it does not exist."""
        from chromadb.errors import NotFoundError

        with self._chroma(f"open collection {name}"):
            try:
                return self.client.get_collection(name, embedding_function=None)
            except (NotFoundError, ValueError):
                return None

    def _complete_count(
        self,
        name: str,
        key: str,
        embedder: Embedder,
        chunker_id: str | None = None,
        quiet: bool = False,
    ) -> int | None:
        """N when collection ``name`` exists, is complete, holds N records and was built the
        way this index builds it; else None (to be rebuilt).

        A collection that exists but is not what :meth:`ensure` would build (another key,
        embedder, vector dimension, chunker or distance space: a hand-made collection, an old
        layout, a name-hash collision) is logged as a warning with the reason (unless
        ``quiet``: the re-check under the build lock) and rebuilt.
        """
        collection = self._get(name)
        if collection is None:
            return None
        meta = collection.metadata or {}
        reason = self._mismatch(collection, meta, key, embedder, chunker_id)
        if reason is not None:
            if not quiet:
                log.warning("Rebuilding vector index %s in %s: %s", name, self.path, reason)
            return None
        n = meta.get("n_chunks")
        if meta.get("complete") is not True or not isinstance(n, int):
            return None
        with self._chroma(f"count collection {name}"):
            count = collection.count()
        return n if count == n else None

    def _mismatch(
        self,
        collection: Collection,
        meta: dict[str, Any],
        key: str,
        embedder: Embedder,
        chunker_id: str | None,
    ) -> str | None:
        """Why ``collection`` cannot be reused for ``key``, or None when it can."""
        if meta.get("complete") is not True:
            return None  # a build killed half-way: rebuilt as incomplete
        stored = {
            "key": (meta.get("key"), key),
            "embedder": (meta.get("embedder_id"), embedder.id),
        }
        if chunker_id is not None:
            stored["chunker"] = (meta.get("chunker_id"), chunker_id)
        for what, (have, want) in stored.items():
            if have != want:
                return f"it was built for {what} {have!r}, this run needs {want!r}"
        space = collection_space(collection, meta)
        if space != SPACE:
            return f"its distance space is {space!r}, not {SPACE!r} (scores would not be cosines)"
        dim = meta.get("dim")
        if dim != embedder.dim:
            return f"its vectors have dimension {dim!r}, the embedder's have {embedder.dim}"
        return None

    # -- build / reuse -------------------------------------------------------------------------
    def ensure(
        self,
        chunks: list[Chunk],
        embedder: Embedder,
        key: str,
        embed_title: bool = True,
        chunker_id: str | None = None,
    ) -> str:
        """Return the name of a complete collection for ``key``, building it if needed.

        An existing collection is reused only when it is complete and was built for this key,
        by this embedder (``embedder.id``, ``embedder.dim``), chunker (``chunker_id``) and in
        cosine space; otherwise it is rebuilt, with a warning saying why.

        The collection name is :func:`~rag_experiments.index.naming.collection_name` of
        ``f"{key}|title={int(embed_title)}"``: embedding titles changes the vectors, so it is
        part of the identity.

        Args:
            chunks: Every chunk of the corpus; ids must be unique.
            embedder: Embeds the chunk texts (see :func:`embedding_text`).
            key: Index identity, usually :func:`~rag_experiments.index.naming.index_key`.
            embed_title: Embed ``title + " " + text`` for chunks with ``metadata["title"]``.
            chunker_id: The chunker's ``config_id``, stored and checked on reuse (None = not
                checked beyond ``key``).

        Returns:
            The collection name, for :meth:`query`.

        Raises:
            VectorIndexError: No chunks, duplicate chunk ids, unusable vectors, or a ChromaDB
                failure.
        """
        if not chunks:
            raise VectorIndexError(
                f"Nothing to index for key {key!r}: the corpus produced no chunks. Check that "
                "the corpus documents have text and the chunker settings."
            )
        h = self.hnsw
        full_key = (
            f"{key}|title={int(embed_title)}"
            f"|hnsw={h['ef_construction']}-{h['ef_search']}-{h['max_neighbors']}"
        )
        name = collection_name(full_key)
        ids = [c.id for c in chunks]
        if len(set(ids)) != len(ids):
            dupes = sorted(i for i, n_seen in Counter(ids).items() if n_seen > 1)
            raise VectorIndexError(
                f"Duplicate chunk ids cannot be indexed (collection {name}): {dupes[:10]}. "
                "Make document ids unique in the corpus."
            )
        n = self._complete_count(name, full_key, embedder, chunker_id)
        if n == len(chunks):
            log.info("Reusing vector index %s (%d chunks)", name, n)
            return name
        self.path.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.path / f"{name}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            log.info("Waiting for another process that is building vector index %s", name)
            lock.acquire()
        try:
            # Re-check: another process may have finished the build while we waited.
            n = self._complete_count(name, full_key, embedder, chunker_id, quiet=True)
            if n == len(chunks):
                log.info("Reusing vector index %s (%d chunks)", name, n)
                return name
            self._build(name, full_key, chunks, embedder, embed_title, chunker_id)
        finally:
            lock.release()
        return name

    def _build(
        self,
        name: str,
        key: str,
        chunks: list[Chunk],
        embedder: Embedder,
        embed_title: bool,
        chunker_id: str | None = None,
    ) -> None:
        started = time.perf_counter()
        self._collections.pop(name, None)
        if self._get(name) is not None:
            log.info("Deleting vector index %s before building it again", name)
            with self._chroma(f"delete collection {name}"):
                self.client.delete_collection(name)
        vectors = np.asarray(
            embedder.embed_documents([embedding_text(c, embed_title) for c in chunks]),
            dtype=np.float32,
        )
        if vectors.ndim != 2 or vectors.shape[0] != len(chunks):
            raise VectorIndexError(
                f"Embedder {embedder.id} returned vectors of shape {vectors.shape} for "
                f"{len(chunks)} chunks; expected ({len(chunks)}, dim)."
            )
        norms = np.linalg.norm(vectors, axis=1)
        bad = [chunks[i].id for i in np.flatnonzero(~np.isfinite(norms) | (norms == 0))]
        if bad:
            raise VectorIndexError(
                f"Embedder {embedder.id} returned zero or non-finite vectors for {len(bad)} "
                f"chunks (e.g. {bad[:5]}); cosine search needs non-zero vectors."
            )
        meta: dict[str, Any] = {
            "key": key,
            "embedder_id": embedder.id,
            "dim": int(vectors.shape[1]),
            "complete": False,
        }
        if chunker_id is not None:
            meta["chunker_id"] = chunker_id
        with self._chroma(f"build collection {name}"):
            collection = self.client.create_collection(
                name,
                configuration={"hnsw": dict(self.hnsw)},
                metadata=meta,
                embedding_function=None,
            )
            limit = self.client.get_max_batch_size()
            step = min(self.batch_size or limit, limit)
            for i in range(0, len(chunks), step):
                part = chunks[i : i + step]
                collection.add(
                    ids=[c.id for c in part],
                    embeddings=vectors[i : i + step],
                    documents=[c.text for c in part],
                    metadatas=[_chunk_metadata(c) for c in part],
                )
            collection.modify(metadata={**meta, "complete": True, "n_chunks": len(chunks)})
        self._collections[name] = collection
        self.builds += 1
        log.info(
            "Built vector index %s: embedded %d chunks in %.1f s",
            name,
            len(chunks),
            time.perf_counter() - started,
        )

    # -- query ---------------------------------------------------------------------------------
    def query(
        self, name: str, query_embedding: np.ndarray, k: int
    ) -> list[tuple[str, str, str, float]]:
        """The ``k`` nearest chunks to a query vector, best first.

        Args:
            name: A collection name returned by :meth:`ensure`.
            query_embedding: float32 ``(dim,)``, from the same embedder as the index.
            k: How many chunks (>= 1); all of them when the collection holds fewer.

        Returns:
            ``(chunk_id, doc_id, text, score)`` tuples, score = 1 - cosine distance = cosine
            similarity in [-1, 1], highest first.

        Raises:
            VectorIndexError: ``k`` < 1, the collection does not exist, or Chroma fails.
        """
        if k < 1:
            raise VectorIndexError(f"query k must be >= 1, got {k}.")
        collection = self._collections.get(name)
        if collection is None:
            collection = self._get(name)
            if collection is None:
                raise VectorIndexError(
                    f"No vector index named {name} in {self.path}; build it with ensure() "
                    "(the baseline target does this in prepare())."
                )
            self._collections[name] = collection
        vector = np.asarray(query_embedding, dtype=np.float32).reshape(1, -1)
        with self._chroma(f"query collection {name}"):
            res = collection.query(
                query_embeddings=vector,
                n_results=k,
                include=["documents", "metadatas", "distances"],
            )
        ids = res["ids"][0]
        docs = (res["documents"] or [[]])[0]
        metas = (res["metadatas"] or [[]])[0]
        dists = (res["distances"] or [[]])[0]
        return [
            (cid, str((meta or {}).get("doc_id", "")), doc or "", 1.0 - float(dist))
            for cid, doc, meta, dist in zip(ids, docs, metas, dists, strict=True)
        ]
