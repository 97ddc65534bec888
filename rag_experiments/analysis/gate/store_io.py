"""Every MLflow call of the gate, behind small functions: open the store, read a run as a plain
:class:`RunFacts`, its metric columns and per-query table, resolve a run reference (``last``)
or a baseline alias, set an alias, write the gate's tags and artifacts on the candidate. No
other module of :mod:`rag_experiments.analysis.gate` imports MLflow: they hold the store only as
the opaque :data:`Store` these functions take and return."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import mlflow
import pandas as pd
from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from rag_experiments.analysis.gate.rules import LAST, check_alias_name
from rag_experiments.analysis.runs import MetricInfo, load_specs
from rag_experiments.common.uri import require_existing_store, resolve_tracking_uri
from rag_experiments.errors import ConfigError, TrackingError
from rag_experiments.tracking.resilience import Outage
from rag_experiments.tracking.store import find_runs, get_run, open_store, read_table

Store = mlflow.MlflowClient
"""The handle of an open store (:func:`open_store`, :func:`open_existing_store`); callers pass
it back to this module's functions and never call it themselves."""

ALIAS_TAG = "rag_exp.alias."
"""Experiment tag prefix of a baseline alias: ``rag_exp.alias.<name> = <run id>``."""


@dataclass(frozen=True)
class RunFacts:
    """What the gate reads of a logged run.

    Attributes:
        run_id: MLflow run id.
        experiment_id: Id of the run's experiment.
        status: ``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED`` or ``SCHEDULED``.
        tags: The run's tags.
        params: The run's params (strings, as logged).
        metrics: The run's latest value of each metric.
    """

    run_id: str
    experiment_id: str
    status: str
    tags: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)


def _facts(run: Run) -> RunFacts:
    return RunFacts(
        run.info.run_id,
        run.info.experiment_id,
        run.info.status,
        dict(run.data.tags),
        dict(run.data.params),
        dict(run.data.metrics),
    )


def open_existing_store(uri: str) -> Store:
    """:func:`~rag_experiments.tracking.store.open_store`, refusing a sqlite file that does not
    exist (MLflow would create an empty store there, e.g. ``mlruns.db`` in a folder where
    ``rag-exp gate last`` was typed by mistake).

    Raises:
        TrackingError: No such sqlite file, or the store cannot be opened.
    """
    require_existing_store(uri)
    return open_store(uri)


def read_run(store: Store, run_id: str) -> RunFacts:
    """The run ``run_id`` of ``store``.

    Raises:
        TrackingError: No such run in the store (the message names the store).
    """
    return _facts(get_run(store, run_id))


def read_metric_specs(store: Store, run_id: str) -> list[MetricInfo]:
    """The run's metric columns (its ``metric_specs.json``), in logged order.

    Raises:
        TrackingError: The artifact is missing or unreadable.
    """
    return load_specs(store, run_id)


def read_per_query(store: Store, run_id: str) -> pd.DataFrame:
    """The run's per-query table (``per_query_results.csv``; ``id`` read as strings).

    Raises:
        TrackingError: The run or its table cannot be fetched.
    """
    return read_table(store, run_id)


def resolve_run(store: Store, ref: str, experiment: str) -> str:
    """The run id ``ref`` names: :data:`~.rules.LAST` = the newest FINISHED run of
    ``experiment`` (by start time; a ``rag-exp compare`` run is not an evaluation run and is
    skipped), anything else is taken as a run id.

    Raises:
        TrackingError: ``last`` in an experiment without a finished evaluation run.
    """
    if ref != LAST:
        return ref
    exp = store.get_experiment_by_name(experiment)
    runs = (
        find_runs(
            store,
            [exp.experiment_id],
            "attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
        )
        if exp is not None
        else []
    )
    runs = [r for r in runs if "compare.run_a" not in r.data.tags]
    if not runs:
        raise TrackingError(
            f"`last`: experiment {experiment!r} at {store.tracking_uri} has no finished run; "
            "check --experiment and --tracking-uri"
        )
    return runs[0].info.run_id


def resolve_baseline(store: Store, candidate: RunFacts, ref: str) -> str:
    """The run id ``ref`` names: an alias of the candidate's experiment (experiment tag
    ``rag_exp.alias.<ref>``, set by ``rag-exp promote``), else ``ref`` itself as a run id.

    Raises:
        ConfigError: ``ref`` is neither an alias of the experiment nor a run of the store.
    """
    experiment = store.get_experiment(candidate.experiment_id)
    target = experiment.tags.get(ALIAS_TAG + ref)
    if target:
        return target
    try:
        store.get_run(ref)
    except MlflowException:
        aliases = sorted(
            k.removeprefix(ALIAS_TAG) for k in experiment.tags if k.startswith(ALIAS_TAG)
        )
        raise ConfigError(
            f"baseline {ref!r} is neither an alias of experiment {experiment.name!r} "
            f"(aliases: {', '.join(aliases) or 'none'}) nor a run at {store.tracking_uri}; "
            f"set it with `rag-exp promote <run id> --alias {ref}` or pass a run id"
        ) from None
    return ref


def check_baseline(tracking_uri: str, experiment: str, ref: str) -> None:
    """Refuse a baseline that is neither an alias of ``experiment`` (``rag-exp promote``) nor a
    run of the store (checked before any work, as :func:`resolve_baseline` reads it after).

    Raises:
        ConfigError: ``ref`` is no alias of ``experiment`` and no run id at ``tracking_uri``.
        TrackingError: The store cannot be read.
    """
    store = open_store(tracking_uri)
    exp = store.get_experiment_by_name(experiment)
    tags = exp.tags if exp is not None else {}
    if tags.get(ALIAS_TAG + ref):
        return
    try:
        store.get_run(ref)
    except MlflowException:
        aliases = sorted(k.removeprefix(ALIAS_TAG) for k in tags if k.startswith(ALIAS_TAG))
        raise ConfigError(
            f"gate.baseline={ref!r} is neither an alias of experiment {experiment!r} "
            f"(aliases: {', '.join(aliases) or 'none'}) nor a run at {store.tracking_uri}; "
            f"set it with `rag-exp promote <run id> --alias {ref}` or pass a run id"
        ) from None


def set_alias(tracking_uri: str, run_id: str, alias: str, retry_s: float = 120.0) -> str:
    """Point alias ``alias`` of the run's experiment at ``run_id`` (experiment tag
    ``rag_exp.alias.<alias>``; MLflow 3 has aliases for registered models only, so the
    experiment tag is the place for a run's). Returns the experiment's name.

    Raises:
        ConfigError: An alias that is empty, holds characters a tag key refuses, or is
            reserved (:func:`~.rules.check_alias_name`).
        TrackingError: The run is missing or the store refuses the tag.
    """
    check_alias_name(alias)
    store = open_store(tracking_uri)
    run = get_run(store, run_id)
    outage = Outage(resolve_tracking_uri(tracking_uri), retry_s)
    try:
        outage.call(
            "alias", store.set_experiment_tag, run.info.experiment_id, ALIAS_TAG + alias, run_id
        )
    except MlflowException as exc:
        raise TrackingError(f"cannot set alias {alias!r}: {exc.message}") from exc
    return store.get_experiment(run.info.experiment_id).name


def write_gate_result(
    tracking_uri: str,
    run_id: str,
    tags: Mapping[str, str],
    texts: Mapping[str, str],
    retry_s: float = 120.0,
) -> None:
    """Set ``tags`` on run ``run_id``, then log each of ``texts`` (``{artifact path: text}``)
    as a text artifact, in the given orders; calls retried through a tracking-server outage
    (:class:`~rag_experiments.tracking.resilience.Outage`).

    Raises:
        TrackingError: The store refuses a tag or an artifact.
    """
    store = open_store(tracking_uri)
    outage = Outage(resolve_tracking_uri(tracking_uri), retry_s)
    try:
        for key, value in tags.items():
            outage.call(f"tag {key}", store.set_tag, run_id, key, value)
        for path, text in texts.items():
            outage.call(path, store.log_text, run_id, text, path)
    except MlflowException as exc:
        raise TrackingError(f"cannot log the gate result on run {run_id}: {exc.message}") from exc
