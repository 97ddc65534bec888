"""rag-experiments' Hydra plugins (Hydra loads plugins only from the ``hydra_plugins``
namespace package)."""
