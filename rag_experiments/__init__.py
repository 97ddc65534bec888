"""rag-experiments: an on-premises experiment harness for evaluating RAG systems with local
models, configured with Hydra and tracked in MLflow."""

from rag_experiments.offline import enforce_offline

enforce_offline()

__version__ = "0.1.0"
