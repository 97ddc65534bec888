"""The evaluation runner: dataset → target → metrics → tracker, one way.

The runner receives built objects (it never imports Hydra): an
:class:`~rag_experiments.data.base.EvalDataset`, a :class:`~rag_experiments.protocols.Target`,
a list of :class:`~rag_experiments.protocols.Metric` and a tracker. One bad question never
kills a run: target errors become ``RagResponse.error`` and NaN metric values with a reason;
a metric that crashes marks its columns NaN with ``metric_error`` for every row.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from rag_experiments.common.progress import Progress
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError, RagExpError, RunFailedError
from rag_experiments.llm.errors import FATAL_JUDGE_REASONS, JUDGE_ERROR_REASONS
from rag_experiments.metrics.aggregate import Aggregate, aggregate, percentile, to_metrics
from rag_experiments.metrics.audit import collect_audit, to_jsonl
from rag_experiments.metrics.calibration import CalibrationLabels, calibrated_estimates
from rag_experiments.metrics.keys import declared_specs, keyed
from rag_experiments.metrics.repeats import JudgeRepeats
from rag_experiments.metrics.scheduler import JudgedRowMetric, JudgeScheduler, RowResults
from rag_experiments.protocols import Metric, Target
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.tracking.record import PerQueryRow, write_rows

log = logging.getLogger(__name__)


class Tracker(Protocol):
    """What the runner needs from a tracker (see
    :class:`~rag_experiments.tracking.mlflow_tracker.MlflowTracker`)."""

    def start_run(
        self,
        *,
        params: dict,
        config_yaml: str,
        tags: dict[str, str],
        parent_run_id: str | None = None,
        run_id: str | None = None,
    ) -> Any: ...

    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None: ...

    def log_summary(self, values: dict[str, float], specs: Sequence[MetricSpec]) -> None: ...

    def log_table(self, rows: list[dict], name: str = "per_query") -> None: ...

    def log_csv(self, rows: list[dict], filename: str) -> None: ...

    def log_dict(self, d: dict, filename: str) -> None: ...

    def log_text(self, text: str, filename: str) -> None: ...

    def log_dataset(self, name: str, digest: str, source: str, rows: list[dict]) -> None: ...

    def log_traces(self, result: EvalResult, target_tags: dict[str, str]) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def describe_location(self) -> str: ...


@dataclass
class EvalResult:
    """Everything one evaluation computed.

    Attributes:
        samples: The samples, in dataset order.
        responses: One response per sample.
        values: One ``{metric: MetricValue}`` per sample.
        specs: Declared metric columns, in output order, each with its key priority and, for
            a judged column, its judge (:func:`~rag_experiments.metrics.keys.declared_specs`):
            what the tracker reads of a metric.
        aggregates: Means and counts, overall and per question type.
        counts: ``n_samples``, ``n_failed``, ``n_unanswerable``, ``n_cached_answers``,
            ``duration_s``, ``latency_ms_p50`` and ``latency_ms_p95`` (see :func:`summarise`).
    """

    samples: list[Sample]
    responses: list[RagResponse]
    values: list[dict[str, MetricValue]]
    specs: list[MetricSpec]
    aggregates: list[Aggregate] = field(default_factory=list)
    counts: dict[str, float] = field(default_factory=dict)
    audit: list[dict[str, Any]] = field(default_factory=list)
    """Per-question judge audit records (``judge_audit.jsonl``; empty without judged metrics)."""
    run_values: dict[str, float] = field(default_factory=dict)
    """Run-level values beside the aggregates (``judge_calls_per_question``, judge tokens,
    ``judge.errors.<reason>``)."""
    judge_errors: dict[str, dict[str, int]] = field(default_factory=dict)
    """Cells of judged columns that are NaN because a judge call failed: ``{column: {reason:
    cells}}`` (:func:`judge_error_counts`)."""
    spread: dict[str, list[float]] = field(default_factory=dict)
    """With ``judge.repeats > 1``: ``{column: each row's sample SD over the repeats}``, the
    per-query column ``<column>.sd`` (:mod:`~rag_experiments.metrics.repeats`); else empty."""
    flips: dict[str, list[bool | None]] = field(default_factory=dict)
    """With ``judge.repeats > 1``: ``{column: per row, whether its verdict differs between the
    repeats (None with < 2 valid)}``, the per-query column ``<column>.flip``; else empty."""

    def metrics(self) -> dict[str, float]:
        """Flat metric dict for the tracker: aggregates plus counts (no NaN)."""
        out = to_metrics(self.aggregates)
        out.update({k: v for k, v in self.counts.items() if not math.isnan(v)})
        out.update({k: v for k, v in self.run_values.items() if not math.isnan(v)})
        return out

    def rows(self) -> list[dict[str, Any]]:
        """The per-query table: :meth:`query_rows` as cells
        (:meth:`~rag_experiments.tracking.record.PerQueryRow.to_cells`: sample fields, response
        fields, then ``<metric>`` and ``<metric>.reason`` for every metric, full untruncated
        text, and ``<metric>.sd`` and ``<metric>.flip`` for every judged metric with
        ``judge.repeats > 1``)."""
        return write_rows(self.query_rows())

    def query_rows(self) -> list[PerQueryRow]:
        """One typed :class:`~rag_experiments.tracking.record.PerQueryRow` per sample, in
        dataset order."""
        rows = []
        for i, (s, r, v) in enumerate(zip(self.samples, self.responses, self.values, strict=True)):
            cells = {spec.name: v.get(spec.name, MetricValue.nan("missing")) for spec in self.specs}
            rows.append(
                PerQueryRow(
                    id=s.id,
                    question_type=s.question_type,
                    answerable=s.answerable,
                    user_input=s.user_input,
                    reference=s.reference,
                    response=r.response,
                    retrieved_contexts=r.retrieved_contexts,
                    retrieved_ids=r.retrieved_ids,
                    retrieved_doc_ids=r.retrieved_doc_ids,
                    retrieved_sources=r.retrieved_sources,
                    reference_doc_ids=s.reference_doc_ids,
                    reference_contexts=s.reference_contexts,
                    keywords=s.keywords,
                    no_response=r.no_response,
                    latency_ms=round(r.latency_ms, 3),
                    cached=served_from_cache(r),
                    error=r.error,
                    error_message=r.error_message,
                    values={name: mv.value for name, mv in cells.items()},
                    reasons={name: mv.reason for name, mv in cells.items()},
                    sd={c: self.spread[c][i] for c in cells if c in self.spread},
                    flips={c: self.flips[c][i] for c in cells if c in self.flips},
                )
            )
        return rows

    def average_rows(self) -> list[dict[str, Any]]:
        """``average_results.csv``: metric, group, mean, n_valid, n_nan, direction."""
        direction = {s.name: s.higher_is_better for s in self.specs}
        return [
            {
                "metric": a.metric,
                "group": a.group,
                "mean": a.mean,
                "n_valid": a.n_valid,
                "n_nan": a.n_nan,
                "ci_low": a.ci_low,
                "ci_high": a.ci_high,
                "higher_is_better": direction.get(a.metric, True),
            }
            for a in self.aggregates
        ]


def _answer_one(target: Target, sample: Sample) -> RagResponse:
    try:
        resp = target.answer(sample)
    except Exception as exc:  # noqa: BLE001 - one bad question never kills a run
        log.exception("target crashed on question %s", sample.id)
        resp = RagResponse(error="target_exception", error_message=f"{type(exc).__name__}: {exc}")
    if resp.error:
        log.warning("question %s: target error %s: %s", sample.id, resp.error, resp.error_message)
    return resp


def _answer_all(
    target: Target,
    samples: Sequence[Sample],
    *,
    progress: bool,
    max_concurrency: int,
    on_answer: Callable[[int, Sample, RagResponse], None],
) -> list[RagResponse]:
    """Answer every sample, ``max_concurrency`` at a time, and hand each answer to
    ``on_answer`` in sample order (answer ``i`` once answers ``0..i`` are in), so judging
    starts while later questions are still being answered."""
    with Progress(len(samples), "answering", enabled=progress, position=0) as bar:
        if max_concurrency <= 1:
            responses = []
            for i, sample in enumerate(samples):
                responses.append(_answer_one(target, sample))
                bar.update()
                on_answer(i, sample, responses[-1])
            return responses
        with ThreadPoolExecutor(max_concurrency, thread_name_prefix="answer") as pool:
            futures = [pool.submit(_answer_one, target, s) for s in samples]
            for future in futures:
                future.add_done_callback(lambda _: bar.update())
            try:
                for i, (sample, future) in enumerate(zip(samples, futures, strict=True)):
                    on_answer(i, sample, future.result())
            except BaseException:  # Ctrl-C: drop the questions not sent yet
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            return [f.result() for f in futures]


def _score_all(
    metrics: Sequence[Metric],
    samples: list[Sample],
    responses: list[RagResponse],
    judged: dict[int, RowResults],
) -> tuple[list[MetricSpec], list[dict[str, MetricValue]], dict[str, list[dict[str, Any]]]]:
    """Every metric's values per row (judged ones from ``judged``, the others computed now)
    and the judged metrics' audit records by metric name."""
    specs: list[MetricSpec] = []
    values: list[dict[str, MetricValue]] = [{} for _ in samples]
    audits: dict[str, list[dict[str, Any]]] = {}
    for metric in metrics:
        mspecs = declared_specs(metric)  # key priority and judge source on each spec
        specs.extend(mspecs)
        try:
            result = judged.get(id(metric))
            if result is None:
                per_row = metric.evaluate(samples, responses)
            elif result.error is not None:
                raise result.error
            else:
                per_row = result.values
                audits[str(metric.name)] = result.audit
        except Exception:  # noqa: BLE001 - keep every other metric's results
            log.exception("metric %s failed", type(metric).__name__)
            per_row = [{s.name: MetricValue.nan("metric_error") for s in mspecs} for _ in samples]
        for row, new in zip(values, per_row, strict=True):
            row.update(new)
    seen: set[str] = set()
    for s in specs:
        if s.name in seen:
            raise RagExpError(
                f"two metrics declare the column {s.name!r}; rename one in the metrics config"
            )
        seen.add(s.name)
    return specs, values, audits


def judge_error_counts(
    metrics: Sequence[Metric], values: Sequence[dict[str, MetricValue]]
) -> dict[str, dict[str, int]]:
    """Cells of judged metrics that are NaN because a judge call failed, by column and reason.

    Args:
        metrics: The run's metrics (only the columns of judged per-row metrics count).
        values: One ``{column: MetricValue}`` per row.

    Returns:
        ``{column: {reason: cells}}`` for reasons in
        :data:`~rag_experiments.llm.errors.JUDGE_ERROR_REASONS` (content reasons such as
        ``no_claims`` or ``unanswerable`` are not judge errors); columns without one are absent.
    """
    columns = [s.name for m in metrics if m.per_row for s in m.specs()]
    out: dict[str, dict[str, int]] = {}
    for col in columns:
        counts = Counter(
            row[col].reason
            for row in values
            if col in row and row[col].reason in JUDGE_ERROR_REASONS
        )
        if counts:
            out[col] = dict(sorted(counts.items()))
    return out


def evaluate(
    dataset: EvalDataset,
    target: Target,
    metrics: Sequence[Metric],
    *,
    progress: bool = True,
    max_concurrency: int | None = None,
    seed: int = 0,
    judge_repeats: JudgeRepeats | None = None,
) -> EvalResult:
    """Prepare the target, answer every sample, score every metric and aggregate.

    Answering and judging overlap: LLM-judged metrics (:class:`~rag_experiments.metrics.
    scheduler.JudgedRowMetric`) score question ``i`` on the judge's own pool (``judge.
    max_concurrency`` rows at once) as soon as questions ``0..i`` are answered, so the wall
    time approaches the longer of answering and judging rather than their sum. The other
    metrics run over all rows afterwards. Values never depend on either concurrency.

    Args:
        dataset: Samples and corpus.
        target: System under test (its ``prepare`` is called first); ``answer`` must be
            thread-safe when more than one question is answered at once.
        metrics: Metric groups; their column names must be distinct.
        progress: Show progress bars (and log a line every tenth of each phase).
        max_concurrency: Questions answered at once; None = what the target declares
            (``target.max_concurrency``).
        seed: Seed of the bootstrap confidence intervals.
        judge_repeats: Judgements per (row, judged metric) and what varies between them
            (default one; with more, the run values ``<m>.judge_sd`` and ``<m>.flip_rate`` and
            :attr:`EvalResult.spread`, :mod:`~rag_experiments.metrics.repeats`).

    Returns:
        The full :class:`EvalResult` (with the judge audit of judged metrics).

    Raises:
        ConfigError: ``max_concurrency`` < 1.
    """
    started = time.perf_counter()
    answer_concurrency = int(target.max_concurrency if max_concurrency is None else max_concurrency)
    if answer_concurrency < 1:
        raise ConfigError(
            f"max_concurrency must be >= 1 (questions answered at once), got {answer_concurrency}"
        )
    target.prepare(dataset)
    samples = list(dataset.samples)
    # A metric declares how it is scored (``per_row``): per-row ones are judged row by row.
    judged_metrics = [cast(JudgedRowMetric, m) for m in metrics if m.per_row]
    with (
        _progress_to_log(progress),
        JudgeScheduler(
            judged_metrics, len(samples), progress=progress, position=1, repeats=judge_repeats
        ) as judging,
    ):
        responses = _answer_all(
            target,
            samples,
            progress=progress,
            max_concurrency=answer_concurrency,
            on_answer=judging.submit,
        )
        judged = judging.finish()
    specs, values, audits = _score_all(metrics, samples, responses, judged)
    aggs, counts = summarise(samples, responses, values, specs, seed=seed)
    counts["duration_s"] = time.perf_counter() - started
    audit, run_values = collect_audit(audits, samples)
    spread: dict[str, list[float]] = {}
    flips: dict[str, list[bool | None]] = {}
    for result in judged.values():
        if result.repeats is not None:
            spread.update(result.repeats.sd)
            flips.update(result.repeats.flipped)
            run_values.update(result.repeats.run_values())
    judge_errors = judge_error_counts(metrics, values)
    for by_reason in judge_errors.values():
        for reason, n in by_reason.items():
            key = f"judge.errors.{reason}"
            run_values[key] = run_values.get(key, 0.0) + n
    if judged_metrics:
        log.info(
            "Answered and judged %d questions in %.1f s (%d answered at once; judging: %s)",
            len(samples),
            counts["duration_s"],
            answer_concurrency,
            judging.describe(),
        )
    else:  # retrieval-only or judge-free metrics: nothing was judged
        log.info(
            "Evaluated %d questions in %.1f s (%d at once; no LLM judge)",
            len(samples),
            counts["duration_s"],
            answer_concurrency,
        )
    return EvalResult(
        samples,
        responses,
        values,
        specs,
        aggs,
        counts,
        audit,
        run_values,
        judge_errors,
        spread,
        flips,
    )


def summarise(
    samples: Sequence[Sample],
    responses: Sequence[RagResponse],
    values: Sequence[dict[str, MetricValue]],
    specs: Sequence[MetricSpec],
    *,
    seed: int = 0,
) -> tuple[list[Aggregate], dict[str, float]]:
    """Aggregates and outcome counts of scored rows (used by :func:`evaluate` and by
    ``rag-exp merge``, which re-summarises the merged shards' rows).

    Args:
        samples: The samples, in row order (their ``question_type`` groups the aggregates).
        responses: One response per sample.
        values: One ``{metric: MetricValue}`` per sample.
        specs: Metric columns, in output order.
        seed: Seed of the bootstrap confidence intervals (the CIs depend on the row order).

    Returns:
        ``(aggregates, counts)``: :func:`~rag_experiments.metrics.aggregate.aggregate` over all rows
        and per question type; ``n_samples``, ``n_failed``, ``n_unanswerable``,
        ``n_cached_answers`` (answers the generator's response cache served,
        :func:`served_from_cache`), and ``latency_ms_p50`` / ``latency_ms_p95`` over the
        answers without error that were not served from the cache (a cached answer takes
        milliseconds where a generated one takes seconds: mixed in, they would make a
        configuration look fast because an earlier run answered for it; NaN when every answer
        was cached).
    """
    aggs = aggregate([s.name for s in specs], values, [s.question_type for s in samples], seed=seed)
    latencies = [r.latency_ms for r in responses if r.error is None and not served_from_cache(r)]
    counts = {
        "n_samples": float(len(samples)),
        "n_failed": float(sum(1 for r in responses if r.error)),
        "n_unanswerable": float(sum(1 for s in samples if not s.answerable)),
        "n_cached_answers": float(sum(1 for r in responses if served_from_cache(r))),
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p95": percentile(latencies, 95),
    }
    return aggs, counts


def served_from_cache(response: RagResponse) -> bool:
    """True when the generator's response cache answered (``metadata["cached"]``, set by
    the baseline target; the per-query table's ``cached`` column), so the answer's latency
    says nothing about the configuration's speed."""
    return bool(response.metadata.get("cached"))


@contextlib.contextmanager
def _progress_to_log(progress: bool) -> Iterator[None]:
    """While bars are shown, print console log lines above them instead of through them."""
    if not progress:
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm():
        yield


def run_experiment(
    dataset: EvalDataset,
    target: Target,
    metrics: Sequence[Metric],
    tracker: Tracker,
    *,
    params: dict[str, Any],
    config_yaml: str,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
    max_failure_rate: float = 0.2,
    progress: bool = True,
    seed: int = 0,
    judge_repeats: JudgeRepeats | None = None,
) -> tuple[str, EvalResult]:
    """Open a run, evaluate and log everything into it (:func:`evaluate_in_run`).

    Args:
        dataset: Samples and corpus.
        target: System under test.
        metrics: Metric groups.
        tracker: Where results go.
        params: Nested resolved config (flattened and redacted by the tracker).
        config_yaml: The resolved config as YAML.
        tags: Extra run tags.
        parent_run_id: Parent run of a sweep, if any.
        max_failure_rate: Highest acceptable share of samples whose target failed.
        progress: Show progress bars.
        seed: Seed of the bootstrap confidence intervals.
        judge_repeats: Judge repeats (see :func:`evaluate`).

    Returns:
        ``(run_id, result)``.

    Raises:
        RunFailedError: More than ``max_failure_rate`` of the samples failed (after logging).
    """
    with tracker.start_run(
        params=params, config_yaml=config_yaml, tags=dict(tags or {}), parent_run_id=parent_run_id
    ) as run_id:
        result = evaluate_in_run(
            dataset,
            target,
            metrics,
            tracker,
            max_failure_rate=max_failure_rate,
            progress=progress,
            seed=seed,
            judge_repeats=judge_repeats,
        )
    return run_id, result


def evaluate_in_run(
    dataset: EvalDataset,
    target: Target,
    metrics: Sequence[Metric],
    tracker: Tracker,
    *,
    max_failure_rate: float = 0.2,
    progress: bool = True,
    max_concurrency: int | None = None,
    seed: int = 0,
    judge_repeats: JudgeRepeats | None = None,
    calibration: CalibrationLabels | None = None,
) -> EvalResult:
    """Evaluate and log into the tracker's open run (the caller owns the run, e.g. to build the
    target inside it so a build error ends as a FAILED run).

    Logs the dataset input and digest, the per-query table (``per_query.json`` +
    ``per_query_results.csv``), ``average_results.csv`` (every mean, ``n_valid``, CI, overall
    and per type), the metric specs, the headline metrics (:mod:`~rag_experiments.tracking.
    selection`: key metrics, counts, judge usage), tags (target
    identity), with judged metrics ``judge_audit.jsonl``, and one trace per question
    (:mod:`~rag_experiments.tracking.trace_log`). Everything is logged before the failure-rate
    checks.

    Args:
        dataset: Samples and corpus.
        target: System under test.
        metrics: Metric groups.
        tracker: Where results go; a run must be open (``tracker.start_run``).
        max_failure_rate: Highest acceptable share of samples whose target failed, and of
            any judged column's cells that failed for a model service error
            (:data:`~rag_experiments.llm.errors.SERVICE_ERROR_REASONS`: unreachable, timeout,
            HTTP error …; not content reasons such as ``no_claims`` or ``parse_error``).
        progress: Show progress bars.
        max_concurrency: Samples answered at once (see :func:`evaluate`).
        seed: Seed of the bootstrap confidence intervals.
        judge_repeats: Judge repeats (see :func:`evaluate`).
        calibration: Human labels of some rows: each labeled metric's prediction-powered
            estimate and its labels-only one join the run values
            (:func:`~rag_experiments.metrics.calibration.calibrated_estimates`).

    Returns:
        The evaluation's :class:`EvalResult`.

    Raises:
        RunFailedError: A failure rate above ``max_failure_rate`` (after logging).
    """
    tracker.log_dataset(
        dataset.name,
        dataset.digest,
        dataset.source,
        [s.model_dump(mode="json") for s in dataset.samples],
    )
    result = evaluate(
        dataset,
        target,
        metrics,
        progress=progress,
        max_concurrency=max_concurrency,
        seed=seed,
        judge_repeats=judge_repeats,
    )
    if calibration is not None:
        ids = [s.id for s in result.samples]
        result.run_values.update(calibrated_estimates(calibration, ids, result.values))
    tracker.set_tags(target.describe())
    log_result(result, tracker, dataset)
    tracker.log_traces(result, target.describe())  # one MLflow trace per question
    n = max(1, len(result.samples))
    rate = result.counts["n_failed"] / n
    log.info("logged %d samples to %s", len(result.samples), tracker.describe_location())
    if rate > max_failure_rate:
        reasons: dict[str, int] = {}
        for r in result.responses:
            if r.error:
                reasons[r.error] = reasons.get(r.error, 0) + 1
        raise RunFailedError(
            f"{int(result.counts['n_failed'])} of {len(result.samples)} questions failed "
            f"({rate:.0%} > max_failure_rate={max_failure_rate:.0%}); reasons: "
            f"{json.dumps(reasons)}. Everything computed was logged; fix the target or raise "
            "max_failure_rate"
        )
    _check_judge_failures(result, max_failure_rate)
    _check_judge_gave_verdicts(result, metrics)
    return result


def log_result(result: EvalResult, tracker: Tracker, dataset: EvalDataset) -> None:
    """Log an evaluation's results into the tracker's open run: the per-query table
    (``per_query.json`` + ``per_query_results.csv``), ``average_results.csv``,
    ``metric_specs.json``, ``skipped_files.json`` (when files were skipped),
    ``judge_audit.jsonl`` (with judged metrics) and the summary (:meth:`EvalResult.metrics`,
    of which the tracker logs the headline values as metrics: ``tracking.metrics``; every
    aggregate is in ``average_results.csv``). Used by :func:`evaluate_in_run` and by
    ``rag-exp merge``.
    """
    tracker.log_table(result.rows(), name="per_query")
    tracker.log_csv(result.average_rows(), "average_results.csv")
    tracker.log_dict(
        {
            s.name: {
                "higher_is_better": s.higher_is_better,
                "range": [s.low, s.high],
                "description": s.description,
            }
            for s in result.specs
        },
        "metric_specs.json",
    )
    if dataset.skipped:
        tracker.log_dict(dataset.skipped, "skipped_files.json")
    if result.audit:
        tracker.log_text(to_jsonl(result.audit), "judge_audit.jsonl")
    tracker.log_summary(result.metrics(), keyed(result.specs))


def _check_judge_gave_verdicts(result: EvalResult, metrics: Sequence[Metric]) -> None:
    """Raise :class:`RunFailedError` when the judge gave no usable verdict at all: every
    judged column has 0 valid cells and judge errors (``parse_error`` for a judge whose every
    reply has the wrong types, …) are among its NaN reasons. Such a run measured nothing, as
    with a dead judge; it fails after everything was logged."""
    columns = [s.name for m in metrics if m.per_row for s in m.specs()]
    if not columns or not result.judge_errors:
        return
    valid = {c: sum(1 for row in result.values if c in row and row[c].is_valid) for c in columns}
    if any(valid.values()):
        return
    errors: Counter[str] = Counter()
    for by_reason in result.judge_errors.values():
        errors.update(by_reason)
    raise RunFailedError(
        f"the judge gave no usable verdict: every judged metric ({', '.join(columns)}) has 0 "
        f"valid values of {len(result.samples)} (judge errors: {json.dumps(dict(errors))}). "
        "Everything computed was logged (judge_audit.jsonl shows the replies); start a new run "
        "with a judge that follows the JSON schema (judge=…, judge.model=…): resume=<run id> "
        "continues a run only with the config it started with, so it cannot change the judge"
    )


def _check_judge_failures(result: EvalResult, max_failure_rate: float) -> None:
    """Raise :class:`RunFailedError` when a judged column lost more than
    ``max_failure_rate`` of its cells to failures that say the judge cannot work as configured
    (:data:`~rag_experiments.llm.errors.FATAL_JUDGE_REASONS`): a judge that is down or
    overloaded, or a reasoning judge whose token budget ends before its answer
    (``reasoning_truncated``). Their NaNs say nothing about the answers."""
    n = max(1, len(result.samples))
    failed = {}
    for col, by_reason in result.judge_errors.items():
        fatal = {r: c for r, c in by_reason.items() if r in FATAL_JUDGE_REASONS}
        if sum(fatal.values()) / n > max_failure_rate:
            failed[col] = fatal
    if failed:
        detail = "; ".join(
            f"{col}: {sum(c.values())} of {n} ({json.dumps(c)})" for col, c in failed.items()
        )
        thinking = any("reasoning_truncated" in c for c in failed.values())
        fix = (
            "the judge spends its token budget reasoning: raise judge.max_tokens (or "
            "judge.reasoning_budget) or set judge.reasoning=off, then start a new run"
            if thinking
            else "check that the judge server is up and not overloaded (judge.base_url, "
            "judge.timeout_s, judge.max_concurrency), then resume the run with resume=<run id>"
        )
        raise RunFailedError(
            f"the judge failed on too many questions (> max_failure_rate="
            f"{max_failure_rate:.0%}): {detail}. Everything computed was logged; {fix}"
        )
