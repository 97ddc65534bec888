"""Retrieval for the baseline target: dense, BM25 and hybrid retrievers, and reranking."""

from rag_experiments.retrieval.base import Hit, RerankerBase, RetrievalResult, RetrieverBase
from rag_experiments.retrieval.retriever import Retriever

__all__ = ["Hit", "RerankerBase", "RetrievalResult", "Retriever", "RetrieverBase"]
