"""Fake model servers on 127.0.0.1 for tests and benchmarks: an Ollama server (chat and
embeddings) and an OpenAI-compatible one. They sit above :mod:`rag_experiments.llm` and
:mod:`rag_experiments.embedding` (the Ollama fake answers ``/api/embed`` with the hashing-trick
embedder), so neither model package imports the other's fakes."""
