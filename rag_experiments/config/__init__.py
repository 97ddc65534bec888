"""Typed configuration schemas (Hydra structured configs)."""

from rag_experiments.config.schema import register_configs

__all__ = ["register_configs"]
