"""Every MLflow call of the gate, behind small functions: open the store, read a run as a plain
:class:`RunFacts`, its metric columns and per-query table, resolve a run reference (``last``)
or a baseline alias, set an alias, write the gate's tags and artifacts on the candidate. No
other module of :mod:`rag_experiments.analysis.gate` imports MLflow: they hold the store only as
the opaque :data:`Store` these functions take and return."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pandas as pd

from rag_experiments.analysis.gate.rules import LAST, check_alias_name
from rag_experiments.analysis.runs import MetricInfo, load_specs, open_run_store
from rag_experiments.common.uri import require_existing_store, resolve_tracking_uri
from rag_experiments.errors import ConfigError, TrackingError
from rag_experiments.tracking.record import TAGS
from rag_experiments.tracking.resilience import Outage
from rag_experiments.tracking.store import RunRecord, RunStore

Store = RunStore
"""The handle of an open store (:func:`open_store`, :func:`open_existing_store`)."""

RunFacts = RunRecord
"""What the gate reads of a logged run: id, experiment, status, tags, params, metrics."""

ALIAS_TAG = "rag_exp.alias."
"""Experiment tag prefix of a baseline alias: ``rag_exp.alias.<name> = <run id>``."""


def open_store(uri: str) -> Store:
    """The store at ``uri``, read as the gate reads it: each run it returns first declares
    the metric classes its params name (:func:`~rag_experiments.analysis.runs.open_run_store`).

    Raises:
        TrackingError: The store cannot be opened.
    """
    return open_run_store(uri)


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
    """The run ``run_id`` of ``store``, its tags with those kept in ``tags.json``
    (``dataset.questions_digest``; :meth:`~rag_experiments.tracking.store.RunStore.all_tags`).

    Raises:
        TrackingError: No such run in the store (the message names the store).
    """
    run = store.get_run(run_id)
    return dataclasses.replace(run, tags=store.all_tags(run))


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
    return store.read_table(run_id)


def resolve_run(store: Store, ref: str, experiment: str) -> str:
    """The run id ``ref`` names: :data:`~.rules.LAST` = the newest FINISHED run of
    ``experiment`` (by start time; a ``rag-exp compare`` run is not an evaluation run and is
    skipped), anything else is taken as a run id.

    Raises:
        TrackingError: ``last`` in an experiment without a finished evaluation run.
    """
    if ref != LAST:
        return store.resolve_run_id(ref)  # a full id or the UI's 8-character prefix
    exp = store.experiment_by_name(experiment)
    runs = (
        store.find_runs(
            [exp.experiment_id],
            "attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
        )
        if exp is not None
        else []
    )
    runs = [r for r in runs if TAGS.compare_run_a not in r.tags]
    if not runs:
        raise TrackingError(
            f"`last`: experiment {experiment!r} at {store.uri} has no finished run; "
            "check --experiment and --tracking-uri"
        )
    return runs[0].run_id


def resolve_baseline(store: Store, candidate: RunFacts, ref: str) -> str:
    """The run id ``ref`` names: an alias of the candidate's experiment (experiment tag
    ``rag_exp.alias.<ref>``, set by ``rag-exp promote``), else ``ref`` itself as a run id.

    Raises:
        ConfigError: ``ref`` is neither an alias of the experiment nor a run of the store.
    """
    tags = store.experiment_tags(candidate.experiment_id)
    name = store.experiment_name(candidate.experiment_id)
    return _alias_or_run(store, tags, ref, f"baseline {ref!r}", name)


def check_baseline(tracking_uri: str, experiment: str, ref: str) -> None:
    """Refuse a baseline that is neither an alias of ``experiment`` (``rag-exp promote``) nor a
    run of the store (checked before any work, as :func:`resolve_baseline` reads it after).

    Raises:
        ConfigError: ``ref`` is no alias of ``experiment`` and no run id at ``tracking_uri``.
        TrackingError: The store cannot be read.
    """
    store = open_store(tracking_uri)
    exp = store.experiment_by_name(experiment)
    tags = store.experiment_tags(exp.experiment_id) if exp is not None else {}
    _alias_or_run(store, tags, ref, f"gate.baseline={ref!r}", experiment)


def _alias_or_run(
    store: Store, tags: Mapping[str, str], ref: str, what: str, experiment: str
) -> str:
    """The run id ``ref`` names: the alias ``ref`` among the experiment tags ``tags``, else
    ``ref`` itself when it is a run of ``store``.

    Raises:
        ConfigError: Neither (``what`` names ``ref`` in the message, ``experiment`` the
            experiment whose aliases are listed).
    """
    target = tags.get(ALIAS_TAG + ref)
    if target:
        return target
    try:
        ref = store.resolve_run_id(ref)
        store.get_run(ref)
    except TrackingError:
        aliases = sorted(k.removeprefix(ALIAS_TAG) for k in tags if k.startswith(ALIAS_TAG))
        raise ConfigError(
            f"{what} is neither an alias of experiment {experiment!r} "
            f"(aliases: {', '.join(aliases) or 'none'}) nor a run at {store.uri}; "
            f"set it with `rag-exp promote <run id> --alias {ref}` or pass a run id"
        ) from None
    return ref


def set_alias(tracking_uri: str, run_id: str, alias: str, retry_s: float = 120.0) -> str:
    """Point alias ``alias`` of the run's experiment at ``run_id`` (experiment tag
    ``rag_exp.alias.<alias>``; MLflow 3 has aliases for registered models only, so the
    experiment tag is the place for a run's). Returns the experiment's name.

    Raises:
        ConfigError: An alias that is empty, holds characters a tag key refuses, or is
            reserved (:func:`~.rules.check_alias_name`); a run that is not FINISHED (a killed
            run still marked RUNNING, a FAILED one: its metrics are partial or missing, and
            every later gate against the alias would stop undecided).
        TrackingError: The run is missing or the store refuses the tag.
    """
    check_alias_name(alias)
    store = open_store(tracking_uri)
    run = store.get_run(run_id)
    if run.status != "FINISHED":
        why = run.tags.get(TAGS.error, "no error recorded")
        raise ConfigError(
            f"run {run_id} is {run.status} ({why}), not FINISHED: a baseline must be a finished "
            f"run. Finish it with `rag-exp run <its overrides> resume={run_id}` (answers only the "
            "questions its checkpoint lacks), or promote a finished run (`rag-exp promote last` "
            "takes the newest)"
        )
    outage = Outage(resolve_tracking_uri(tracking_uri), retry_s)
    try:
        outage.call("alias", store.set_experiment_tag, run.experiment_id, ALIAS_TAG + alias, run_id)
    except TrackingError as exc:
        raise TrackingError(f"cannot set alias {alias!r}: {exc}") from exc
    return run.experiment_name


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
    except TrackingError as exc:
        raise TrackingError(f"cannot log the gate result on run {run_id}: {exc}") from exc
