"""Protocols of the swappable parts. Each implementation is a small class chosen in ``conf/``
by ``_target_``; the runner only sees these interfaces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from rag_experiments.data.base import EvalDataset
    from rag_experiments.records import (
        Chunk,
        Document,
        MetricSpec,
        MetricValue,
        RagResponse,
        Sample,
    )


@runtime_checkable
class DatasetLoader(Protocol):
    """Builds an :class:`~rag_experiments.data.base.EvalDataset` (samples + corpus)."""

    def load(self) -> EvalDataset:
        """Read the dataset. Raises :class:`~rag_experiments.errors.DatasetError` listing every
        bad row as ``file:line:field``."""
        ...


@runtime_checkable
class Chunker(Protocol):
    """Splits documents into chunks. ``config_id`` identifies the configuration (it is part of
    the vector-index key, so two configs that chunk differently must have different ids)."""

    @property
    def config_id(self) -> str: ...

    def split(self, doc: Document) -> list[Chunk]:
        """Return the document's chunks in order; their positions are 0..n-1."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of shape ``(n, dim)``."""

    @property
    def id(self) -> str:
        """Stable identity of model + settings that change vectors (part of the index key)."""
        ...

    @property
    def dim(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray:
        """Shape ``(dim,)``."""
        ...

    def check(self) -> None:
        """Make sure the embedder can be used now (its server answers and has the model),
        before a job builds an index or answers anything; quick, no long retry. In-process
        embedders (hash, sentence-transformers) have nothing to reach.

        Raises:
            RagExpError: The embedder cannot be used; the message names the fix.
        """
        ...


@runtime_checkable
class Target(Protocol):
    """The RAG system under test: answers one question.

    ``max_concurrency`` declares how many questions it takes at once (the runner answers that
    many from threads unless the run sets ``max_concurrency``); with more than 1, ``answer``
    must be thread-safe.
    """

    max_concurrency: int

    def prepare(self, dataset: EvalDataset) -> None:
        """Get ready for ``dataset`` (build or reuse an index, check an endpoint)."""
        ...

    def answer(self, sample: Sample) -> RagResponse:
        """Answer one sample. Failures are returned as ``RagResponse(error=reason)``, never
        raised, so one bad question never kills a run."""
        ...

    def describe(self) -> dict[str, str]:
        """Identity for tags (model ids, embedder id, index name, url)."""
        ...

    def check(self) -> None:
        """Make sure the system and every model it uses can be reached, before any question
        is asked and before any index is built (once per job; quick).

        Raises:
            RagExpError: Something it needs cannot be used; the message names the fix.
        """
        ...


@runtime_checkable
class Metric(Protocol):
    """A group of metric columns computed over all rows.

    ``evaluate`` returns one dict per row, keyed by :attr:`MetricSpec.name`; a value that
    cannot be computed for a row is ``MetricValue.nan(reason)``, never a silent 0.
    """

    def specs(self) -> list[MetricSpec]: ...

    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]: ...
