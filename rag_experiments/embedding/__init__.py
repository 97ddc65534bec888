"""Embedders: text -> L2-normalised float32 vectors
(see :class:`rag_experiments.protocols.Embedder`)."""

from rag_experiments.embedding.cache import CachedEmbedder
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.embedding.sentence_transformers import SentenceTransformerEmbedder

__all__ = ["CachedEmbedder", "HashEmbedder", "SentenceTransformerEmbedder"]
