"""Chat-model roles in the config: the judge's node without its role keys (what the model is
built from), and the judge ≠ generator check (a model grading its own answers is biased toward
them). Used by the composition root (:mod:`rag_experiments.build`)."""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rag_experiments.errors import ConfigError

log = logging.getLogger(__name__)

JUDGE_ONLY_KEYS = (
    "require_distinct",
    "min_kappa",
    "require_qualified",
    "repeats",
    "vary",
    "vary_temperature",
)
"""Keys of a ``judge`` config node that configure the judge role, not the chat model."""

IDENTITY_KEYS = ("model_path", "model", "base_url")
"""Config keys that, with ``_target_``, identify a chat model (judge ≠ generator check)."""


def judge_model_node(node: Any) -> dict[str, Any]:
    """The judge config node without its role keys (:data:`JUDGE_ONLY_KEYS`): what the chat
    model is instantiated from.

    Args:
        node: The ``judge`` config node (DictConfig or mapping).

    Returns:
        A plain dict with ``_target_``, the model's arguments and ``_convert_: all`` (nested
        values such as a fake judge's scripted responses arrive as plain dicts and lists).
    """
    if isinstance(node, DictConfig):
        data = OmegaConf.to_container(node, resolve=True)
    else:
        data = dict(node)
    out = {k: v for k, v in data.items() if k not in JUDGE_ONLY_KEYS}
    out.setdefault("_convert_", "all")
    return out


def model_identity(node: Any) -> tuple[Any, ...]:
    """``(_target_, model_path, model, base_url)`` of a chat-model config node (absent keys are
    None): two nodes with equal identities describe the same model."""
    data = judge_model_node(node)
    return (data.get("_target_"), *(data.get(k) for k in IDENTITY_KEYS))


def check_judge_distinct(llm_node: Any, judge_node: Any) -> bool:
    """Warn when the judge is the generator's model; refuse with ``require_distinct``.

    A model grading its own answers is biased toward them. Two nodes describe the same model
    when their ``_target_``, ``model_path``, ``model`` and ``base_url`` are all equal (so the
    default embedded generator and embedded judge are the same model).

    Args:
        llm_node: The ``llm`` (generator) config node.
        judge_node: The ``judge`` config node (``require_distinct`` read from it).

    Returns:
        True when they describe the same model (after warning).

    Raises:
        ConfigError: Same model and ``judge.require_distinct=true``.
    """
    same = model_identity(llm_node) == model_identity(judge_node)
    if not same:
        return False
    target, *rest = model_identity(judge_node)
    named = [v for v in rest if v is not None] or "(default model)"
    what = f"{str(target).rsplit('.', 1)[-1]} {named}"
    require = bool(judge_node.get("require_distinct", False))
    if require:
        raise ConfigError(
            f"the judge is the generator's model ({what}) and judge.require_distinct=true: "
            "choose another judge (judge=<option>, judge.model=…) or set "
            "judge.require_distinct=false"
        )
    log.warning(
        "The judge is the generator's model (%s): it grades its own answers, which biases the "
        "LLM-judged metrics. Choose another judge model, or set judge.require_distinct=true to "
        "refuse such runs.",
        what,
    )
    return True
