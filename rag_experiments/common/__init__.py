"""Pieces shared by every layer, importing nothing else of the package but
:mod:`rag_experiments.errors`: HTTP with retries (:mod:`~rag_experiments.common.http`), secret
redaction (:mod:`~rag_experiments.common.redact`) and the append-only JSONL log
(:mod:`~rag_experiments.common.appendlog`)."""
