"""``rag-exp merge <parent_run_id>``: join the shard runs of a sweep into one run.

A sweep over ``shard.index=0,…,N-1`` (:mod:`rag_experiments.data.shard`) leaves one child
run per shard under its parent. ``merge`` checks that every shard is there, FINISHED, and
evaluated the same configuration, then writes one new run (in the parent's experiment, not
nested) that stands for the unsharded evaluation:

* the per-query table: the shards' rows, put back in dataset order;
* the aggregates (means, bootstrap CIs, per-type values) and counts, computed from that
  table by the runner's own :func:`~rag_experiments.runner.summarise` (never averaged
  averages), so every quality metric equals the unsharded run's exactly (the bootstrap
  depends on the row order, hence the reordering);
* with judged metrics: ``judge_audit.jsonl`` joined the same way and the judge usage of
  :func:`~rag_experiments.metrics.audit.collect_audit`; ``judge.errors.<reason>`` and LLM
  usage counters summed over the shards;
* the dataset input, ``n_dropped`` and ``dropped_rows.json`` of the whole dataset, which is
  loaded again from the shards' config (it must be readable where merge runs; each shard's
  logged ``dataset.digest`` must match its part of it);
* with ``judge.repeats`` > 1: the per-query ``<m>.sd`` and ``<m>.flip`` columns joined, and
  ``<m>.judge_sd`` / ``<m>.flip_rate`` recomputed from them by
  :func:`~rag_experiments.metrics.repeats.judge_noise` (the runner's function);
* with ``calibration.labels``: the ``<m>.ppi*`` estimates recomputed over the joined rows by
  :func:`~rag_experiments.metrics.calibration.calibrated_estimates` when the labels file is
  readable where merge runs (else a warning says they were not);
* params: the shards' config with ``shard.count=1`` (the evaluation the run stands for: a
  ``rag-exp rerun`` of it repeats the unsharded run); tags the shards share (target and
  model identity), ``merged_from`` (the shard run ids in shard order), ``shard.count`` and
  ``merge.parent_run_id``; ``dataset.questions_digest`` of the whole dataset (what
  ``rag-exp gate`` compares).

Not merged: durations and latencies are per shard by nature (``shards.duration_s_sum`` /
``_max`` are logged instead of ``duration_s``; ``latency_ms_p50``/``p95`` are recomputed from the
joined rows).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

from omegaconf import OmegaConf

from rag_experiments.common.cliargs import add_overrides, add_tracking_uri, parse_store_command
from rag_experiments.data.shard import select_shard, shard_of
from rag_experiments.errors import ConfigError, DatasetError, TrackingError
from rag_experiments.metrics.audit import USAGE_KEYS, collect_audit
from rag_experiments.metrics.calibration import calibrated_estimates, load_labels
from rag_experiments.metrics.repeats import judge_noise
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.runner import EvalResult, log_result, summarise
from rag_experiments.tracking.mlflow_tracker import MlflowTracker, resolve_tracking_uri
from rag_experiments.tracking.record import (
    ARTIFACTS,
    JUDGE_ERRORS_PREFIX,
    LLM_USAGE_SUFFIXES,
    OWN_TAG_PREFIXES,
    PARAMS,
    TAGS,
    PerQueryRow,
    read_rows,
)
from rag_experiments.tracking.store import RunRecord, RunStore

log = logging.getLogger(__name__)

_Row = TypeVar("_Row")

MERGED_FROM_TAG = TAGS.merged_from
"""Tag of a merged run: the shard run ids in shard order, comma-separated."""

_SHARD_KEYS = (PARAMS.shard_count, PARAMS.shard_index)
_SUMMED_USAGE = tuple(s for s in LLM_USAGE_SUFFIXES if s != ".llm_cache_hit_rate")
"""The usage counters summed over the shards (the hit rate is recomputed from the sums)."""


class ShardMergeError(TrackingError):
    """The parent's children are not a complete set of finished shards of one configuration."""


def shard_runs(store: RunStore, parent_id: str) -> list[RunRecord]:
    """The shard runs of a sweep, in shard order, after checking they can be merged.

    Args:
        store: The tracking store.
        parent_id: The sweep's parent run id.

    Returns:
        One FINISHED run per shard index ``0..N-1``.

    Raises:
        ShardMergeError: The parent does not exist or has no children; a child is not a
            shard (``shard.count`` 1 or not logged); the children disagree on ``shard.count``
            or on any other param; a shard index is missing or has several runs; a shard
            run did not finish (FAILED, KILLED, RUNNING). The message names the shard and run.
    """
    try:
        parent = store.get_run(parent_id)
    except TrackingError as exc:
        raise ShardMergeError(f"cannot find the parent run {parent_id!r}: {exc}") from exc
    children = store.child_runs(parent.experiment_id, parent_id)
    if not children:
        raise ShardMergeError(
            f"run {parent_id} has no child runs: pass the parent run of a sweep over "
            "shard.index (rag-exp run -m shard.count=N shard.index=0,…,N-1)"
        )
    counts = {int(r.params.get(PARAMS.shard_count, 1)) for r in children}
    if len(counts) != 1 or counts == {1}:
        found = ", ".join(
            f"{r.run_id} (shard.count={r.params.get(PARAMS.shard_count, 'not logged')})"
            for r in children
        )
        raise ShardMergeError(
            f"the children of {parent_id} are not the shards of one sharded run: {found}"
        )
    (n,) = counts
    by_index: dict[int, list[RunRecord]] = defaultdict(list)
    for r in children:
        by_index[int(r.params[PARAMS.shard_index])].append(r)
    missing = [i for i in range(n) if i not in by_index]
    if missing:
        raise ShardMergeError(
            f"cannot merge {parent_id}: shard(s) {', '.join(map(str, missing))} of {n} missing "
            "(no child run with that shard.index); run them under the same parent or rerun the "
            "sweep"
        )
    ordered = []
    for i in range(n):
        runs = by_index[i]
        if len(runs) > 1:
            ids = ", ".join(r.run_id for r in runs)
            raise ShardMergeError(f"shard {i} of {n} has {len(runs)} runs ({ids}): expected one")
        (run,) = runs
        if run.status != "FINISHED":
            why = run.tags.get(TAGS.error, "no error recorded")
            raise ShardMergeError(
                f"cannot merge {parent_id}: shard {i} of {n} (run {run.run_id}) is "
                f"{run.status} ({why}); resume it (rag-exp run … resume="
                f"{run.run_id}) before merging"
            )
        ordered.append(run)
    base = _config_params(ordered[0])
    for run in ordered[1:]:
        other = _config_params(run)
        differ = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k))
        if differ:
            raise ShardMergeError(
                f"cannot merge {parent_id}: shard runs {ordered[0].run_id} and "
                f"{run.run_id} differ in {', '.join(differ[:5])}; merge only a sweep over "
                "shard.index (one configuration)"
            )
    return ordered


def _config_params(run: RunRecord) -> dict[str, str]:
    return {k: v for k, v in run.params.items() if k not in _SHARD_KEYS}


def merge(parent_id: str, tracking_uri: str, overrides: list[str] | None = None) -> str:
    """Merge the shard runs under ``parent_id`` into one new run (see the module docstring).

    Args:
        parent_id: The sweep's parent run id.
        tracking_uri: The tracking store of the sweep (the merged run goes there too).
        overrides: ``key=value`` changes to the shards' logged config, e.g. a secret that was
            redacted when logged and is needed to load the dataset (``dataset.password``).

    Returns:
        The merged run's id.

    Raises:
        ShardMergeError: The shards cannot be merged (see :func:`shard_runs`).
        DatasetError: The dataset loaded now is not the one the shards evaluated.
        TrackingError: A run's artifacts cannot be read or the new run cannot be written.
    """
    from rag_experiments.build import load_dataset
    from rag_experiments.commands.rerun import load_run_config
    from rag_experiments.job import dropped_metrics, log_dropped

    uri = resolve_tracking_uri(tracking_uri)
    store = RunStore(uri)
    shards = shard_runs(store, parent_id)
    n = len(shards)
    cfg = load_run_config(store, shards[0].run_id, overrides)
    cfg.tracking.uri = uri
    cfg.shard = {"count": 1, "index": 0}
    dataset = load_dataset(cfg)  # the whole (max_samples) dataset, in dataset order
    for i, run in enumerate(shards):
        expected = run.tags.get(TAGS.dataset_digest)
        digest = select_shard(dataset, n, i).digest
        if expected != digest:
            raise DatasetError(
                f"shard {i} (run {run.run_id}) evaluated dataset digest {expected}, the "
                f"dataset loaded now gives {digest} for that shard: merge where the shards' "
                f"dataset ({cfg.dataset.get('path') or cfg.dataset.get('name')}) is unchanged"
            )
    order = [shard_of(s.id, n) for s in dataset.samples]
    specs = _specs(store, shards[0].run_id)
    names = [s.name for s in specs]
    tables = [read_rows(store.read_table(r.run_id).to_dict("records"), names) for r in shards]
    rows = _interleave(order, tables, dataset.samples, lambda r: r.id)
    audits = [_audit(store, r.run_id) for r in shards]
    result = _result(dataset.samples, rows, specs, order, audits, seed=int(cfg.seed))
    for key, value in _summed(shards).items():
        result.run_values[key] = value
    result.run_values.update(_calibrated(cfg, result))
    experiment = shards[0].experiment_name
    name = shards[0].name or "merged"
    tracker = MlflowTracker(
        uri, experiment, run_name=f"{name}-merged", log_table=bool(cfg.tracking.log_table)
    )
    tags = {
        **_common_tags(store, shards),
        MERGED_FROM_TAG: ",".join(r.run_id for r in shards),
        TAGS.shard_count: str(n),
        TAGS.merge_parent: parent_id,
        TAGS.dataset_questions_digest: dataset.questions_digest,  # of the whole, as job.py
    }
    with tracker.start_run(
        params=OmegaConf.to_container(cfg, resolve=True),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        tags=tags,
    ) as run_id:
        log_dropped(dataset, tracker)
        tracker.log_dataset(
            dataset.name,
            dataset.digest,
            dataset.source,
            [s.model_dump(mode="json") for s in dataset.samples],
        )
        log_result(result, tracker, dataset)
        tracker.log_metrics(dropped_metrics(dataset))
    print(f"merged {n} shards of {parent_id} into run {run_id}\n{tracker.describe_location()}")
    return run_id


def _interleave(
    order: list[int],
    tables: list[list[_Row]],
    samples: list[Sample],
    id_of: Callable[[_Row], str],
) -> list[_Row]:
    """The shards' rows in dataset order: row ``k`` is the next unused row of shard
    ``order[k]`` (each shard kept dataset order), checked against the sample's id."""
    sizes = [sum(1 for o in order if o == i) for i in range(len(tables))]
    for i, (size, table) in enumerate(zip(sizes, tables, strict=True)):
        if size != len(table):
            raise DatasetError(
                f"shard {i} logged {len(table)} per-query rows, its part of the dataset has "
                f"{size} samples: the shard's run is incomplete or its dataset changed"
            )
    cursors = [0] * len(tables)
    out = []
    for sample, shard in zip(samples, order, strict=True):
        row = tables[shard][cursors[shard]]
        cursors[shard] += 1
        row_id = id_of(row)
        if row_id != sample.id:
            raise DatasetError(
                f"shard {shard}'s per-query rows are not in the dataset's order: found id "
                f"{row_id!r} where {sample.id!r} was expected"
            )
        out.append(row)
    return out


def _result(
    samples: list[Sample],
    rows: list[PerQueryRow],
    specs: list[MetricSpec],
    order: list[int],
    audits: list[list[dict[str, Any]] | None],
    *,
    seed: int,
) -> EvalResult:
    """The :class:`EvalResult` of the joined rows: responses and metric values read back from
    the typed rows, aggregates and counts by :func:`summarise`, judge usage by
    :func:`collect_audit`."""
    responses = [
        RagResponse(
            response=row.response,
            retrieved_contexts=row.retrieved_contexts,
            retrieved_ids=row.retrieved_ids,
            retrieved_doc_ids=row.retrieved_doc_ids,
            retrieved_sources=row.retrieved_sources,
            latency_ms=row.latency_ms,
            no_response=row.no_response,
            error=row.error,
            error_message=row.error_message,
            metadata={"cached": row.cached},
        )
        for row in rows
    ]
    values = [
        {s.name: MetricValue(row.values[s.name], row.reasons[s.name]) for s in specs}
        for row in rows
    ]
    aggs, counts = summarise(samples, responses, values, specs, seed=seed)
    audit: list[dict[str, Any]] = []
    run_values: dict[str, float] = {}
    repeated = [s.name for s in specs if s.name in rows[0].sd]
    spread = {c: [row.sd[c] for row in rows] for c in repeated}
    flips = {c: [row.flips.get(c) for row in rows] for c in repeated}
    if any(c not in rows[0].flips for c in repeated):
        log.warning(
            "the shards' per-query tables have <metric>.sd but no <metric>.flip column (logged "
            "before it existed): the merged run has judge_sd but no flip_rate"
        )
    if any(audits) and not all(audits):
        log.warning(
            "only some shards logged judge_audit.jsonl: the merged run has no judge audit and "
            "no judge usage metrics"
        )
    if all(audits):
        joined = _interleave(order, audits, samples, lambda r: str(r["id"]))  # type: ignore[arg-type]
        names = [k for k in joined[0] if k not in ("id", "question_type", *USAGE_KEYS)]
        audit, run_values = collect_audit({k: [r[k] for r in joined] for k in names}, samples)
    run_values.update(judge_noise(spread, flips))  # the runner's judge_sd and flip_rate
    return EvalResult(
        samples, responses, values, specs, aggs, counts, audit, run_values, {}, spread, flips
    )


def _calibrated(cfg: Any, result: EvalResult) -> dict[str, float]:
    """The ``<m>.ppi*`` run values of the joined rows when the run had ``calibration.labels``
    and the file is readable here (as the runner computes them); else empty, with a warning
    when labels were set."""
    node = cfg.get("calibration")
    if node is None or not node.get("labels"):
        return {}
    try:
        labels = load_labels(str(node.labels), power_tuning=bool(node.get("power_tuning", False)))
    except ConfigError as exc:
        log.warning("PPI was not recomputed for the merged run (the shards' values are not "
                    "merged either): %s", exc)  # fmt: skip
        return {}
    ids = [s.id for s in result.samples]
    return calibrated_estimates(labels, ids, result.values)


def _summed(shards: list[RunRecord]) -> dict[str, float]:
    """``judge.errors.<reason>`` and LLM usage counters summed over the shards, the usage hit
    rates recomputed from the sums, and ``shards.duration_s_sum``/``_max``."""
    out: dict[str, float] = defaultdict(float)
    for run in shards:
        for key, value in run.metrics.items():
            if key.startswith(JUDGE_ERRORS_PREFIX) or key.endswith(_SUMMED_USAGE):
                out[key] += value
    for key in [k for k in out if k.endswith(".llm_calls")]:
        hits = out.get(key.replace(".llm_calls", ".llm_cache_hits"), 0.0)
        if out[key]:
            out[key.replace(".llm_calls", ".llm_cache_hit_rate")] = hits / out[key]
    durations = [r.metrics.get("duration_s", math.nan) for r in shards]
    out["shards.duration_s_sum"] = sum(durations)
    out["shards.duration_s_max"] = max(durations)
    return dict(out)


def _common_tags(store: RunStore, shards: list[RunRecord]) -> dict[str, str]:
    """Tags with the same value on every shard (MLflow tags and those kept in ``tags.json``,
    :meth:`~rag_experiments.tracking.store.RunStore.all_tags`), except MLflow's, the
    dataset's, the environment's and errors
    (:data:`~rag_experiments.tracking.record.OWN_TAG_PREFIXES`)."""
    first, *rest = [store.all_tags(r) for r in shards]
    return {
        k: v
        for k, v in first.items()
        if not k.startswith(OWN_TAG_PREFIXES) and all(t.get(k) == v for t in rest)
    }


def _specs(store: RunStore, run_id: str) -> list[MetricSpec]:
    """The metric columns a run declared (``metric_specs.json``, in output order)."""
    data = json.loads(store.read_text(run_id, ARTIFACTS.metric_specs))
    return [
        MetricSpec(name, d["higher_is_better"], d["range"][0], d["range"][1], d["description"])
        for name, d in data.items()
    ]


def _audit(store: RunStore, run_id: str) -> list[dict[str, Any]] | None:
    """A run's ``judge_audit.jsonl`` records, None when it has none."""
    if not store.has_artifact(run_id, ARTIFACTS.judge_audit):
        return None
    text = store.read_text(run_id, ARTIFACTS.judge_audit)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def merge_command(argv: list[str]) -> int:
    """``rag-exp merge <parent_run_id> [--tracking-uri URI]``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp merge",
        description="Join the shard runs of a sweep over shard.index (children of "
        "PARENT_RUN_ID) into one run: the per-query table in dataset order, averages, CIs and "
        "per-type metrics recomputed from it, the dataset input, tag merged_from. Refuses a "
        "missing or unfinished shard.",
    )
    parser.add_argument("parent_run_id", help="the sweep's parent run")
    add_tracking_uri(parser, "the sweep")
    add_overrides(parser)
    opts = parse_store_command(parser, argv)
    merge(opts.parent_run_id, opts.tracking_uri, opts.overrides)
    return 0


__all__ = ["MERGED_FROM_TAG", "ShardMergeError", "merge", "merge_command", "shard_runs"]
