"""The typed schema of ``conf/generate.yaml`` (``rag-exp generate``), stored in Hydra's
ConfigStore as ``generate_schema``.

It reuses the component groups of ``rag-exp run`` (``paths``, ``llm``, ``judge``, ``chunker``,
``embedder``, ``tracking``) and adds the generation keys at the top level, so the command
reads ``rag-exp generate docs=my_docs/ n=40 out=datasets/my_eval``. A misspelled key fails when
the config is composed (``Key 'nn' not in 'GenerateConf'``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from rag_experiments.config.schema import CacheConf
from rag_experiments.records import QUESTION_TYPES

# NOTE: Optional[...] / Dict / List (not PEP 604 unions): OmegaConf reads these annotations at
# runtime and must understand them on Python 3.10.


@dataclass
class TemplateConf:
    """Template mode (``mode=template``): CSV/JSONL rows → one question per column template.

    ``key_column`` names each row's subject; ``questions`` maps a column to a format string
    with ``{key}``, ``{column}`` and ``{<any column>}`` (empty = every other column with
    "What is the {column} of {key}?"); ``types`` maps a column to its question type.
    """

    key_column: str | None = None
    questions: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    default_type: str = "lookup"


@dataclass
class GenerateConf:
    """Top level of ``conf/generate.yaml``."""

    paths: Any = MISSING
    llm: Any = MISSING
    judge: Any = MISSING
    chunker: Any = MISSING
    embedder: Any = MISSING
    tracking: Any = MISSING
    docs: Any = MISSING
    out: str = MISSING
    n: int = 40
    mode: str = "llm"
    types: list[str] = field(default_factory=lambda: list(QUESTION_TYPES))
    attempt_factor: float = 2.0
    n_unanswerable: int = 4
    dedup_threshold: float = 0.95
    docs_password: str | None = None
    max_concurrency: int = 4
    min_chunk_words: int = 25
    retrieval_top_k: int = 3
    seed: int = 0
    overwrite: bool = False
    run_name: str | None = None
    progress: bool = True
    template: TemplateConf = field(default_factory=lambda: TemplateConf())
    cache: CacheConf = field(default_factory=lambda: CacheConf())


def register_generate_config() -> None:
    """Store :class:`GenerateConf` as ``generate_schema`` (idempotent)."""
    ConfigStore.instance().store(name="generate_schema", node=GenerateConf)
