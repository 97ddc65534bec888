"""A deterministic hashing-trick embedder: a lexical retriever with no model to load.

Used by tests and as a cheap baseline. The vector of a text is its bag of word tokens
projected into ``dim`` buckets with the "hashing trick" of Weinberger et al. (2009),
*Feature Hashing for Large Scale Multitask Learning*: token ``t`` adds ``sign(t)`` to
bucket ``h(t) mod dim``; the result is L2-normalised, so the cosine similarity of two
vectors approximates the cosine similarity of the two texts' term-count vectors.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from rag_experiments.errors import ConfigError

_TOKEN = re.compile(r"\w+")


class HashEmbedder:
    """Bag-of-words vectors via the hashing trick; same text → same vector on every machine.

    Tokens are lowercase ``\\w+`` runs. Each token is hashed once with BLAKE2b (8 bytes,
    unsalted): the hash modulo ``dim`` picks the bucket and bit 63 picks the sign (+1/-1),
    which keeps collisions unbiased. Counts are summed, then L2-normalised to float32.

    A text with no word token (``""``, ``"?!"``) would give a zero vector, whose cosine
    distance is undefined; it gets the fixed unit vector ``e_0`` instead, so it is equally
    (dis)similar to every other token-free text and never breaks a cosine index.

    Args:
        dim: Number of buckets (vector dimension), >= 2.

    Raises:
        ConfigError: When ``dim`` < 2.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ConfigError(
                f"HashEmbedder: dim must be >= 2, got {dim}; set embedder.dim to e.g. 256."
            )
        self._dim = dim

    @property
    def id(self) -> str:
        """``hash-{dim}``: the only setting that changes the vectors."""
        return f"hash-{self._dim}"

    @property
    def dim(self) -> int:
        """Vector dimension."""
        return self._dim

    def check(self) -> None:
        """Always ready (no model)."""

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self._dim, dtype=np.float64)
        for token in _TOKEN.findall(text.lower()):
            h = int.from_bytes(
                hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "big"
            )
            vec[h % self._dim] += 1.0 if (h >> 63) & 1 == 0 else -1.0
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # No token, or (rarely) tokens whose signed counts cancel out exactly.
            vec[:] = 0.0
            vec[0] = 1.0
            return vec.astype(np.float32)
        return (vec / norm).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed many texts.

        Args:
            texts: The texts, any length.

        Returns:
            float32 array of shape ``(len(texts), dim)``, each row of L2 norm 1.
        """
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._vector(text)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (same function as documents: the embedder is symmetric).

        Args:
            text: The query.

        Returns:
            float32 array of shape ``(dim,)``, L2 norm 1.
        """
        return self._vector(text)
