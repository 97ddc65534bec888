"""Bases of the retrieval parts (retrievers, rerankers)."""

from __future__ import annotations


class RerankerBase:
    """A reranker re-scores the first ``candidates`` hits of a ranking for a query."""

    candidates: int = 20

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        """One score per document, same order, higher = more relevant."""
        raise NotImplementedError

    def check(self) -> None:
        """Preflight: raise a one-line error when the reranker cannot work."""
