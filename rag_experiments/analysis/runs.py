"""Read what :func:`~rag_experiments.runner.evaluate_in_run` logged: a run's metric specs
(``metric_specs.json``), its summary values (:func:`run_values`), its per-query table and its
dataset digest.

The per-query table holds one column per metric under its canonical name (``nDCG@10``); run
metrics are logged under the sanitised key (``nDCG_at_10``,
:func:`~rag_experiments.tracking.names.sanitize_metric_name`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlparse
from urllib.request import url2pathname

import pandas as pd

from rag_experiments.config.choices import option_of
from rag_experiments.errors import TrackingError
from rag_experiments.metrics.aggregate import Aggregate, to_metrics
from rag_experiments.metrics.definitions import register_run_metrics
from rag_experiments.metrics.keys import KEY_METRICS
from rag_experiments.tracking.names import sanitize_metric_name
from rag_experiments.tracking.record import ARTIFACTS
from rag_experiments.tracking.store import RunRecord, RunStore


def open_run_store(uri: str, *, where: str = "--tracking-uri") -> RunStore:
    """The :class:`~rag_experiments.tracking.store.RunStore` of a command that reads runs:
    each run it returns first imports the metric classes the run's params name
    (:func:`~rag_experiments.metrics.definitions.register_run_metrics`), so a user's metric
    is declared in this process as it was in the run's own.

    Args:
        uri: The tracking URI (``--tracking-uri``).
        where: What names the store in error messages.

    Raises:
        TrackingError: The store cannot be opened (see ``RunStore``).
    """
    return RunStore(uri, where=where, on_run=register_run_metrics)


@dataclass(frozen=True)
class MetricInfo:
    """A metric column as ``metric_specs.json`` declares it.

    Attributes:
        name: Canonical name (``nDCG@10``).
        higher_is_better: Direction of improvement.
        low: Lowest possible value.
        high: Highest possible value.
    """

    name: str
    higher_is_better: bool = True
    low: float = 0.0
    high: float = 1.0


def load_specs(store: RunStore, run_id: str) -> list[MetricInfo]:
    """The run's metric columns from its ``metric_specs.json``, in logged order.

    Raises:
        TrackingError: The artifact is missing or unreadable (a run not logged by
            ``rag-exp run``).
    """
    path = ARTIFACTS.metric_specs
    try:
        raw = json.loads(store.read_text(run_id, path))
    except (TrackingError, ValueError) as exc:
        raise TrackingError(
            f"cannot read {path} of run {run_id} at {store.uri}: {exc}. "
            "Only runs logged by `rag-exp run` can be compared or reported"
        ) from exc
    out = []
    for name, spec in raw.items():
        low, high = (spec.get("range") or [0.0, 1.0])[:2]
        out.append(
            MetricInfo(name, bool(spec.get("higher_is_better", True)), float(low), float(high))
        )
    return out


def run_values(store: RunStore, run: RunRecord) -> dict[str, float]:
    """Every summary value of a run under its sanitised metric key: the run's logged metrics
    and, for the aggregates a headline run did not log as metrics
    (:mod:`~rag_experiments.tracking.selection`), the values of its ``average_results.csv``
    (mean, ``_ci_low``, ``_ci_high``, ``_n_valid``, per type under ``by_type/<type>/``, as
    :func:`~rag_experiments.metrics.aggregate.to_metrics` names them). A run without that table (not
    an evaluation run) has its logged metrics only.

    Args:
        store: The run's store.
        run: The run.

    Returns:
        ``{sanitised key: value}``.

    Raises:
        TrackingError: ``average_results.csv`` exists but cannot be read.
    """
    out: dict[str, float] = {}
    path = ARTIFACTS.average_csv
    if store.has_artifact(run.run_id, path):
        try:
            text = store.read_text(run.run_id, path)
            frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""])
        except (TrackingError, ValueError) as exc:
            raise TrackingError(
                f"cannot read {path} of run {run.run_id} at {store.uri}: {exc}"
            ) from exc
        aggs = [
            Aggregate(
                str(r["metric"]),
                str(r["group"]),
                float(r["mean"]),
                int(r["n_valid"]),
                int(r["n_nan"]),
                float(r["ci_low"]),
                float(r["ci_high"]),
            )  # fmt: skip
            for r in frame.to_dict("records")
        ]
        out.update({sanitize_metric_name(k): v for k, v in to_metrics(aggs).items()})
    out.update(run.metrics)
    return out


def artifact_location(store: RunStore, run_id: str, path: str) -> str:
    """Where a run's artifact really is, for a person to open: a local file path for a file
    artifact store (a sqlite store keeps them under ``mlartifacts/…``), else the artifact URI
    (``mlflow-artifacts:/…``, ``s3://…``) followed by the run's page on a tracking server.

    Args:
        store: The run's store.
        run_id: The run.
        path: Run-relative artifact path (``report/report.html``).

    Raises:
        TrackingError: The run cannot be found.
    """
    run = store.get_run(run_id)
    uri = f"{run.artifact_uri.rstrip('/')}/{path}"
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return url2pathname(parsed.path)
    if not parsed.scheme or len(parsed.scheme) == 1:  # a plain path (C:\… on Windows)
        return uri
    tracking = store.uri
    if urlparse(tracking).scheme in ("http", "https"):
        page = f"{tracking.rstrip('/')}/#/experiments/{run.experiment_id}/runs/{run_id}"
        return f"{uri} (run page: {page}, tab Artifacts)"
    return uri


def key_metrics(names: Sequence[str], limit: int = 6) -> list[str]:
    """The :data:`KEY_METRICS` among ``names`` (in that order); the first ``limit`` names when
    none is."""
    present = [m for m in KEY_METRICS if m in names]
    return present or list(names)[:limit]


TARGET_SUFFIX = "._target_"


def typed_params(params: dict[str, str]) -> dict[str, str]:
    """``params`` as the user typed the choices: a swapped config group's
    ``<group>._target_ = <class path>`` becomes ``<group> = <option>``
    (``chunker._target_=rag_experiments.chunking.semantic.SemanticChunker`` →
    ``chunker=semantic``). The option is the bundled config file ``conf/<group>/<option>.yaml``
    built on the schema whose ``_target_`` that class is (several: the group's default in
    ``conf/config.yaml``); when no single option is, the class name (``SemanticChunker``).
    Other params are unchanged, in the same order.
    """
    out: dict[str, str] = {}
    for key, value in params.items():
        if key.endswith(TARGET_SUFFIX):
            group = key.removesuffix(TARGET_SUFFIX)
            out[group] = option_of(group.rsplit(".", 1)[-1], value) or value.rsplit(".", 1)[-1]
        else:
            out[key] = value
    return out
