"""``rag-exp rerun <run_id>``: repeat a logged run exactly, in a new MLflow run.

What it uses from the original run: the resolved ``config.yaml`` artifact (the run's whole
config), its ``dataset.digest`` tag (the dataset loaded now must have the same digest), and
its model identity tags (``<role>.provider``/``.model``/``.digest``, compared after the rerun).
The new run is tagged ``rerun_of=<run_id>``. With the LLM response cache (``paths.llm_cache``)
still present every generator and judge call is answered from it, so the per-query scores are
identical and no model is called; the command then prints the metrics that changed (normally
none) and the per-query cells that changed.

Values that change by nature are left out of the diff: durations, latencies and LLM usage
counters (a rerun's calls are cache hits).

A run made with ``gate=`` is rerun **without its gate**: a rerun's purpose is identity, which the
report shows; the gate would raise before the report is printed, and its baseline alias may
point at another run by now. Gate the new run with ``rag-exp gate <new run id> --baseline …``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from rag_experiments.analysis.runs import open_run_store, run_values
from rag_experiments.common.cliargs import add_overrides, add_tracking_uri, parse_store_command
from rag_experiments.common.redact import REDACTED
from rag_experiments.errors import ConfigError, DatasetError, TrackingError
from rag_experiments.tracking.record import (
    ARTIFACTS,
    LLM_USAGE_SUFFIXES,
    MODEL_IDENTITY_SUFFIXES,
    TAGS,
)
from rag_experiments.tracking.store import RunRecord, RunStore

log = logging.getLogger(__name__)

RERUN_TAG = TAGS.rerun_of
_VOLATILE_SUFFIXES = (
    "duration_s", "latency_ms_p50", "latency_ms_p95", *LLM_USAGE_SUFFIXES,
    "judge_prompt_tokens", "judge_completion_tokens", "judge_tokens_per_question",
    "n_cached_answers",
)  # fmt: skip
_VOLATILE_COLUMNS = {"latency_ms", "cached"}
_IDENTITY_KEYS = MODEL_IDENTITY_SUFFIXES


@dataclass
class RerunReport:
    """What a rerun found.

    Attributes:
        original_run_id: The run that was repeated.
        new_run_id: The rerun.
        changed_metrics: ``{key: (original, new)}`` for every compared metric that differs
            (NaN on a side where the metric is missing).
        changed_cells: Per-query cells that differ: ``(sample id, column, original, new)``.
        changed_models: ``{tag: (original, new)}`` model identity tags that differ.
        model_calls: ``{role: calls - cache hits}`` of the rerun (0 = all from the cache).
    """

    original_run_id: str
    new_run_id: str
    changed_metrics: dict[str, tuple[float, float]] = field(default_factory=dict)
    changed_cells: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    changed_models: dict[str, tuple[str, str]] = field(default_factory=dict)
    model_calls: dict[str, float] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        """No metric, per-query cell or model identity changed."""
        return not (self.changed_metrics or self.changed_cells or self.changed_models)

    def format(self) -> str:
        """A human-readable diff."""
        lines = [f"rerun of {self.original_run_id}: new run {self.new_run_id}"]
        calls = ", ".join(f"{r} {int(n)}" for r, n in sorted(self.model_calls.items()))
        lines.append(f"  model calls (not from the cache): {calls or 'none'}")
        if self.identical:
            lines.append("  identical: no metric, per-query value or model id changed")
        for key, (old, new) in sorted(self.changed_models.items()):
            lines.append(f"  model {key}: {old} -> {new}")
        for key, (old, new) in sorted(self.changed_metrics.items()):
            lines.append(f"  metric {key}: {old:.6g} -> {new:.6g} ({new - old:+.6g})")
        for sid, col, old, new in self.changed_cells[:50]:
            lines.append(f"  per-query {sid} {col}: {old!r} -> {new!r}")
        if len(self.changed_cells) > 50:
            lines.append(f"  … and {len(self.changed_cells) - 50} more per-query cells")
        return "\n".join(lines)


def load_run_config(store: RunStore, run_id: str, overrides: list[str] | None = None) -> DictConfig:
    """The run's resolved ``config.yaml`` with ``overrides`` (``key=value``) merged in.

    Raises:
        TrackingError: The run or its ``config.yaml`` is missing.
        ConfigError: A value was redacted when logged (a secret) and no override gives it.
    """
    cfg = OmegaConf.create(store.read_text(run_id, ARTIFACTS.config))
    if overrides:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))
    secret = [k for k, v in _leaves(OmegaConf.to_container(cfg)) if v == REDACTED]
    if secret:
        raise ConfigError(
            f"run {run_id} logged {', '.join(secret)} redacted (secrets are never stored): "
            f"give them again, e.g. `rag-exp rerun {run_id} {secret[0]}=…`"
        )
    cfg.resume = None
    return cfg


def rerun(run_id: str, tracking_uri: str, overrides: list[str] | None = None) -> RerunReport:
    """Repeat run ``run_id`` with its logged config and compare the results.

    Args:
        run_id: The run to repeat.
        tracking_uri: Where it is (the rerun is logged there too).
        overrides: ``key=value`` changes (e.g. a secret that was redacted).

    Returns:
        The :class:`RerunReport`.

    Raises:
        TrackingError: The run cannot be found.
        DatasetError: The dataset loaded now does not have the run's digest.
        RagExpError: Any error of the rerun itself (after it was recorded on the new run).
    """
    from rag_experiments.build import load_dataset
    from rag_experiments.job import run_job
    from rag_experiments.tracking.mlflow_tracker import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    store = open_run_store(uri)
    try:
        original = store.get_run(run_id)
    except TrackingError as exc:
        raise TrackingError(f"cannot find run {run_id!r} at {uri}: {exc}") from exc
    cfg = load_run_config(store, run_id, overrides)
    cfg.tracking.uri = uri
    named = any(o.split("=", 1)[0].lstrip("+~") == "run_name" for o in overrides or [])
    if not cfg.get("run_name") and not named:  # the original's name, whatever made it then
        cfg.run_name = original.name or None  # (default names change across versions)
    if cfg.get("gate"):
        log.info("rerun: the run's gate= is not applied (gate the new run with rag-exp gate)")
        cfg.gate = None
    expected = original.tags.get(TAGS.dataset_digest)
    if expected:
        digest = load_dataset(cfg).digest  # the max_samples subset, as the run evaluated
        if digest != expected:
            raise DatasetError(
                f"cannot rerun {run_id}: its dataset had digest {expected[:16]}…, the dataset at "
                f"{cfg.dataset.get('path')} now has {digest[:16]}…. Restore the dataset the run "
                "used (its rows are logged as the run's input) or start a new run"
            )
    else:
        log.warning("run %s has no dataset.digest tag: the dataset is not checked", run_id)
    run_job(cfg, extra_tags={RERUN_TAG: run_id})
    new = _latest_rerun(store, original.experiment_id, run_id)
    report = RerunReport(run_id, new.run_id)
    report.changed_metrics = _metric_diff(run_values(store, original), run_values(store, new))
    was, now = store.all_tags(original), store.all_tags(new)  # identities: in tags.json
    report.changed_models = {
        k: (v, now.get(k, ""))
        for k, v in was.items()
        if k.endswith(_IDENTITY_KEYS) and "." in k and now.get(k, "") != v
    }
    report.model_calls = {
        k[: -len(".llm_calls")]: v - new.metrics.get(k.replace("llm_calls", "llm_cache_hits"), 0.0)
        for k, v in new.metrics.items()
        if k.endswith(".llm_calls")
    }
    report.changed_cells = _table_diff(_per_query(store, run_id), _per_query(store, new.run_id))
    return report


def _latest_rerun(store: RunStore, experiment_id: str, run_id: str) -> RunRecord:
    runs = store.find_runs(
        [experiment_id],
        f"tags.{RERUN_TAG} = '{run_id}'",
        order_by=["attributes.start_time DESC"],
    )
    if not runs:
        raise TrackingError(f"the rerun of {run_id} was not found in experiment {experiment_id}")
    return runs[0]


def _metric_diff(old: dict[str, float], new: dict[str, float]) -> dict[str, tuple[float, float]]:
    out = {}
    for key in sorted(set(old) | set(new)):
        if key.endswith(_VOLATILE_SUFFIXES):
            continue
        a, b = old.get(key, math.nan), new.get(key, math.nan)
        if not (a == b or (math.isnan(a) and math.isnan(b))):
            out[key] = (a, b)
    return out


def _per_query(store: RunStore, run_id: str) -> pd.DataFrame | None:
    """The run's per-query table as logged (cells as in the CSV, so every column compares), or
    None when it has none (nothing to compare)."""
    try:
        return store.read_table(run_id)
    except TrackingError:
        return None


def _table_diff(
    old: pd.DataFrame | None, new: pd.DataFrame | None
) -> list[tuple[str, str, Any, Any]]:
    """Cells of the per-query tables that differ (rows matched by sample id)."""
    if old is None or new is None:
        return []
    a = old.set_index("id")
    b = new.set_index("id")
    cells: list[tuple[str, str, Any, Any]] = []
    for sid in [i for i in a.index if i not in b.index]:
        cells.append((str(sid), "<row>", "present", "missing"))
    for sid in [i for i in b.index if i not in a.index]:
        cells.append((str(sid), "<row>", "missing", "present"))
    common = [i for i in a.index if i in b.index]
    for col in [c for c in a.columns if c in b.columns and c not in _VOLATILE_COLUMNS]:
        for sid in common:
            x, y = a.at[sid, col], b.at[sid, col]
            if not (x == y or (pd.isna(x) and pd.isna(y))):
                cells.append((str(sid), col, x, y))
    return cells


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [kv for k, v in node.items() for kv in _leaves(v, f"{prefix}{k}.")]
    if isinstance(node, list):
        return [kv for i, v in enumerate(node) for kv in _leaves(v, f"{prefix}{i}.")]
    return [(prefix.rstrip("."), node)]


def rerun_command(argv: list[str]) -> int:
    """``rag-exp rerun <run_id> [--tracking-uri URI] [key=value …]``; exit code 0."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="rag-exp rerun",
        description="Repeat a logged run with its config.yaml (dataset digest checked), as a new "
        "run tagged rerun_of, and print the metrics and per-query values that changed.",
    )
    parser.add_argument("run_id", help="the MLflow run to repeat")
    add_tracking_uri(parser, "the run")
    add_overrides(parser)
    opts = parse_store_command(parser, argv)
    report = rerun(opts.run_id, opts.tracking_uri, opts.overrides)
    print(report.format())
    return 0
