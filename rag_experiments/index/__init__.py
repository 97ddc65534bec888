"""Indexes of the baseline: the vector index (:mod:`~rag_experiments.index.chroma`, ChromaDB),
the BM25 index (:mod:`~rag_experiments.index.bm25`) and the naming of both
(:mod:`~rag_experiments.index.naming`).

Nothing is imported here, so a light module of the package (:mod:`~rag_experiments.index.
bm25_params`, read by the config schema) loads without the index code."""
