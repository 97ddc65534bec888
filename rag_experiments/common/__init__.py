"""Pieces shared by every layer, importing nothing else of the package but
:mod:`rag_experiments.errors`: HTTP with retries (:mod:`~rag_experiments.common.http`), secret
redaction (:mod:`~rag_experiments.common.redact`), the append-only JSONL log
(:mod:`~rag_experiments.common.appendlog`), the SQLite store of the caches
(:mod:`~rag_experiments.common.sqlite_store`), the loopback WSGI server
(:mod:`~rag_experiments.common.wsgi_server`) and progress bars
(:mod:`~rag_experiments.common.progress`)."""
