"""The evaluation runner: dataset → target → metrics → tracker, one way.

The runner receives built objects (it never imports Hydra): an
:class:`~rag_experiments.data.base.EvalDataset`, a :class:`~rag_experiments.protocols.Target`,
a list of :class:`~rag_experiments.protocols.Metric` and a tracker. One bad question never
kills a run: target errors become ``RagResponse.error`` and NaN metric values with a reason;
a metric that crashes marks its columns NaN with ``metric_error`` for every row.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from rag_experiments.aggregate import Aggregate, aggregate, percentile, to_metrics
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import RagExpError, RunFailedError
from rag_experiments.metrics.audit import collect_audit, to_jsonl
from rag_experiments.metrics.judge import JudgedMetric, evaluate_interleaved
from rag_experiments.protocols import Metric, Target
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

log = logging.getLogger(__name__)


class Tracker(Protocol):
    """What the runner needs from a tracker (see
    :class:`~rag_experiments.tracking.mlflow_tracker.MlflowTracker`)."""

    def start_run(self, *, params: dict, config_yaml: str, tags: dict[str, str],
                  parent_run_id: str | None = None, run_id: str | None = None) -> Any: ...

    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None: ...

    def log_table(self, rows: list[dict], name: str = "per_query") -> None: ...

    def log_csv(self, rows: list[dict], filename: str) -> None: ...

    def log_dict(self, d: dict, filename: str) -> None: ...

    def log_text(self, text: str, filename: str) -> None: ...

    def log_dataset(self, name: str, digest: str, source: str, rows: list[dict]) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def describe_location(self) -> str: ...


@dataclass
class EvalResult:
    """Everything one evaluation computed.

    Attributes:
        samples: The samples, in dataset order.
        responses: One response per sample.
        values: One ``{metric: MetricValue}`` per sample.
        specs: Declared metric columns, in output order.
        aggregates: Means and counts, overall and per question type.
        counts: ``n_samples``, ``n_failed``, ``n_unanswerable``, ``duration_s``,
            ``latency_ms_p50`` and ``latency_ms_p95``.
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
    """Run-level values beside the aggregates (``judge_calls_per_question``, judge tokens)."""

    def metrics(self) -> dict[str, float]:
        """Flat metric dict for the tracker: aggregates plus counts (no NaN)."""
        out = to_metrics(self.aggregates)
        out.update({k: v for k, v in self.counts.items() if not math.isnan(v)})
        out.update({k: v for k, v in self.run_values.items() if not math.isnan(v)})
        return out

    def rows(self) -> list[dict[str, Any]]:
        """The per-query table: sample fields, response fields, then ``<metric>`` and
        ``<metric>.reason`` for every metric (full, untruncated text)."""
        rows = []
        for s, r, v in zip(self.samples, self.responses, self.values, strict=True):
            row: dict[str, Any] = {
                "id": s.id,
                "question_type": s.question_type,
                "answerable": s.answerable,
                "user_input": s.user_input,
                "reference": s.reference,
                "response": r.response,
                "retrieved_contexts": r.retrieved_contexts,
                "retrieved_ids": r.retrieved_ids,
                "retrieved_doc_ids": r.retrieved_doc_ids,
                "reference_doc_ids": s.reference_doc_ids,
                "reference_contexts": s.reference_contexts,
                "keywords": s.keywords,
                "no_response": r.no_response,
                "latency_ms": round(r.latency_ms, 3),
                "error": r.error,
                "error_message": r.error_message,
            }
            for spec in self.specs:
                mv = v.get(spec.name, MetricValue.nan("missing"))
                row[spec.name] = mv.value
                row[f"{spec.name}.reason"] = mv.reason
            rows.append(row)
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
    target: Target, samples: Sequence[Sample], progress: bool, max_concurrency: int = 1
) -> list[RagResponse]:
    answer_many = getattr(target, "answer_many", None)
    if answer_many is not None:  # the target answers concurrently (HttpTarget.max_concurrency)
        batch: list[RagResponse] = answer_many(samples, progress=progress)
        for sample, resp in zip(samples, batch, strict=True):
            if resp.error:
                log.warning("question %s: target error %s: %s", sample.id, resp.error, resp.error_message)
        return batch
    bar = {"desc": "answering", "unit": "q", "disable": not progress, "total": len(samples)}
    if max_concurrency > 1:  # answer() calls in threads (server-backed generators)
        with ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="answer") as pool:
            return list(tqdm(pool.map(lambda s: _answer_one(target, s), samples), **bar))
    return [_answer_one(target, s) for s in tqdm(samples, **bar)]


def _score_all(
    metrics: Sequence[Metric], samples: list[Sample], responses: list[RagResponse]
) -> tuple[list[MetricSpec], list[dict[str, MetricValue]]]:
    specs: list[MetricSpec] = []
    values: list[dict[str, MetricValue]] = [{} for _ in samples]
    # Judged metrics are scored question by question (shared prompt prefixes; same values).
    judged = evaluate_interleaved([m for m in metrics if isinstance(m, JudgedMetric)], samples,
                                  responses)
    for metric in metrics:
        mspecs = metric.specs()
        specs.extend(mspecs)
        try:
            if id(metric) in judged:
                per_row = judged[id(metric)]
            else:
                per_row = metric.evaluate(samples, responses)
            if isinstance(per_row, Exception):
                raise per_row
        except Exception as exc:  # noqa: BLE001 - keep every other metric's results
            log.exception("metric %s failed", type(metric).__name__)
            per_row = [{s.name: MetricValue.nan("metric_error") for s in mspecs} for _ in samples]
            del exc
        for row, new in zip(values, per_row, strict=True):
            row.update(new)
    seen: set[str] = set()
    for s in specs:
        if s.name in seen:
            raise RagExpError(f"two metrics declare the column {s.name!r}; rename one in the metrics config")
        seen.add(s.name)
    return specs, values


def evaluate(
    dataset: EvalDataset,
    target: Target,
    metrics: Sequence[Metric],
    *,
    progress: bool = True,
    max_concurrency: int = 1,
    seed: int = 0,
) -> EvalResult:
    """Prepare the target, answer every sample, score every metric and aggregate.

    Args:
        dataset: Samples and corpus.
        target: System under test (its ``prepare`` is called first). A target with an
            ``answer_many(samples, progress=…)`` method answers all samples in one call (e.g.
            concurrently, :class:`~rag_experiments.targets.http.HttpTarget`); it must return one
            response per sample, in order, and never raise.
        metrics: Metric groups; their column names must be distinct.
        progress: Show progress bars.
        max_concurrency: Samples answered at once by ``target.answer`` in threads (1 = in
            order, one by one); the target must then be thread-safe (the baseline is; its
            embedded model serialises its own calls).
        seed: Seed of the bootstrap confidence intervals.

    Returns:
        The full :class:`EvalResult` (with the judge audit of metrics that offer ``audit()``).
    """
    started = time.perf_counter()
    target.prepare(dataset)
    samples = list(dataset.samples)
    responses = _answer_all(target, samples, progress, max_concurrency)
    specs, values = _score_all(metrics, samples, responses)
    aggs = aggregate([s.name for s in specs], values, [s.question_type for s in samples], seed=seed)
    audit, run_values = collect_audit(metrics, samples)
    latencies = [r.latency_ms for r in responses if r.error is None]
    counts = {
        "n_samples": float(len(samples)),
        "n_failed": float(sum(1 for r in responses if r.error)),
        "n_unanswerable": float(sum(1 for s in samples if not s.answerable)),
        "duration_s": time.perf_counter() - started,
        "latency_ms_p50": percentile(latencies, 50),
        "latency_ms_p95": percentile(latencies, 95),
    }
    return EvalResult(samples, responses, values, specs, aggs, counts, audit, run_values)


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

    Returns:
        ``(run_id, result)``.

    Raises:
        RunFailedError: More than ``max_failure_rate`` of the samples failed (after logging).
    """
    with tracker.start_run(
        params=params, config_yaml=config_yaml, tags=dict(tags or {}), parent_run_id=parent_run_id
    ) as run_id:
        result = evaluate_in_run(
            dataset, target, metrics, tracker, max_failure_rate=max_failure_rate, progress=progress,
            seed=seed,
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
    max_concurrency: int = 1,
    seed: int = 0,
) -> EvalResult:
    """Evaluate and log into the tracker's open run (the caller owns the run, e.g. to build the
    target inside it so a build error ends as a FAILED run).

    Logs the dataset input and digest, the per-query table (``per_query.json`` +
    ``per_query_results.csv``), ``average_results.csv``, the metric specs, metrics (means,
    ``_n_valid``, ``_ci_low``/``_ci_high``, per-type values, counts, judge usage), tags (target
    identity) and, with judged metrics, ``judge_audit.jsonl``. Everything is logged before the
    failure-rate check.

    Args:
        dataset: Samples and corpus.
        target: System under test.
        metrics: Metric groups.
        tracker: Where results go; a run must be open (``tracker.start_run``).
        max_failure_rate: Highest acceptable share of samples whose target failed.
        progress: Show progress bars.
        max_concurrency: Samples answered at once (see :func:`evaluate`).
        seed: Seed of the bootstrap confidence intervals.

    Returns:
        The evaluation's :class:`EvalResult`.

    Raises:
        RunFailedError: More than ``max_failure_rate`` of the samples failed (after logging).
    """
    tracker.log_dataset(
        dataset.name,
        dataset.digest,
        dataset.source,
        [s.model_dump(mode="json") for s in dataset.samples],
    )
    result = evaluate(dataset, target, metrics, progress=progress, max_concurrency=max_concurrency,
                      seed=seed)
    tracker.set_tags(target.describe())
    tracker.log_table(result.rows(), name="per_query")
    tracker.log_csv(result.average_rows(), "average_results.csv")
    tracker.log_dict(
        {s.name: {"higher_is_better": s.higher_is_better, "range": [s.low, s.high],
                  "description": s.description} for s in result.specs},
        "metric_specs.json",
    )
    if dataset.skipped:
        tracker.log_dict(dataset.skipped, "skipped_files.json")
    if result.audit:
        tracker.log_text(to_jsonl(result.audit), "judge_audit.jsonl")
    tracker.log_metrics(result.metrics())
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
    return result
