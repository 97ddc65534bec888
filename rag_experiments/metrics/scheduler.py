"""Scoring LLM-judged metrics concurrently, row by row, as answers arrive.

A judged metric of either backend (:class:`JudgedRowMetric`: the custom metrics of
:mod:`~rag_experiments.metrics.judge`, the DeepEval ones of
:mod:`~rag_experiments.metrics.deepeval_backend`) scores one row at a time with
:meth:`~JudgedRowMetric.score_row`, which returns the row's values and its audit record and
changes no state. :class:`JudgeScheduler` runs those (row, metric) tasks on one thread pool per
judge model, sized by what the model declares (``judge.max_concurrency``: 1 for the embedded
model, the configured bound for a server), while the runner is still answering later
questions: it calls :meth:`JudgeScheduler.submit` for question ``i`` as soon as questions
``0..i`` are answered.

**Keeping a server full.** A server judge's pool is its ``max_concurrency``, which for a
server is ``in_flight`` (default twice its slots): requests wait in the server's queue, so a
slot that finishes starts the next request at once instead of idling while a worker turns its
call round (parses, builds the next prompt).

**Prefix-aware lanes.** A judge with ``slot_affinity`` (a compute-bound llama.cpp server)
gets one lane per slot instead: a row's metrics run one after another on one lane, contexts
metrics first, and its requests name the lane's slot (``id_slot``), so the prompt prefix they
share (system prompt, numbered contexts, question) is computed once per question rather than
once per metric on different slots. Fewer calls run at once, so this is for servers whose cost
is prompt computation, not for a GPU server with many slots.

**Results never depend on concurrency.** Values and audit records are stored by row index, so
the per-query table, ``judge_audit.jsonl`` and the cache keys (the same prompts) are the same
at any pool size; only the wall time changes. With one worker the calls happen in the order of
the former one-at-a-time loop: question by question, and within a question the metrics whose
prompt starts with the numbered contexts first (``shows_contexts``), so a llama.cpp judge
reuses the shared prompt prefix.

**Repeats.** With ``judge.repeats=N`` (:class:`~rag_experiments.metrics.repeats.
JudgeRepeats`) every (row, metric) is judged N times: N tasks on the same pools (the
concurrency bound is unchanged, the calls are N times as many), repeat ``r >= 1`` run with
the repeats' :class:`~rag_experiments.llm.base.RepeatScope` entered (its seed or temperature,
its cache key, read by the judge's response cache built with that scope) or on the permuted
contexts. Every repeat's values are stored by (row, repeat), and :meth:`JudgeScheduler.
finish` combines them in repeat order (:mod:`~rag_experiments.metrics.repeats`), so the mean,
the spread and the audit are the same at any pool size.

**Failures.** A row whose judge call fails is NaN with the judge's reason (inside
``score_row``). A metric that cannot work at all — it raises a
:class:`~rag_experiments.errors.RagExpError` that is not a model error, e.g. no judge given —
stops being scheduled and its result carries that error (the runner marks its columns
``metric_error``). Any other exception in one row is that row's NaN ``metric_error``: one bad
question never costs the other rows.
"""

from __future__ import annotations

import _thread
import itertools
import logging
import math
import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar

from rag_experiments.common.progress import Progress
from rag_experiments.errors import LLMError, RagExpError
from rag_experiments.llm.base import LANE, ChatModel
from rag_experiments.metrics.audit import USAGE_KEYS
from rag_experiments.metrics.repeats import JudgeRepeats, RepeatSummary, combine_audit, combine_row
from rag_experiments.protocols import MetricBase
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

log = logging.getLogger(__name__)


class JudgedRowMetric(MetricBase):
    """Base of metrics scored one row at a time by an LLM judge (both backends).

    A subclass sets :attr:`name`, may set :attr:`shows_contexts`, and implements
    :meth:`specs` and :meth:`score_row`. :meth:`evaluate` and :meth:`audit` come from here.

    Attributes:
        judge: The judge chat model (None: every row raises
            :class:`~rag_experiments.errors.ConfigError`).
    """

    name = "judged"
    requires: ClassVar[frozenset[str]] = frozenset({"judge"})
    per_row: ClassVar[bool] = True
    shows_contexts = False
    """True when the prompt starts with the numbered contexts (scheduled first in a row)."""
    judge: ChatModel | None = None
    _last_audit: Sequence[dict[str, Any]] = ()

    def specs(self) -> list[MetricSpec]:
        """The metric's (prefixed) columns."""
        raise NotImplementedError

    def score_row(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Score one row; called from worker threads, so it must not change the metric.

        Returns:
            ``({column: MetricValue}, audit record)``, every (prefixed) column present; the
            record holds the :data:`~rag_experiments.metrics.audit.USAGE_KEYS` counters.

        Raises:
            ConfigError: No judge was given.
        """
        raise NotImplementedError

    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]:
        """Score every row, ``judge.max_concurrency`` rows at once.

        Args:
            samples: The samples.
            responses: Their responses.

        Returns:
            One ``{column: MetricValue}`` per row; :meth:`audit` then has one record per row.

        Raises:
            RagExpError: The metric cannot work (e.g. ``ConfigError``: no judge).
        """
        (result,) = judge_rows([self], samples, responses, progress=False).values()
        if result.error is not None:
            raise result.error
        self._last_audit = result.audit
        return result.values

    def audit(self) -> list[dict[str, Any]]:
        """One audit record per row of the last :meth:`evaluate` (``[]`` before any)."""
        return list(self._last_audit)


@dataclass
class RowResults:
    """One metric's outcome over all rows.

    Attributes:
        values: One ``{column: MetricValue}`` per row.
        audit: One audit record per row.
        error: The error that stopped the metric (then ``values`` and ``audit`` are
            incomplete and must not be used), else None.
        repeats: With ``judge.repeats > 1``, each row's spread (``values`` then hold the
            means over the repeats, ``audit`` every repeat's record).
    """

    values: list[dict[str, MetricValue]]
    audit: list[dict[str, Any]]
    error: BaseException | None = None
    repeats: RepeatSummary | None = None
    """The spread between judge repeats (``judge.repeats > 1``), else None."""


class JudgeScheduler:
    """Runs judged metrics on rows submitted one by one (see the module docstring).

    Use as a context manager: leaving it on an exception (Ctrl-C) cancels what has not
    started.

    Args:
        metrics: The judged metrics.
        n_rows: Rows that will be submitted (indices ``0 .. n_rows - 1``).
        progress: Show a ``judging`` bar and log lines (:class:`~rag_experiments.common.progress.
            Progress`).
        position: Line of the bar (1 when an ``answering`` bar is shown above it).
        repeats: Judgements per (row, metric) and what varies between them (default one).
    """

    def __init__(
        self,
        metrics: Sequence[JudgedRowMetric],
        n_rows: int,
        *,
        progress: bool = True,
        position: int | None = None,
        repeats: JudgeRepeats | None = None,
    ) -> None:
        self.metrics = sorted(metrics, key=lambda m: not m.shows_contexts)
        self.n_rows = n_rows
        self.repeats = repeats or JudgeRepeats()
        n_rep = self.repeats.repeats
        self._pools: dict[int, WorkerPool] = {}
        self._labels: dict[int, str] = {}
        self._lanes: set[int] = set()
        self._by_judge: dict[int, list[JudgedRowMetric]] = {}
        for m in self.metrics:
            key = id(m.judge)
            self._by_judge.setdefault(key, []).append(m)
            if key in self._pools:
                continue
            judge = m.judge
            who = judge.describe() if judge is not None else {}
            name = f"{who.get('provider', '')} {who.get('model', '')}".strip() or "no judge"
            if judge is not None and judge.slot_affinity:
                lanes = max(1, int(judge.slots))
                self._lanes.add(key)
                lane_ids = itertools.count()
                self._pools[key] = WorkerPool(lanes, initializer=lambda c=lane_ids: _enter_lane(c))
                self._labels[key] = f"{name}, {lanes} lanes (one question per lane)"
            else:
                workers = max(1, int(judge.max_concurrency)) if judge is not None else 1
                self._pools[key] = WorkerPool(workers)
                self._labels[key] = f"{name}, {workers} at once"
        # by metric, row, repeat
        self._values: dict[int, list[list[Any]]] = {
            id(m): [[None] * n_rep for _ in range(n_rows)] for m in self.metrics
        }
        self._audit: dict[int, list[list[Any]]] = {
            id(m): [[None] * n_rep for _ in range(n_rows)] for m in self.metrics
        }
        self._errors: dict[int, BaseException] = {}
        self._left = [len(self.metrics) * n_rep] * n_rows
        self._lock = threading.Lock()
        self._futures: list[Future[None]] = []
        self._progress = Progress(
            n_rows, "judging", enabled=progress and bool(self.metrics), position=position
        )

    def describe(self) -> str:
        """``"openai qwen2.5-7b, 8 at once"`` per judge model, or ``"none"`` (with repeats:
        ``"…; 3 repeats (vary seed)"``)."""
        text = "; ".join(self._labels.values()) or "none"
        if self.repeats.repeats > 1 and self._labels:
            text += f"; {self.repeats.repeats} repeats (vary {self.repeats.vary})"
        return text

    def submit(self, index: int, sample: Sample, resp: RagResponse) -> None:
        """Queue every metric of row ``index`` (call in row order, as answers arrive): one
        task per metric, or, for a judge with ``slot_affinity``, one task running the row's
        metrics in sequence on one lane; with repeats, one such task per repeat."""
        for key, metrics in self._by_judge.items():
            pool = self._pools[key]
            for r in range(self.repeats.repeats):
                if key in self._lanes:
                    self._futures.append(
                        pool.submit(self._run_lane, metrics, index, sample, resp, r)
                    )
                else:
                    for m in metrics:
                        self._futures.append(pool.submit(self._run, m, index, sample, resp, r))

    def _run_lane(
        self,
        metrics: list[JudgedRowMetric],
        index: int,
        sample: Sample,
        resp: RagResponse,
        repeat: int = 0,
    ) -> None:
        for m in metrics:
            self._run(m, index, sample, resp, repeat)

    def _run(
        self,
        metric: JudgedRowMetric,
        index: int,
        sample: Sample,
        resp: RagResponse,
        repeat: int = 0,
    ) -> None:
        if id(metric) not in self._errors:
            try:
                with self.repeats.entered(repeat):
                    view = self.repeats.view(repeat, sample, resp)
                    values, record = metric.score_row(sample, view)
            except RagExpError as exc:
                if isinstance(exc, LLMError):  # a model error that escaped: this row only
                    values, record = _row_error(metric, sample, exc)
                else:  # the metric cannot work (no judge, a model that cannot load)
                    with self._lock:
                        self._errors.setdefault(id(metric), exc)
                    values, record = {}, {}
            except Exception as exc:  # noqa: BLE001 - one bad row never costs the others
                values, record = _row_error(metric, sample, exc)
            for key in USAGE_KEYS:
                record.setdefault(key, 0)
            self._values[id(metric)][index][repeat] = values
            self._audit[id(metric)][index][repeat] = record
        with self._lock:
            self._left[index] -= 1
            row_done = self._left[index] == 0
        if row_done:
            self._progress.update()

    def finish(self) -> dict[int, RowResults]:
        """Wait for every queued task.

        Returns:
            ``{id(metric): RowResults}`` for every metric.
        """
        for future in self._futures:
            future.result()
        self._progress.close()
        return {id(m): self._result(m) for m in self.metrics}

    def _result(self, metric: JudgedRowMetric) -> RowResults:
        """One metric's values and audit, its repeats combined in repeat order."""
        values, audit = self._values[id(metric)], self._audit[id(metric)]
        error = self._errors.get(id(metric))
        if self.repeats.repeats == 1 or error is not None:
            return RowResults([v[0] for v in values], [a[0] for a in audit], error)
        summary = RepeatSummary()
        rows, records = [], []
        cuts = {s.name: (s.low + s.high) / 2 for s in metric.specs()}  # verdict: upper half
        for i, (row_values, row_audit) in enumerate(zip(values, audit, strict=True)):
            mean, sd, flipped = combine_row(row_values, cuts)
            rows.append(mean)
            records.append(combine_audit(row_audit, self.repeats.vary, row_values))
            for col in mean:
                summary.sd.setdefault(col, [math.nan] * len(values))[i] = sd[col]
                summary.flipped.setdefault(col, [None] * len(values))[i] = flipped[col]
        return RowResults(rows, records, None, summary)

    def close(self, cancel: bool = False) -> None:
        """Stop the worker pools (``cancel``: drop tasks not started)."""
        for pool in self._pools.values():
            pool.shutdown(wait=not cancel, cancel_futures=cancel)
        self._progress.close()

    def __enter__(self) -> JudgeScheduler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(cancel=exc_type is not None)


class WorkerPool:
    """Up to ``workers`` threads running submitted calls from one queue, started without
    waiting for each to run.

    :class:`concurrent.futures.ThreadPoolExecutor` starts a thread per ``submit`` (until its
    bound) and waits there until that thread runs: on a loaded machine ~10 ms each, so the
    thread submitting 276 judge calls for a 128-slot server spent 1.2 s starting threads while
    the server idled (cProfile, 69 questions, load 10 on 2 cores). Here ``submit`` queues the
    call and, when no worker is idle, starts one with :func:`_thread.start_new_thread`, which
    returns at once. Workers live until :meth:`shutdown`.

    Args:
        workers: Most threads (>= 1).
        initializer: Called first in every worker thread (e.g. to set its lane).
    """

    def __init__(self, workers: int, initializer: Callable[[], None] | None = None) -> None:
        self.workers = max(1, workers)
        self._initializer = initializer
        self._queue: queue.SimpleQueue[
            tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None
        ] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._started = 0
        self._alive = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue ``fn(*args)``; returns its future.

        Raises:
            RuntimeError: The pool was shut down.
        """
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("WorkerPool: submit after shutdown")
            self._queue.put((future, fn, args))
            spawn = self._queue.qsize() > self._idle and self._started < self.workers
            if spawn:
                self._started += 1
                self._alive += 1
        if spawn:
            _thread.start_new_thread(self._work, ())
        return future

    def _work(self) -> None:
        try:
            if self._initializer is not None:
                self._initializer()
            while True:
                with self._lock:
                    self._idle += 1
                item = self._queue.get()
                with self._lock:
                    self._idle -= 1
                if item is None:
                    return
                future, fn, args = item
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to the future's owner
                    future.set_exception(exc)
        finally:
            with self._lock:
                self._alive -= 1
                self._done.notify_all()

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the workers once the queue is done (``cancel_futures``: drop what has not
        started; ``wait``: return when every worker has ended)."""
        with self._lock:
            self._closed = True
            started = self._started
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in range(started):
            self._queue.put(None)
        if wait:
            with self._done:
                self._done.wait_for(lambda: self._alive == 0)


def judge_rows(
    metrics: Sequence[JudgedRowMetric],
    samples: Sequence[Sample],
    responses: Sequence[RagResponse],
    *,
    progress: bool = True,
) -> dict[int, RowResults]:
    """Score ``metrics`` on rows whose answers are all known (see :class:`JudgeScheduler`).

    Returns:
        ``{id(metric): RowResults}``.
    """
    with JudgeScheduler(metrics, len(samples), progress=progress) as scheduler:
        for i, (sample, resp) in enumerate(zip(samples, responses, strict=True)):
            scheduler.submit(i, sample, resp)
        return scheduler.finish()


def _enter_lane(lanes: Iterator[int]) -> None:
    """Thread initializer of a lane pool: this worker is lane ``next(lanes)``
    (:data:`~rag_experiments.llm.base.LANE`, read by models with ``slot_affinity``)."""
    LANE.set(next(lanes))


def _row_error(
    metric: JudgedRowMetric, sample: Sample, exc: BaseException
) -> tuple[dict[str, MetricValue], dict[str, Any]]:
    """Every column of ``metric`` NaN for one row after an unexpected exception."""
    reason = exc.reason if isinstance(exc, LLMError) else "metric_error"
    log.error(
        "%s failed on question %s: %s: %s",
        metric.name,
        sample.id,
        type(exc).__name__,
        exc,
        exc_info=not isinstance(exc, LLMError),
    )
    values = {s.name: MetricValue.nan(reason) for s in metric.specs()}
    return values, {"error": reason, "error_message": f"{type(exc).__name__}: {exc}"}
