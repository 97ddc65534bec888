"""The persistent BM25 index of the baseline: one ``bm25s`` index per (corpus, chunker,
parameters) key, in a folder under ``paths.bm25_dir``.

Named like the vector index (:func:`~rag_experiments.index.naming.collection_name` of the full
key), reused when its ``meta.json`` holds the same key and the same chunk ids, and built
crash-safe: written into a temporary folder beside it, which is renamed into place only when
complete (a build killed half-way leaves a temporary folder, never a half index under the
name). Builds are serialised across processes with a :class:`filelock.FileLock` per index and
the state is re-checked after the lock is acquired, so of two jobs that start together one
builds and the other reuses.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from rag_experiments.errors import VectorIndexError
from rag_experiments.index.bm25_params import Bm25Params
from rag_experiments.index.naming import collection_name
from rag_experiments.text.cjk import spaced_bigrams

log = logging.getLogger(__name__)

META = "meta.json"
"""File inside an index folder naming its key and chunk ids (written before the rename)."""

TOKEN_PATTERN = r"(?u)\b\w+\b"
"""Tokens: runs of word characters, one character or more (Lucene's StandardTokenizer keeps
one-letter tokens and numbers; bm25s's default ``\\w\\w+`` drops them)."""


class Analyzer:
    """Turns texts into token lists the way :class:`Bm25Params` says (bm25s's tokenizer:
    lower-case, :data:`TOKEN_PATTERN`, stop words, PyStemmer), with CJK runs made bigrams
    first for ``language`` ``auto`` and ``cjk`` (:func:`~rag_experiments.text.cjk.
    spaced_bigrams`; ``cjk`` does not stem, as Lucene's ``CJKAnalyzer``).

    Raises:
        VectorIndexError: The stemmer algorithm is unknown to PyStemmer.
    """

    def __init__(self, params: Bm25Params) -> None:
        self.params = params
        self.stemmer: Any = None
        if params.stemmer and params.language != "cjk":
            import Stemmer

            try:
                self.stemmer = Stemmer.Stemmer(params.stemmer)
            except KeyError as exc:
                raise VectorIndexError(
                    f"retriever stemmer {params.stemmer!r} is not a PyStemmer algorithm; use "
                    f"one of {sorted(Stemmer.algorithms())} or null"
                ) from exc

    def tokens(self, texts: list[str]) -> list[list[str]]:
        """One token list per text (possibly empty: a text of stop words, emoji or punctuation
        only has no token)."""
        import bm25s

        if self.params.language != "en":
            texts = [spaced_bigrams(t) for t in texts]
        return bm25s.tokenize(
            texts,
            lower=self.params.lower,
            token_pattern=TOKEN_PATTERN,
            stopwords=self.params.stopwords or [],
            stemmer=self.stemmer,
            return_ids=False,
            show_progress=False,
        )


class Bm25Store:
    """Folders of built ``bm25s`` indexes.

    Args:
        path: Folder holding one sub-folder per index (created if missing).

    Attributes:
        builds: How many indexes this object has built (not reused); for tests and logs.
    """

    def __init__(self, path: str | Path = ".cache/bm25") -> None:
        self.path = Path(path)
        self.builds = 0

    def _reusable(self, folder: Path, key: str, chunk_ids: list[str]) -> bool:
        meta_file = folder / META
        if not meta_file.is_file():
            return False
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if meta.get("key") != key or meta.get("chunk_ids") != chunk_ids:
            log.warning(
                "Rebuilding BM25 index %s: it was built for other chunks or settings", folder
            )
            return False
        return True

    def ensure(self, texts: list[str], chunk_ids: list[str], key: str, params: Bm25Params) -> Any:
        """The ``bm25s.BM25`` index of ``texts`` (one per chunk, in ``chunk_ids`` order) for
        ``key``, loaded from its folder or built there first.

        Args:
            texts: The text indexed per chunk.
            chunk_ids: The chunk ids, same order (stored and checked on reuse).
            key: Identity of the chunks (``"<chunker_id>|<corpus_digest>"``); the folder name
                is :func:`collection_name` of ``key`` and ``params.key()``.
            params: Analysis and scoring.

        Returns:
            The loaded ``bm25s.BM25`` (document i = ``chunk_ids[i]``).

        Raises:
            VectorIndexError: Nothing to index, or the index cannot be written or read.
        """
        if not texts:
            raise VectorIndexError(
                f"Nothing to index for key {key!r}: the corpus produced no chunks. Check that "
                "the corpus documents have text and the chunker settings."
            )
        full_key = f"{params.key()}|{key}"
        folder = self.path / collection_name(full_key)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            if not self._reusable(folder, full_key, chunk_ids):
                with FileLock(str(folder) + ".lock"):
                    if not self._reusable(folder, full_key, chunk_ids):
                        self._build(folder, texts, chunk_ids, full_key, params)
                        self.builds += 1
                        return self._load(folder)
            log.info("Reusing BM25 index %s (%d chunks)", folder.name, len(chunk_ids))
            return self._load(folder)
        except OSError as exc:
            raise VectorIndexError(
                f"BM25 index {folder} could not be written or read: {exc}. Check that "
                f"{self.path} is writable (delete the folder to rebuild)."
            ) from exc

    @staticmethod
    def _load(folder: Path) -> Any:
        import bm25s

        return bm25s.BM25.load(str(folder), show_progress=False)

    def _build(
        self, folder: Path, texts: list[str], chunk_ids: list[str], key: str, params: Bm25Params
    ) -> None:
        import bm25s

        started = time.perf_counter()
        retriever = bm25s.BM25(k1=params.k1, b=params.b, delta=params.delta, method=params.method)
        retriever.index(Analyzer(params).tokens(texts), show_progress=False)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=self.path))
        try:
            retriever.save(str(tmp), show_progress=False)
            meta = {"key": key, "n_chunks": len(chunk_ids), "chunk_ids": chunk_ids}
            (tmp / META).write_text(json.dumps(meta), encoding="utf-8")
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        log.info(
            "Built BM25 index %s: %d chunks in %.1f s",
            folder.name,
            len(chunk_ids),
            time.perf_counter() - started,
        )
