"""The generation job of ``rag-exp generate`` (its Hydra entry is
:mod:`rag_experiments.commands.generate`) and of the review app: from a composed
``conf/generate.yaml``, build the parts, generate, print the summary and log it to MLflow
(experiment ``datasets``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rag_experiments.build import build_generation, build_tracker, model_session, run_caveat
from rag_experiments.config import register
from rag_experiments.data.base import samples_digest
from rag_experiments.errors import ConfigError
from rag_experiments.generate.checkpoint import Checkpoint
from rag_experiments.generate.config import register_generate_config
from rag_experiments.generate.docs import load_docs
from rag_experiments.generate.generator import (
    DatasetGenerator,
    GenerationProgress,
    GenerationSettings,
    types_from_config,
)
from rag_experiments.generate.summary import GenerationSummary
from rag_experiments.generate.template import TemplateSettings, generate_from_template
from rag_experiments.llm.factory import ModelSession

log = logging.getLogger("rag_experiments")

register()  # the shared schemas and resolvers
register_generate_config()

MODES = ("llm", "template")


class GenerationInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a generation after its summary was printed and logged."""


def _docs_value(cfg: DictConfig) -> str | list[str]:
    """``docs`` as a path string or a list of path strings."""
    docs = cfg.docs
    if isinstance(docs, ListConfig):
        return [str(d) for d in docs]
    return str(docs)


def settings_from_config(cfg: DictConfig) -> GenerationSettings:
    """The :class:`GenerationSettings` of a composed ``generate`` config."""
    return GenerationSettings(
        n=int(cfg.n),
        types=types_from_config(list(cfg.types) if cfg.types is not None else None),
        attempt_factor=float(cfg.attempt_factor),
        n_unanswerable=int(cfg.n_unanswerable),
        dedup_threshold=float(cfg.dedup_threshold),
        max_concurrency=int(cfg.max_concurrency),
        min_chunk_words=int(cfg.min_chunk_words),
        retrieval_top_k=int(cfg.retrieval_top_k),
    )


def generate_dataset(
    cfg: DictConfig,
    *,
    on_progress: Callable[[GenerationProgress], None] | None = None,
    cancel: threading.Event | None = None,
    session: ModelSession | None = None,
) -> GenerationSummary:
    """Generate the dataset a composed ``generate`` config describes (no MLflow).

    Args:
        cfg: The composed ``generate`` config.
        on_progress: LLM mode: progress callback (see :meth:`DatasetGenerator.run`).
        cancel: LLM mode: an event that stops the generation like Ctrl-C.
        session: LLM mode: the models' response cache and usage meters (default: a new one
            from the config, :func:`~rag_experiments.build.model_session`).

    Raises:
        ConfigError: Unknown mode or bad settings.
        DatasetError: Unusable input or output folder.
    """
    out = Path(str(cfg.out)).expanduser()
    mode = str(cfg.mode)
    if mode not in MODES:
        raise ConfigError(f"mode={mode!r} is not one of {', '.join(MODES)}")
    if mode == "template":
        template = cfg.template
        settings = TemplateSettings(
            key_column=str(template.key_column or ""),
            questions=dict(template.questions),
            types=dict(template.types),
            default_type=str(template.default_type),
            n=int(cfg.n),
            seed=int(cfg.seed),
        )
        return generate_from_template(_docs_value(cfg), out, settings)

    session = session if session is not None else model_session(cfg)
    settings = settings_from_config(cfg)
    # stage lines: the review page shows the latest while nothing is generated yet
    log.info("Loading the models (question writer %s)", str(cfg.llm._target_).rsplit(".", 1)[-1])
    parts = build_generation(cfg, with_judge=bool(settings.n_unanswerable), session=session)
    log.info("Reading the documents (%s)", _docs_value(cfg))
    source = load_docs(_docs_value(cfg), password=cfg.docs_password)
    generator = DatasetGenerator(
        parts.chat,
        embedder=parts.embedder,
        chunker=parts.chunker,
        judge=parts.judge,
        settings=settings,
        progress=bool(cfg.progress),
    )
    return generator.run(
        source, out, overwrite=bool(cfg.overwrite), on_progress=on_progress, cancel=cancel
    )


def run_generate(
    cfg: DictConfig,
    *,
    tracker: Any = None,
    on_progress: Callable[[GenerationProgress], None] | None = None,
    cancel: threading.Event | None = None,
) -> GenerationSummary:
    """Generate inside an MLflow run of experiment ``tracking.experiment`` (``datasets``):
    params = the config, metrics = the summary counts, artifacts = ``eval.jsonl`` (and
    ``corpus.jsonl`` in template mode), ``summary.json``, ``skipped_files.json``.

    The run opens first, so an error anywhere ends as a FAILED run with its error.

    Args:
        cfg: The composed ``generate`` config.
        tracker: The tracker to log with (None = ``cfg.tracking`` named after the run); after
            the call its ``experiment_id`` and ``run_id`` name the MLflow run.
        on_progress: Progress callback (see :meth:`DatasetGenerator.run`).
        cancel: An event that stops the generation like Ctrl-C (then
            :class:`GenerationInterrupted` is raised, after the summary is logged).

    Returns:
        The summary (also printed).

    Raises:
        GenerationInterrupted: Ctrl-C stopped the generation (the run ends KILLED after the
            summary is logged; the pairs accepted so far are saved).
        RagExpError: Any error, after it was recorded on the run.
    """
    if OmegaConf.is_missing(cfg, "out") or not str(cfg.out).strip():
        raise ConfigError("out is required: rag-exp generate docs=<folder> out=datasets/<name>")
    if OmegaConf.is_missing(cfg, "docs"):
        raise ConfigError("docs is required: rag-exp generate docs=<folder or [files]> out=…")
    out = Path(str(cfg.out)).expanduser()
    name = cfg.run_name or out.name or "dataset"
    caveat = run_caveat({"dataset_generator": cfg.llm}) if cfg.mode == "llm" else ""
    tags = {"generate.mode": str(cfg.mode), "generate.out": str(out)}
    if caveat:
        tags["mlflow.note.content"] = caveat
    if tracker is None:
        tracker = build_tracker(cfg, run_name=name)
    session: ModelSession | None = None
    with tracker.start_run(
        params=OmegaConf.to_container(cfg, resolve=True),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        tags=tags,
    ):
        try:
            if cfg.mode == "llm":  # the response cache and fresh usage meters
                session = model_session(cfg)
            summary = generate_dataset(cfg, on_progress=on_progress, cancel=cancel, session=session)
        finally:
            if session is not None:
                tracker.set_tags(session.identity_by_role())
                tracker.log_metrics(session.usage_by_role())
        _log_summary(tracker, summary, name)
        print(summary.format())
        print(tracker.describe_location())
        if caveat:
            print(f"NOTE: {caveat}")
        if summary.interrupted:
            raise GenerationInterrupted
    return summary


def _log_summary(tracker: Any, summary: GenerationSummary, name: str) -> None:
    """Metrics, the dataset as artifact and MLflow input, and the summary files."""
    tracker.log_metrics(summary.metrics())
    tracker.log_dict(summary.to_dict(), "summary.json")
    tracker.log_dict(summary.skipped_files, "skipped_files.json")
    tracker.set_tags(
        {
            "generate.interrupted": str(summary.interrupted).lower(),
            "generate.corpus": summary.corpus,
        }
    )
    eval_path = Path(summary.eval_path)
    if not eval_path.is_file():
        return
    tracker.log_text(eval_path.read_text(encoding="utf-8"), "dataset/eval.jsonl")
    if summary.mode == "template":
        corpus = Path(summary.corpus)
        tracker.log_text(corpus.read_text(encoding="utf-8"), "dataset/corpus.jsonl")
    samples = Checkpoint(eval_path.parent).samples()
    if samples:
        tracker.log_dataset(
            name,
            samples_digest(samples),
            str(eval_path.resolve()),
            [s.model_dump(mode="json") for s in samples],
        )
