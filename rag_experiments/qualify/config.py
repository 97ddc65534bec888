"""The typed schema of ``conf/judge_check.yaml`` (``rag-exp judge-check``), stored in Hydra's
ConfigStore as ``judge_check_schema``.

It reuses the ``paths``, ``judge``, ``embedder`` and ``tracking`` groups of ``rag-exp run``
(so ``judge=ollama judge.model=qwen2.5:7b`` means what it means there), adds ``n`` and
``seed`` at the top level and the check's settings under ``judge_check``. A misspelled key
fails when the config is composed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from rag_experiments.config.schema import CacheConf
from rag_experiments.qualify.check import PROBES

# NOTE: Optional[...] / List (not PEP 604 unions): OmegaConf reads these at runtime.


@dataclass
class JudgeCheckSettings:
    """``judge_check.*``: the labeled set and the verdict thresholds.

    ``data``: null = the bundled hand-written set, else a HaluEval QA ``.jsonl``, a
    FaithBench ``.csv``, a file in our pairs format (``format``: auto | pairs | halueval |
    faithbench), or the id of a run graded with ``rag-exp review --run`` in ``tracking.uri``
    (its rows with the people's faithfulness verdicts). ``threshold``: faithfulness score at
    or above which an answer is judged faithful (1.0 = every claim supported; see
    :mod:`rag_experiments.qualify.check`). ``relevancy_threshold``: the same for answer
    relevancy. ``log``: log to MLflow (experiment ``judges``)."""

    data: str | None = None
    format: str = "auto"
    probes: list[str] = field(default_factory=lambda: list(PROBES))
    threshold: float = 1.0
    relevancy_threshold: float = 0.5
    log: bool = True


@dataclass
class JudgeCheckConf:
    """Top level of ``conf/judge_check.yaml``. ``n``: labeled pairs drawn (half of each label,
    seeded); null = as many as the set has with both labels balanced."""

    paths: Any = MISSING
    judge: Any = MISSING
    embedder: Any = MISSING
    tracking: Any = MISSING
    verifier: Any = None
    """``verifier=local``/``tei``: the check qualifies that verifier (its probes only)."""
    n: int | None = None
    seed: int = 0
    judge_check: JudgeCheckSettings = field(default_factory=lambda: JudgeCheckSettings())
    cache: CacheConf = field(default_factory=lambda: CacheConf())


def register_judge_check_config() -> None:
    """Store :class:`JudgeCheckConf` as ``judge_check_schema`` (idempotent)."""
    ConfigStore.instance().store(name="judge_check_schema", node=JudgeCheckConf)
