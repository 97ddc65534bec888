"""Generate an evaluation dataset from documents with a local LLM, resumably.

The flow of :meth:`DatasetGenerator.run`:

1. **Chunk** every document with the configured chunker (the semantic chunker by default);
   chunks with fewer than ``min_chunk_words`` words cannot back a 12-word answer and are not
   asked about (they stay in the corpus).
2. **Schedule** ``ceil(attempt_factor * n)`` attempts over the chunks and question types
   (:mod:`~rag_experiments.generate.schedule`). A ``multi_hop`` attempt pairs its chunk with
   the most similar other chunk (embedding cosine).
3. **Generate** in waves of ``max_concurrency`` parallel calls
   (:func:`~rag_experiments.llm.batch.complete_many`); results are handled in schedule order, so
   a run is reproducible with a deterministic model.
4. **Filter** each pair (:mod:`~rag_experiments.generate.filters`), then **deduplicate** it
   against the accepted ones (:mod:`~rag_experiments.generate.dedup`).
5. **Checkpoint**: an accepted pair is appended to ``eval.jsonl`` at once, and every finished
   attempt to ``attempts.jsonl`` (:mod:`~rag_experiments.generate.checkpoint`); a rerun skips
   finished attempts and continues, so Ctrl-C loses nothing.
6. Each type may fill at most ``ceil(n / len(types))`` pairs in a first pass over the schedule
   (balance); when that leaves fewer than ``n`` pairs, the attempts held back by the cap are
   made in a second pass, without it.
7. **Unanswerable** questions: ``ceil(attempt_factor * n_unanswerable)`` attempts ask for a
   question on a chunk's topic that the chunk does not answer; after the filters, the
   ``retrieval_top_k`` chunks of the whole corpus most similar to the question (embedding
   cosine) go to the judge, and the question is rejected (``answered_by_corpus``) when the
   judge says they answer it.

Hooks for a caller that is not a terminal (the review web app): ``run(on_progress=…)`` is called
with a :class:`GenerationProgress` snapshot at the start and after every finished attempt, and
``run(cancel=…)``, a :class:`threading.Event`, stops the run before the next wave of calls,
exactly as Ctrl-C does (``summary.interrupted``; everything accepted is on disk).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel
from tqdm.auto import tqdm

from rag_experiments.data.base import corpus_digest
from rag_experiments.errors import ConfigError, LLMError, RagExpError
from rag_experiments.generate.checkpoint import Checkpoint, CheckpointState
from rag_experiments.generate.dedup import Deduplicator
from rag_experiments.generate.docs import SourceDocs
from rag_experiments.generate.filters import QA_FILTERS, UNANSWERABLE_FILTERS, first_rejection
from rag_experiments.generate.prompts import (
    PROMPT_VERSION,
    QAPair,
    UnanswerableQuestion,
    qa_messages,
    unanswerable_messages,
)
from rag_experiments.generate.schedule import schedule_slots
from rag_experiments.generate.summary import GenerationSummary
from rag_experiments.generate.unanswerable import AnswerabilityCheck
from rag_experiments.llm.base import ChatModel, Completion
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.parsing import LLMParseError
from rag_experiments.protocols import Chunker, Embedder
from rag_experiments.records import QUESTION_TYPES, Chunk, Sample

log = logging.getLogger(__name__)

RESUME_KEYS: tuple[str, ...] = (
    "mode",
    "corpus_digest",
    "chunker",
    "embedder",
    "prompt_version",
    "generator",
)
"""Manifest keys that must match for a run to resume an output folder."""


@dataclass(frozen=True)
class GenerationSettings:
    """What to generate (the typed ``generate`` config of ``conf/generate.yaml``).

    Attributes:
        n: Answerable pairs wanted.
        types: Question types to use (a subset of
            :data:`~rag_experiments.records.QUESTION_TYPES`).
        attempt_factor: Attempts per wanted pair (the attempt buffer), >= 1.
        n_unanswerable: Unanswerable questions wanted (0 = none; needs a judge).
        dedup_threshold: Embedding cosine at or above which two questions are duplicates.
        max_concurrency: Model calls in flight at once (the embedded model serialises them).
        min_chunk_words: Chunks with fewer words are not asked about.
        retrieval_top_k: Chunks the judge sees when checking an unanswerable question.
    """

    n: int = 40
    types: tuple[str, ...] = QUESTION_TYPES
    attempt_factor: float = 2.0
    n_unanswerable: int = 4
    dedup_threshold: float = 0.95
    max_concurrency: int = 4
    min_chunk_words: int = 25
    retrieval_top_k: int = 3

    def check(self) -> None:
        """Raise :class:`ConfigError` for a value out of range (message names the key)."""
        problems = []
        if self.n < 0:
            problems.append(f"n must be >= 0, got {self.n}")
        if self.n_unanswerable < 0:
            problems.append(f"n_unanswerable must be >= 0, got {self.n_unanswerable}")
        if self.attempt_factor < 1:
            problems.append(f"attempt_factor must be >= 1, got {self.attempt_factor}")
        if self.max_concurrency < 1:
            problems.append(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.retrieval_top_k < 1:
            problems.append(f"retrieval_top_k must be >= 1, got {self.retrieval_top_k}")
        if not 0 < self.dedup_threshold <= 1:
            problems.append(f"dedup_threshold must be in (0, 1], got {self.dedup_threshold}")
        unknown = [t for t in self.types if t not in QUESTION_TYPES]
        if unknown or not self.types or len(set(self.types)) != len(self.types):
            problems.append(
                f"types must be distinct names from {', '.join(QUESTION_TYPES)}; got "
                f"{list(self.types)}"
            )
        if problems:
            raise ConfigError("generate config: " + "; ".join(problems))


@dataclass(frozen=True)
class GenerationProgress:
    """A snapshot of a running generation, passed to ``DatasetGenerator.run(on_progress=…)``.

    Counts cover everything in the output folder (a resumed run starts from what it holds).

    Attributes:
        phase: ``answerable`` (question–answer pairs) or ``unanswerable``.
        accepted: Accepted answerable pairs per question type.
        unanswerable: Accepted unanswerable questions per question type.
        rejected: Rejected attempts per question type (filters and duplicates, both kinds).
        errors: Attempts that failed on a model error (they are tried again on a rerun).
        remaining: Scheduled attempts per question type not made yet (both kinds); the run
            stops before using them all once the wanted counts are reached.
        n_wanted: Answerable pairs wanted (``settings.n``).
        n_unanswerable_wanted: Unanswerable questions wanted.
        attempts_done: Finished attempts (accepted or rejected).
        attempts_planned: Attempts scheduled in all (both kinds).
        rejected_by_reason: Rejected attempts per reason (the filter, ``duplicate`` …), the
            same counts the terminal log shows one by one.
    """

    phase: str
    accepted: dict[str, int]
    unanswerable: dict[str, int]
    rejected: dict[str, int]
    errors: int
    remaining: dict[str, int]
    n_wanted: int
    n_unanswerable_wanted: int
    attempts_done: int
    attempts_planned: int
    rejected_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def n_accepted(self) -> int:
        """Accepted answerable pairs."""
        return sum(self.accepted.values())


class _Cancelled(RagExpError):
    """The caller set the ``cancel`` event; caught in :meth:`DatasetGenerator.run`, which
    stops as on Ctrl-C (it never reaches the caller)."""


@dataclass(frozen=True)
class _Task:
    """One planned attempt: ``kind`` is ``qa`` or ``unanswerable``; ``chunks`` are the
    passages (two for multi_hop) or, for unanswerable, the topic chunk."""

    key: str
    kind: str
    question_type: str
    chunks: tuple[Chunk, ...]


@dataclass
class _Outcome:
    """What an attempt produced: a candidate pair, a rejection, or a model error."""

    pair: dict[str, Any] | None = None
    reason: str | None = None
    detail: str = ""
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Run:
    """Mutable state of one :meth:`DatasetGenerator.run`."""

    checkpoint: Checkpoint
    state: CheckpointState
    dedup: Deduplicator
    source: SourceDocs
    bar: Any
    generator_id: str
    judge_id: str = ""
    check: AnswerabilityCheck | None = None
    tasks: list[_Task] = field(default_factory=list)
    on_progress: Callable[[GenerationProgress], None] | None = None
    cancel: threading.Event | None = None

    def count(self, answerable: bool, kind: str | None = None) -> int:
        """Accepted samples, answerable or not, of type ``kind`` (None = every type)."""
        by_type = self.state.samples_by_type(answerable)
        return sum(by_type.values()) if kind is None else by_type.get(kind, 0)


class DatasetGenerator:
    """Builds an evaluation dataset from documents with a chat model.

    Args:
        chat: The question writer (the ``llm`` node's model, role ``dataset_generator``).
        embedder: Embeds chunks and questions (multi_hop partners, near-duplicates, the
            unanswerable check).
        chunker: Splits documents into chunks.
        judge: Checks unanswerable questions; required when ``n_unanswerable > 0``.
        settings: What to generate.
        progress: Show a progress bar.

    Raises:
        ConfigError: Bad settings, or unanswerable questions wanted without a judge.
    """

    def __init__(
        self,
        chat: ChatModel,
        *,
        embedder: Embedder,
        chunker: Chunker,
        judge: ChatModel | None = None,
        settings: GenerationSettings | None = None,
        progress: bool = True,
    ) -> None:
        self.chat = chat
        self.embedder = embedder
        self.chunker = chunker
        self.judge = judge
        self.settings = settings or GenerationSettings()
        self.settings.check()
        if self.settings.n_unanswerable and judge is None:
            raise ConfigError(
                "n_unanswerable > 0 needs a judge model; pass judge=… or set n_unanswerable=0"
            )
        self.progress = progress

    # --- the run -----------------------------------------------------------------------------

    def run(
        self,
        source: SourceDocs,
        out: Path,
        *,
        overwrite: bool = False,
        on_progress: Callable[[GenerationProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationSummary:
        """Generate into folder ``out`` (resuming what it holds), then summarise.

        Ctrl-C (or setting ``cancel``) stops the run after the calls in flight; everything
        accepted so far is on disk, and the returned summary has ``interrupted=True``.

        Args:
            source: The documents (see :func:`~rag_experiments.generate.docs.load_docs`).
            out: Output folder (``eval.jsonl``, ``attempts.jsonl``, ``manifest.json``).
            overwrite: Delete earlier output in ``out`` first instead of resuming it.
            on_progress: Called (in this thread, holding no lock) with a
                :class:`GenerationProgress` once before the first call and after every
                finished attempt.
            cancel: When set, the run stops before its next wave of model calls.

        Returns:
            The summary (counts over everything in ``out``, this run and earlier ones).

        Raises:
            ConfigError: ``out`` holds a run with other settings (see :data:`RESUME_KEYS`).
            DatasetError: ``out`` holds unreadable checkpoint lines.
        """
        started = time.perf_counter()
        settings = self.settings
        chunks = [chunk for doc in source.documents for chunk in self.chunker.split(doc)]
        eligible = [c for c in chunks if len(c.text.split()) >= settings.min_chunk_words]
        log.info(
            "%d documents -> %d chunks (%d long enough to ask about); planning the attempts",
            len(source.documents),
            len(chunks),
            len(eligible),
        )
        types = list(settings.types)
        if len(eligible) < 2 and "multi_hop" in types:
            log.warning(
                "multi_hop needs two chunks; only %d chunk(s) can be asked about", len(eligible)
            )
            types.remove("multi_hop")

        checkpoint = Checkpoint(out)
        if overwrite:
            checkpoint.reset()
        manifest = self._manifest(source)
        checkpoint.check_resumable(manifest, RESUME_KEYS)
        checkpoint.write_manifest(manifest)
        state = checkpoint.load()
        n_resumed = len(state.samples)
        if n_resumed:
            log.info(
                "Resuming %s: %d samples and %d finished attempts found",
                out,
                n_resumed,
                sum(state.done(k) for k in state.attempts),
            )

        need_vectors = bool(settings.n_unanswerable) or "multi_hop" in types
        vectors = self._embed_chunks(chunks) if need_vectors and eligible else None
        qa_tasks = self._qa_tasks(chunks, eligible, types, vectors)
        un_types = [t for t in types if t != "multi_hop"] or list(types)
        un_tasks = self._unanswerable_tasks(eligible, un_types)

        dedup = Deduplicator(self.embedder, settings.dedup_threshold)
        dedup.add_many([(s.user_input, s.id) for s in state.samples])
        todo = sum(not state.done(t.key) for t in qa_tasks + un_tasks)
        run = _Run(
            checkpoint,
            state,
            dedup,
            source,
            tqdm(total=todo, desc="generate", unit="attempt", disable=not self.progress),
            generator_id=str(self.chat.describe().get("model", "")),
            judge_id=str(self.judge.describe().get("model", "")) if self.judge else "",
            check=AnswerabilityCheck(
                self.judge,
                self.embedder,
                chunks,
                vectors,
                settings.retrieval_top_k,
                settings.max_concurrency,
            )
            if self.judge is not None and vectors is not None
            else None,
            tasks=qa_tasks + un_tasks,
            on_progress=on_progress,
            cancel=cancel,
        )
        interrupted = False
        try:
            self._report(run, "answerable")
            self._phase(run, qa_tasks, settings.n, types, answerable=True, attempt=self._attempt_qa)
            self._phase(
                run,
                un_tasks,
                settings.n_unanswerable,
                un_types,
                answerable=False,
                attempt=self._attempt_unanswerable,
            )
        except (KeyboardInterrupt, _Cancelled) as exc:
            interrupted = True
            log.warning(
                "%s: %d samples are saved in %s; run the same command again to resume",
                "Cancelled" if isinstance(exc, _Cancelled) else "Interrupted",
                len(state.samples),
                checkpoint.eval_path,
            )
        finally:
            run.bar.close()

        return self._summary(
            run,
            chunks,
            eligible,
            len(qa_tasks) + len(un_tasks),
            n_resumed,
            time.perf_counter() - started,
            interrupted,
        )

    def _manifest(self, source: SourceDocs) -> dict[str, Any]:
        """What the output is generated from; :data:`RESUME_KEYS` must match on resume."""
        return {
            "format_version": 1,
            "mode": "llm",
            "corpus": str(source.root),
            "corpus_digest": corpus_digest(source.documents),
            "chunker": self.chunker.config_id,
            "embedder": self.embedder.id,
            "prompt_version": PROMPT_VERSION,
            "generator": self.chat.describe(),
            "judge": self.judge.describe() if self.judge else None,
            "settings": {**asdict(self.settings), "types": list(self.settings.types)},
            "skipped_files": dict(source.skipped),
        }

    # --- planning ----------------------------------------------------------------------------

    def _embed_chunks(self, chunks: list[Chunk]) -> np.ndarray:
        """L2-normalised vectors of every chunk, shape ``(len(chunks), dim)``."""
        log.info("Embedding %d chunks with %s", len(chunks), self.embedder.id)
        return np.asarray(self.embedder.embed_documents([c.text for c in chunks]), dtype=np.float32)

    def _qa_tasks(
        self,
        chunks: list[Chunk],
        eligible: list[Chunk],
        types: list[str],
        vectors: np.ndarray | None,
    ) -> list[_Task]:
        """The answerable attempts in schedule order (multi_hop paired with its nearest chunk)."""
        n_slots = math.ceil(self.settings.attempt_factor * self.settings.n)
        row = {c.id: i for i, c in enumerate(chunks)}
        eligible_rows = np.array([row[c.id] for c in eligible], dtype=np.int64)
        tasks = []
        for slot in schedule_slots(len(eligible), n_slots, types):
            chunk = eligible[slot.chunk_index]
            if slot.question_type == "multi_hop" and vectors is not None:
                partner = self._partner(chunk, eligible, eligible_rows, vectors, row)
                key = f"qa:multi_hop:{chunk.id}+{partner.id}"
                tasks.append(_Task(key, "qa", "multi_hop", (chunk, partner)))
            else:
                key = f"qa:{slot.question_type}:{chunk.id}"
                tasks.append(_Task(key, "qa", slot.question_type, (chunk,)))
        return tasks

    @staticmethod
    def _partner(
        chunk: Chunk,
        eligible: list[Chunk],
        eligible_rows: np.ndarray,
        vectors: np.ndarray,
        row: dict[str, int],
    ) -> Chunk:
        """The eligible chunk most similar to ``chunk`` (cosine), other than itself and
        chunks with the same text; ties go to the earlier chunk."""
        similarities = vectors[eligible_rows] @ vectors[row[chunk.id]]
        for i, other in enumerate(eligible):
            if other.id == chunk.id or other.text == chunk.text:
                similarities[i] = -np.inf
        return eligible[int(np.argmax(similarities))]

    def _unanswerable_tasks(self, eligible: list[Chunk], types: list[str]) -> list[_Task]:
        """Unanswerable attempts; topic chunks are scheduled from the end of the chunk list,
        so they differ from the answerable attempts' first chunks."""
        n_slots = math.ceil(self.settings.attempt_factor * self.settings.n_unanswerable)
        backwards = eligible[::-1]
        return [
            _Task(
                f"unanswerable:{slot.question_type}:{backwards[slot.chunk_index].id}",
                "unanswerable",
                slot.question_type,
                (backwards[slot.chunk_index],),
            )
            for slot in schedule_slots(len(backwards), n_slots, types)
        ]

    # --- execution ---------------------------------------------------------------------------

    def _phase(
        self,
        run: _Run,
        tasks: list[_Task],
        target: int,
        types: list[str],
        *,
        answerable: bool,
        attempt: Callable[[_Run, list[_Task]], list[_Outcome]],
    ) -> None:
        """Make attempts in waves until ``target`` samples of this kind are accepted.

        First pass: a type that holds ``ceil(target / len(types))`` samples takes no more
        (its attempts are held back); second pass: the held-back attempts, without the cap.
        """
        if target <= 0 or not tasks:
            return
        cap = math.ceil(target / len(types))
        held_back: list[_Task] = []
        for capped, queue in ((True, tasks), (False, held_back)):
            position = 0
            while run.count(answerable) < target and position < len(queue):
                wave: list[_Task] = []
                planned: Counter[str] = Counter()
                while position < len(queue) and len(wave) < self.settings.max_concurrency:
                    task = queue[position]
                    position += 1
                    if run.state.done(task.key):
                        continue
                    kind = task.question_type
                    if capped and run.count(answerable, kind) + planned[kind] >= cap:
                        held_back.append(task)
                        continue
                    planned[kind] += 1
                    wave.append(task)
                if not wave:
                    continue
                if run.cancel is not None and run.cancel.is_set():
                    raise _Cancelled
                for task, outcome in zip(wave, attempt(run, wave), strict=True):
                    if run.count(answerable) >= target:
                        break
                    self._record(run, task, outcome)
                    run.bar.update(1)
                    self._report(run, "answerable" if answerable else "unanswerable")
                run.bar.set_postfix(accepted=run.count(True), unanswerable=run.count(False))

    def _report(self, run: _Run, phase: str) -> None:
        """Call ``run.on_progress`` with a fresh :class:`GenerationProgress` (no-op without)."""
        if run.on_progress is None:
            return
        state = run.state
        remaining: Counter[str] = Counter(
            t.question_type for t in run.tasks if not state.done(t.key)
        )
        run.on_progress(
            GenerationProgress(
                phase=phase,
                accepted=state.samples_by_type(answerable=True),
                unanswerable=state.samples_by_type(answerable=False),
                rejected=state.attempts_by("rejected", key="question_type"),
                errors=sum(state.attempts_by("error").values()),
                remaining=dict(remaining),
                n_wanted=self.settings.n,
                n_unanswerable_wanted=self.settings.n_unanswerable,
                attempts_done=sum(state.done(k) for k in state.attempts),
                attempts_planned=len(run.tasks),
                rejected_by_reason=state.attempts_by("rejected"),
            )
        )

    def _requests(
        self, chat: ChatModel, requests: list[ChatRequest]
    ) -> list[Completion | LLMError]:
        """Run ``requests`` on ``chat`` in parallel (results in request order)."""
        return complete_many(
            chat, requests, max_concurrency=self.settings.max_concurrency, progress=False
        )

    def _attempt_qa(self, run: _Run, wave: list[_Task]) -> list[_Outcome]:
        """Ask for one pair per task and run the filters."""
        requests = [
            ChatRequest(qa_messages(t.question_type, [c.text for c in t.chunks]), QAPair)
            for t in wave
        ]
        outcomes = []
        for task, result in zip(wave, self._requests(self.chat, requests), strict=True):
            parsed, failed = _parsed(result)
            if failed is not None:
                outcomes.append(failed)
                continue
            pair = {
                "question": _clean(parsed.question) if isinstance(parsed, QAPair) else "",
                "answer": _clean(parsed.answer) if isinstance(parsed, QAPair) else "",
                "question_type": task.question_type,
                "answerable": True,
                "contexts": [c.text for c in task.chunks],
            }
            rejection = first_rejection(pair, QA_FILTERS)
            outcomes.append(_Outcome(pair, *(rejection or (None, ""))))
        return outcomes

    def _attempt_unanswerable(self, run: _Run, wave: list[_Task]) -> list[_Outcome]:
        """Ask for one unanswerable question per task, filter it, retrieve the chunks most
        similar to it and reject it when the judge says they answer it."""
        requests = [
            ChatRequest(
                unanswerable_messages(t.question_type, t.chunks[0].text), UnanswerableQuestion
            )
            for t in wave
        ]
        outcomes: list[_Outcome] = []
        to_judge: list[int] = []
        for task, result in zip(wave, self._requests(self.chat, requests), strict=True):
            parsed, failed = _parsed(result)
            if failed is not None:
                outcomes.append(failed)
                continue
            question = _clean(parsed.question) if isinstance(parsed, UnanswerableQuestion) else ""
            pair = {
                "question": question,
                "answer": "",
                "question_type": task.question_type,
                "answerable": False,
            }
            rejection = first_rejection(pair, UNANSWERABLE_FILTERS)
            outcomes.append(_Outcome(pair, *(rejection or (None, ""))))
            if rejection is None:
                to_judge.append(len(outcomes) - 1)
        if not to_judge or run.check is None:
            return outcomes
        verdicts = run.check.check([str((outcomes[i].pair or {})["question"]) for i in to_judge])
        for i, verdict in zip(to_judge, verdicts, strict=True):
            outcome = outcomes[i]
            outcome.extra["checked_chunk_ids"] = [c.id for c in verdict.checked]
            outcome.error = verdict.error
            outcome.reason = verdict.reason
            outcome.detail = verdict.detail
        return outcomes

    # --- bookkeeping -------------------------------------------------------------------------

    def _record(self, run: _Run, task: _Task, outcome: _Outcome) -> None:
        """Checkpoint one attempt: dedup and accept a clean pair, or record the rejection."""
        record: dict[str, Any] = {
            "key": task.key,
            "kind": task.kind,
            "question_type": task.question_type,
            "chunk_ids": [c.id for c in task.chunks],
            "question": (outcome.pair or {}).get("question"),
            "answer": (outcome.pair or {}).get("answer") or None,
            **outcome.extra,
        }
        if outcome.error is not None:
            run.checkpoint.append_attempt(
                {**record, "status": "error", "reason": outcome.error, "detail": outcome.detail}
            )
            run.state.attempts[task.key] = {**record, "status": "error", "reason": outcome.error}
            return
        if outcome.reason is None and outcome.pair is not None:
            duplicate = run.dedup.check(str(outcome.pair["question"]))
            if duplicate is not None:
                outcome.reason, outcome.detail = duplicate
        if outcome.reason is not None:
            done = {
                **record,
                "status": "rejected",
                "reason": outcome.reason,
                "detail": outcome.detail,
            }
            run.checkpoint.append_attempt(done)
            run.state.attempts[task.key] = done
            return
        sample = self._sample(run, task, outcome)
        run.checkpoint.append_sample(sample)
        done = {**record, "status": "accepted", "reason": None, "sample_id": sample.id}
        run.checkpoint.append_attempt(done)
        run.state.samples.append(sample)
        run.state.attempts[task.key] = done
        run.dedup.add(sample.user_input, sample.id)
        log.info("Accepted %s (%s): %s", sample.id, task.question_type, sample.user_input)

    def _sample(self, run: _Run, task: _Task, outcome: _Outcome) -> Sample:
        """The sample of an accepted attempt, with its provenance in ``metadata``."""
        pair = outcome.pair or {}
        taken = {s.id for s in run.state.samples}
        number = len(run.state.samples) + 1
        while f"gen-{number:04d}" in taken:
            number += 1
        chunks = task.chunks
        metadata: dict[str, Any] = {
            "chunk_id": chunks[0].id,
            "page": chunks[0].metadata.get("page"),
            "source": _relative_source(chunks[0], run.source.root),
            "attempt": task.key,
            "generator": run.generator_id,
            "prompt_version": PROMPT_VERSION,
        }
        if len(chunks) > 1:
            metadata["chunk_ids"] = [c.id for c in chunks]
            metadata["pages"] = [c.metadata.get("page") for c in chunks]
            metadata["sources"] = [_relative_source(c, run.source.root) for c in chunks]
        if task.kind == "unanswerable":
            metadata = {
                "topic_chunk_id": chunks[0].id,
                "page": chunks[0].metadata.get("page"),
                "source": _relative_source(chunks[0], run.source.root),
                "checked_chunk_ids": outcome.extra.get("checked_chunk_ids", []),
                "attempt": task.key,
                "generator": run.generator_id,
                "judge": run.judge_id,
                "prompt_version": PROMPT_VERSION,
            }
            return Sample(
                id=f"gen-{number:04d}",
                user_input=str(pair["question"]),
                question_type=task.question_type,
                answerable=False,
                metadata=metadata,
            )
        return Sample(
            id=f"gen-{number:04d}",
            user_input=str(pair["question"]),
            reference=str(pair["answer"]),
            reference_doc_ids=list(dict.fromkeys(c.doc_id for c in chunks)),
            reference_contexts=[c.text for c in chunks],
            question_type=task.question_type,
            answerable=True,
            metadata=metadata,
        )

    def _summary(
        self,
        run: _Run,
        chunks: list[Chunk],
        eligible: list[Chunk],
        n_planned: int,
        n_resumed: int,
        wall_time_s: float,
        interrupted: bool,
    ) -> GenerationSummary:
        return GenerationSummary(
            mode="llm",
            eval_path=str(run.checkpoint.eval_path),
            corpus=str(run.source.root),
            n_requested=self.settings.n,
            n_unanswerable_requested=self.settings.n_unanswerable,
            accepted_by_type=run.state.samples_by_type(answerable=True),
            unanswerable_by_type=run.state.samples_by_type(answerable=False),
            rejects_by_filter=run.state.attempts_by("rejected"),
            errors_by_reason=run.state.attempts_by("error"),
            skipped_files=dict(run.source.skipped),
            n_documents=len(run.source.documents),
            n_chunks=len(chunks),
            n_eligible_chunks=len(eligible),
            n_planned=n_planned,
            n_attempts=sum(run.state.done(k) for k in run.state.attempts),
            n_resumed=n_resumed,
            wall_time_s=wall_time_s,
            interrupted=interrupted,
        )


def _clean(text: str) -> str:
    """Model text with every whitespace run (line breaks included) as one space, stripped."""
    return " ".join(text.split())


def _parsed(result: Completion | LLMError) -> tuple[BaseModel | None, _Outcome | None]:
    """The parsed reply of a call, or the outcome of a failed call.

    Unparseable output (see :func:`~rag_experiments.llm.parsing.parse_reply`: raw line breaks
    inside JSON strings are already accepted there) is a rejection (``unparseable_output``);
    other model errors are retried on the next run.
    """
    if isinstance(result, LLMParseError):
        return None, _Outcome(reason="unparseable_output", detail=str(result))
    if isinstance(result, LLMError):
        return None, _Outcome(error=result.reason, detail=str(result))
    return result.parsed, None


def _relative_source(chunk: Chunk, root: Path) -> str | None:
    """The chunk's source file relative to the corpus folder (as given when outside it)."""
    source = chunk.metadata.get("source")
    if not source:
        return None
    try:
        return Path(source).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(source)


def types_from_config(value: Sequence[str] | None) -> tuple[str, ...]:
    """The ``types`` setting as a tuple (``None`` or empty = all 8 types)."""
    return tuple(value) if value else QUESTION_TYPES
