"""Near-duplicate removal for generated questions: a normalised-text hash, then embedding cosine.

Two checks, cheapest first:

1. **Exact** (``duplicate_exact``): the SHA-256 of the question's normalised text
   (:func:`~rag_experiments.generate.filters.normalize_for_match`: NFKC, case-folded word
   tokens joined by spaces) equals that of a kept question, so case, punctuation and spacing
   differences do not matter.
2. **Near** (``duplicate_near``): the cosine similarity of the question's embedding with a kept
   question's embedding is ``>= threshold`` (default 0.95). Embeddings are L2-normalised
   (the :class:`~rag_experiments.protocols.Embedder` contract), so the cosine is their dot
   product.
"""

from __future__ import annotations

import hashlib

import numpy as np

from rag_experiments.errors import ConfigError
from rag_experiments.generate.filters import normalize_for_match
from rag_experiments.protocols import Embedder


def question_key(text: str) -> str:
    """SHA-256 hex digest of the normalised question text (the exact-duplicate key)."""
    return hashlib.sha256(normalize_for_match(text).encode("utf-8")).hexdigest()


class Deduplicator:
    """Remembers kept questions and tells whether a new one duplicates any of them.

    Not thread-safe: call it from one thread (the generator does, as results come in). The
    vector :meth:`check` computes for a question is reused when that question is then added,
    so a kept question is embedded once.

    Args:
        embedder: Embeds questions for the near-duplicate check; None = exact check only.
        threshold: Cosine similarity at or above which two questions are near-duplicates,
            in ``(0, 1]``.

    Raises:
        ConfigError: ``threshold`` outside ``(0, 1]``.
    """

    def __init__(self, embedder: Embedder | None, threshold: float = 0.95) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ConfigError(
                f"dedup_threshold must be in (0, 1], got {threshold}; 0.95 is a good default"
            )
        self.embedder = embedder
        self.threshold = threshold
        self._keys: dict[str, str] = {}
        self._ids: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._checked: dict[str, np.ndarray] = {}  # question → vector, from check() to add()

    def __len__(self) -> int:
        return len(self._ids)

    def check(self, question: str) -> tuple[str, str] | None:
        """Tell whether ``question`` duplicates a kept question.

        Returns:
            ``("duplicate_exact" | "duplicate_near", detail)`` naming the kept question's id,
            or None when it is new.
        """
        key = question_key(question)
        if key in self._keys:
            return "duplicate_exact", f"same normalised text as {self._keys[key]}"
        if self.embedder is None or not self._vectors:
            return None
        vector = np.asarray(self.embedder.embed_documents([question]), dtype=np.float32)[0]
        self._checked = {question: vector}  # only the latest: the one that may be added next
        similarities = np.stack(self._vectors) @ vector
        best = int(np.argmax(similarities))
        if float(similarities[best]) >= self.threshold:
            return (
                "duplicate_near",
                f"cosine {float(similarities[best]):.3f} >= {self.threshold} with "
                f"{self._ids[best]}",
            )
        return None

    def add(self, question: str, item_id: str) -> None:
        """Remember a kept question under ``item_id``."""
        self.add_many([(question, item_id)])

    def add_many(self, items: list[tuple[str, str]]) -> None:
        """Remember several kept questions ``(question, id)`` (one embedding call)."""
        if not items:
            return
        for question, item_id in items:
            self._keys.setdefault(question_key(question), item_id)
            self._ids.append(item_id)
        if self.embedder is not None:
            vectors = dict(self._checked)
            new = [q for q, _ in items if q not in vectors]
            if new:
                embedded = np.asarray(self.embedder.embed_documents(new), dtype=np.float32)
                vectors.update(zip(new, embedded, strict=True))
            self._vectors.extend(vectors[q] for q, _ in items)
            self._checked = {}
