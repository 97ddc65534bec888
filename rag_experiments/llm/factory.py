"""Build chat models from config nodes, one place for every role (generator, judge, dataset
generator), so each role's model gets the same wrapping (cache, usage counting).

For now this only instantiates; the local-model layer adds the response cache and per-role
usage counters here.
"""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate

from rag_experiments.llm.base import ChatModel


def build_chat(node: Any, role: str, **_: Any) -> ChatModel:
    """Instantiate the chat model of ``node`` (a config node with ``_target_``) for ``role``."""
    return instantiate(node)


def usage_by_role() -> dict[str, float]:
    """Per-role usage metrics of the models built so far (empty until counting exists)."""
    return {}
