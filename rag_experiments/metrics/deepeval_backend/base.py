"""One DeepEval metric, called synchronously per row: :class:`DeepEvalMetric`.

DeepEval's ``evaluate()`` runs metrics concurrently and its own timeouts kill a run with a slow
local judge; a bare ``measure()`` has no timeout at all. Here each row gets a fresh DeepEval
metric (``async_mode=False``) and a fresh :class:`~.judge_llm.JudgeLLM` (DeepEval metric
objects keep state, so no two rows share one), and ``measure()`` runs in a worker thread that
is waited for at most ``timeout_s`` seconds of wall-clock time. Rows are scored
``judge.max_concurrency`` at a time by :mod:`~rag_experiments.metrics.scheduler`.

**Timeouts.** Python cannot kill a thread. After ``timeout_s`` the row is NaN ``timeout``, the
row's judge adapter is cancelled (it refuses every later judge call), and the thread is
abandoned: the judge call it is making, if any, runs to its end (bounded by the chat model's
own timeout) and its result is thrown away. The thread is a daemon, so it never keeps the
process alive; its metric and adapter are its own, so it cannot touch later rows. With the
embedded judge (one model, calls serialised) the next row may wait for that one call.

**Per-row errors** (never a 0, never a crash of the run), as NaN with a reason:

- target failed → ``target_error``; a reference-based metric on an unanswerable sample →
  ``unanswerable``; an answer metric on a row with no recorded answer → ``no_response`` (all
  as in the custom backend, no judge call);
- the custom backend's guards, before DeepEval is called, with the same values and reasons
  (DeepEval scores some of these edges as perfect: faithfulness and context recall 1.0 on no
  context, precision 1.0 on ``[""]``; confident-ai/deepeval#2248): contexts ``[]`` or only
  blank texts → 0.0 flagged ``empty_context`` for the metrics that read them (not answer
  relevancy); an empty or blank answer → faithfulness NaN ``no_claims``, answer relevancy 0.0
  ``empty_answer``; a blank reference → context precision/recall NaN ``no_reference``
  (:meth:`DeepEvalMetric._guard`, each subclass's :attr:`~DeepEvalMetric.guards`);
- a test-case field DeepEval requires is None otherwise → ``missing_params``;
- the judge failed → its reason (``timeout``, ``parse_error``, ``truncated`` …); a verdict list
  whose length does not match what it judges (claims, statements, contexts) → ``parse_error``;
- over ``timeout_s`` → ``timeout``; any other exception in DeepEval → ``metric_error``.

Otherwise the value is DeepEval's ``score`` as DeepEval computes it, edges included (see each
subclass and the README's comparison table).
"""

from __future__ import annotations

import contextvars
import importlib
import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.base import LANE, ChatModel
from rag_experiments.metrics.audit import RATIONALE_KEY, USAGE_KEYS
from rag_experiments.metrics.definitions import spec
from rag_experiments.metrics.judge import has_context
from rag_experiments.metrics.scheduler import JudgedRowMetric
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

log = logging.getLogger(__name__)

PREFIX = "deepeval."
"""Column prefix of this backend."""


class VerdictMismatchError(LLMError):
    """DeepEval got a verdict list whose length differs from what it judged (it would use it
    misaligned). Reason ``parse_error``."""

    reason = "parse_error"


class DeepEvalMetric(JudgedRowMetric):
    """Base of the DeepEval metrics: one row's scoring, timeout, error capture and audit
    (rows are scheduled concurrently by :mod:`~rag_experiments.metrics.scheduler`).

    A subclass sets :attr:`definition` (the defined metric's name, see
    :mod:`~rag_experiments.metrics.definitions`),
    :attr:`deepeval_class` (``module:Class``), :attr:`state_attrs` (DeepEval attributes kept
    in the audit), and may override :meth:`_metric_kwargs`, :meth:`_check` and
    :meth:`_adjust`.

    Args:
        judge: The judge chat model (``build.build`` injects it).
        threshold: DeepEval's pass threshold (its ``success`` flag, kept in the audit; 1.0
            with ``strict_mode``).
        include_reason: Ask DeepEval for its explanation (one more judge call per row).
        strict_mode: DeepEval's strict mode: a score below the threshold becomes 0.
        timeout_s: Wall-clock limit of one ``measure()`` (one metric, one row), seconds.
        max_retries: Re-asks of a judge output that does not match DeepEval's schema.
        max_tokens: Completion limit per judge call.
        max_items: Most items of any list in a judge reply (see :mod:`.schemas`).
        max_chars: Most characters of any free string in a judge reply.
        prefix: Column prefix.

    Raises:
        ConfigError: ``threshold`` outside [0, 1], ``timeout_s`` ≤ 0, ``max_retries`` < 0, or
            ``max_tokens``, ``max_items`` or ``max_chars`` < 1.
    """

    definition = ""
    deepeval_class = ""
    needs_reference = False
    needs_response = False
    """True for a metric that judges the answer: NaN ``no_response`` when none was recorded."""
    guards: tuple[str, ...] = ()
    """The custom backend's guards this metric applies before calling DeepEval, in order:
    ``no_reference`` (blank reference → NaN), ``empty_answer`` (blank answer → 0.0 flagged),
    ``no_claims`` (blank answer → NaN), ``empty_context`` (no non-blank context → 0.0
    flagged)."""
    state_attrs: tuple[str, ...] = ()
    verdict_item = "item"
    """What one DeepEval verdict judges when DeepEval keeps no list of them (audit lines)."""

    def __init__(
        self,
        judge: ChatModel | None = None,
        threshold: float = 0.5,
        include_reason: bool = False,
        strict_mode: bool = False,
        timeout_s: float = 300.0,
        max_retries: int = 1,
        max_tokens: int = 1024,
        max_items: int = 8,
        max_chars: int = 160,
        prefix: str = PREFIX,
    ) -> None:
        where = f"metrics.suite.{prefix}{self.definition}"
        if not 0.0 <= float(threshold) <= 1.0:
            raise ConfigError(f"{where}.threshold must be in [0, 1], got {threshold}")
        if not float(timeout_s) > 0:
            raise ConfigError(f"{where}.timeout_s must be > 0 seconds, got {timeout_s}")
        if int(max_retries) < 0 or min(int(max_tokens), int(max_items), int(max_chars)) < 1:
            raise ConfigError(
                f"{where}: max_retries must be ≥ 0 and max_tokens, max_items, "
                f"max_chars ≥ 1, got {max_retries}, {max_tokens}, {max_items}, "
                f"{max_chars}"
            )
        self.judge = judge
        self.threshold = float(threshold)
        self.include_reason = bool(include_reason)
        self.strict_mode = bool(strict_mode)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        self.max_items = int(max_items)
        self.max_chars = int(max_chars)
        self.prefix = prefix
        # Import DeepEval here, on the thread that builds the metric: rows are scored on worker
        # threads, and DeepEval's first import installs signal handlers (main thread only).
        module, cls = self.deepeval_class.split(":")
        self._metric_cls = getattr(importlib.import_module(module), cls)

    @property
    def column(self) -> str:
        """The prefixed column name (``deepeval.faithfulness``)."""
        return self.prefix + self.definition

    @property
    def name(self) -> str:
        """The column name, also the metric's key in ``judge_audit.jsonl`` (distinct from the
        custom backend's)."""
        return self.column

    def specs(self) -> list[MetricSpec]:
        """The one prefixed column of this metric."""
        return [spec(self.definition, self.prefix)]

    def score_row(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Score one row with a fresh DeepEval metric and judge adapter (see the module
        docstring for edges and errors).

        Returns:
            ``({column: value}, audit record)``: DeepEval's intermediate state (claims,
            truths, verdicts, statements …), score, success, reason, the judge's raw replies
            and ``judge_calls`` / ``judge_prompt_tokens`` / ``judge_completion_tokens``.

        Raises:
            ConfigError: No judge was given.
        """
        value, record = self._score_row(sample, resp)
        for key in USAGE_KEYS:
            record.setdefault(key, 0)
        record[RATIONALE_KEY] = self.verdict_lines(record)
        return {self.column: value}, record

    def verdict_lines(self, record: Mapping[str, Any]) -> list[str]:
        """The explanation lines of this metric's audit record
        (:data:`~rag_experiments.metrics.audit.RATIONALE_KEY`): one line per DeepEval verdict
        (``✓`` yes, ``✗`` no, ``?`` borderline/idk) on the claim or statement it judges (or
        ``<verdict_item> k`` when DeepEval keeps no list of them), with DeepEval's reason for
        it; then DeepEval's overall reason (``include_reason``). The error message when the
        row failed; ``[]`` when no judge was asked.

        Args:
            record: The row's audit record (DeepEval's state, see :meth:`score_row`).

        Returns:
            The lines, in DeepEval's order.
        """
        if record.get("error_message"):
            return [str(record["error_message"])]
        items = record.get("claims") or record.get("statements") or []
        lines = []
        for k, verdict in enumerate(record.get("verdicts") or [], start=1):
            what = str(items[k - 1]) if k <= len(items) else f"{self.verdict_item} {k}"
            lines.append(_verdict_line(what, verdict))
        for k, context in enumerate(record.get("verdicts_list") or [], start=1):
            for verdict in (context or {}).get("verdicts") or []:
                lines.append(_verdict_line(f"context {k}: {verdict.get('statement')}", verdict))
        if record.get("reason"):
            lines.append(f"DeepEval: {record['reason']}")
        return lines

    def _score_row(self, sample: Sample, resp: RagResponse) -> tuple[MetricValue, dict[str, Any]]:
        if resp.error is not None:
            return MetricValue.nan("target_error"), {"skipped": "target_error"}
        if self.needs_response and resp.no_response:
            return MetricValue.nan("no_response"), {"skipped": "no_response"}
        if self.needs_reference and not sample.answerable:
            return MetricValue.nan("unanswerable"), {"skipped": "unanswerable"}
        guarded = self._guard(sample, resp)
        if guarded is not None:
            return guarded, {"skipped": guarded.reason}
        from deepeval.test_case import LLMTestCase

        from rag_experiments.metrics.deepeval_backend.judge_llm import JudgeLLM

        if self.judge is None:
            raise ConfigError(f"metric {self.column} needs a judge model (judge=<ChatModel>)")
        case = LLMTestCase(
            input=sample.user_input,
            actual_output=resp.response,
            expected_output=sample.reference or None,
            retrieval_context=list(resp.retrieved_contexts),
        )
        llm = JudgeLLM(
            self.judge,
            self.column,
            self.max_retries,
            self.max_tokens,
            self.max_items,
            self.max_chars,
            self._expected_verdicts(case),
        )
        metric = self._build(llm)
        started = time.perf_counter()
        error = _measure_with_timeout(metric, case, self.timeout_s)
        if isinstance(error, _Timeout):
            llm.cancel()
        if error is None:
            try:
                self._check(metric, case)
                value = MetricValue(self._adjust(metric, float(metric.score)))
            except LLMError as exc:
                error = exc
        record = {
            **llm.usage(),
            "elapsed_s": round(time.perf_counter() - started, 3),
            **self._state(metric),
            "judgements": [j.to_dict() for j in list(llm.judgements)],
        }
        if error is not None:
            reason = _reason(error)
            log.warning("%s, question %s: %s (%s)", self.column, sample.id, reason, error)
            record["error"], record["error_message"] = reason, str(error)
            return MetricValue.nan(reason), record
        return value, record

    def _guard(self, sample: Sample, resp: RagResponse) -> MetricValue | None:
        """The value of the first of :attr:`guards` that applies (as the custom metric of the
        same definition gives it), or None to call DeepEval."""
        for guard in self.guards:
            if guard == "no_reference" and not sample.reference.strip():
                return MetricValue.nan("no_reference")
            if guard == "empty_answer" and not resp.response.strip():
                return MetricValue(0.0, "empty_answer")
            if guard == "no_claims" and not resp.response.strip():
                return MetricValue.nan("no_claims")
            if guard == "empty_context" and not has_context(resp.retrieved_contexts):
                return MetricValue(0.0, "empty_context")
        return None

    def _metric_kwargs(self) -> dict[str, Any]:
        """Constructor arguments of the DeepEval metric beyond the common ones."""
        return {}

    def _expected_verdicts(self, case: Any) -> int | None:
        """Length of DeepEval's first ``verdicts`` list for ``case`` when the test case fixes
        it (None = unknown, or fixed later by an extraction call)."""
        return None

    def _build(self, llm: Any) -> Any:
        return self._metric_cls(
            threshold=self.threshold,
            model=llm,
            include_reason=self.include_reason,
            async_mode=False,
            strict_mode=self.strict_mode,
            verbose_mode=False,
            eval_mode="llm",  # DeepEval 4: never route verdicts to its remote "System One"
            **self._metric_kwargs(),
        )

    def _check(self, metric: Any, case: Any) -> None:
        """Raise :class:`VerdictMismatchError` when DeepEval's verdicts do not fit ``case``."""

    def _adjust(self, metric: Any, score: float) -> float:
        """The reported value from DeepEval's ``score`` (unchanged by default)."""
        return score

    def _state(self, metric: Any) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for attr in (*self.state_attrs, "score", "success", "reason"):
            if attr in vars(metric):
                state[attr] = _plain(vars(metric)[attr])
        return state


class _Timeout(Exception):
    """``measure()`` did not finish within the row's wall-clock limit."""


def _measure_with_timeout(metric: Any, case: Any, timeout_s: float) -> BaseException | None:
    """Run ``metric.measure(case)`` in a daemon thread and wait at most ``timeout_s``.

    Returns:
        None on success, the exception ``measure`` raised, or a :class:`_Timeout`.
    """
    outcome: dict[str, BaseException] = {}
    # the caller's context follows into the thread: a judge repeat (its RepeatScope's value:
    # its options and cache key); the scheduling lane does not (DeepEval's calls never ran on
    # one)
    context = contextvars.copy_context()

    def run() -> None:
        LANE.set(None)
        try:
            metric.measure(case, _show_indicator=False)
        except BaseException as exc:  # noqa: BLE001 - reported per row
            outcome["error"] = exc

    thread = threading.Thread(
        target=context.run, args=(run,), name=f"deepeval-{type(metric).__name__}", daemon=True
    )
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return _Timeout(f"measure() did not finish within {timeout_s:g} s (thread abandoned)")
    return outcome.get("error")


def _reason(error: BaseException) -> str:
    from deepeval.errors import MissingTestCaseParamsError

    if isinstance(error, _Timeout):
        return "timeout"
    if isinstance(error, MissingTestCaseParamsError):
        return "missing_params"
    if isinstance(error, LLMError):
        return error.reason
    if isinstance(error, ValueError | KeyError):  # DeepEval's own JSON parsing (unused path)
        return "parse_error"
    return "metric_error"


_MARKS = {"yes": "✓", "no": "✗"}


def _verdict_line(what: str, verdict: Any) -> str:
    """``<mark> <what>`` and DeepEval's reason for the verdict (a dict ``{"verdict",
    "reason"}``, or the bare verdict)."""
    if not isinstance(verdict, Mapping):
        verdict = {"verdict": verdict}
    mark = _MARKS.get(str(verdict.get("verdict", "")).strip().lower(), "?")
    reason = verdict.get("reason")
    return f"{mark} {what}" + (f" ({reason})" if reason else "")


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
