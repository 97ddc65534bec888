"""Names of vector-index collections: one per (corpus, chunker config, embedder) key.

A collection name must satisfy ChromaDB's rules (``chromadb.api.segment.check_index_name``,
modelled on S3 bucket names): 3-63 characters from ``[a-zA-Z0-9._-]``, starting and ending
with an alphanumeric character, no ``..``, and not an IPv4 address. (Chroma 1.x's Rust core
accepts up to 512 characters; staying within 63 keeps the names valid for both.)
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 63
"""Longest collection name Chroma's Python validator accepts."""

HASH_CHARS = 10
"""Hex characters of SHA-256 appended to every name (40 bits: collisions are negligible
for the handful of indexes a project keeps)."""

_INVALID = re.compile(r"[^a-zA-Z0-9._-]+")
_NON_ALNUM_EDGE = re.compile(r"^[^a-zA-Z0-9]+|[^a-zA-Z0-9]+$")


def collection_name(key_text: str) -> str:
    """Turn any key into a valid, readable, collision-safe Chroma collection name.

    The name is ``<readable prefix>-<hash>``: the prefix is ``key_text`` with every run of
    characters outside ``[a-zA-Z0-9._-]`` replaced by ``-``, repeated dots collapsed, the
    ends trimmed to alphanumerics and the whole cut to fit in 63 characters (``"idx"`` when
    nothing readable is left); the hash is the first :data:`HASH_CHARS` hex digits of
    SHA-256 over the *unsanitised* UTF-8 key, so two keys that sanitise alike (``"a b"``
    and ``"a/b"``) still get different collections. The result never looks like an IPv4
    address because it always ends in ``-<hex>``.

    Args:
        key_text: Any string (see :func:`index_key`).

    Returns:
        A name of 12-63 characters valid for ChromaDB; the same key always gives the same
        name.
    """
    digest = hashlib.sha256(key_text.encode("utf-8")).hexdigest()[:HASH_CHARS]
    prefix = _INVALID.sub("-", key_text)
    prefix = re.sub(r"\.{2,}", ".", prefix)
    prefix = re.sub(r"-{2,}", "-", prefix)
    prefix = _NON_ALNUM_EDGE.sub("", prefix)
    prefix = _NON_ALNUM_EDGE.sub("", prefix[: MAX_NAME_LENGTH - HASH_CHARS - 1])
    return f"{prefix or 'idx'}-{digest}"


def index_key(corpus_digest: str, chunker_id: str, embedder_id: str) -> str:
    """The identity of a vector index: everything that changes its vectors or its chunks.

    Args:
        corpus_digest: :func:`rag_experiments.data.base.corpus_digest` of the corpus.
        chunker_id: The chunker's ``config_id``.
        embedder_id: The embedder's ``id``.

    Returns:
        ``"<embedder_id>|<chunker_id>|<corpus_digest>"`` (embedder first so the readable
        prefix of :func:`collection_name` shows the model).
    """
    return f"{embedder_id}|{chunker_id}|{corpus_digest}"
