"""Vector index of the baseline (ChromaDB) and the naming of its collections."""

from rag_experiments.index.chroma import ChromaIndex
from rag_experiments.index.naming import collection_name, index_key

__all__ = ["ChromaIndex", "collection_name", "index_key"]
