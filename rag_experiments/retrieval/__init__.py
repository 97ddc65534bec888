"""Retrieval for the baseline target."""

from rag_experiments.retrieval.retriever import RetrievalResult, Retriever

__all__ = ["RetrievalResult", "Retriever"]
