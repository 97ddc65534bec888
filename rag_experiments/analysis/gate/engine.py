"""The gate as one step: read the candidate and baseline runs through
:mod:`~rag_experiments.analysis.gate.store_io`, refuse or mark undecided what cannot be
compared (a sweep parent, a failed run, different questions), apply the rules
(:func:`~rag_experiments.analysis.gate.statistics.evaluate_tables`), print the lines, write the
JUnit XML and Markdown asked for and log the result on the candidate run."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rag_experiments.analysis.gate import store_io
from rag_experiments.analysis.gate.results import GateResult
from rag_experiments.analysis.gate.rules import FAIL, GateSettings, check_bounds
from rag_experiments.analysis.gate.statistics import all_undecided, evaluate_tables
from rag_experiments.analysis.gate.store_io import RunFacts, Store
from rag_experiments.errors import ConfigError, DatasetError, TrackingError
from rag_experiments.tracking.names import sanitize_metric_name

QUESTIONS_DIGEST_TAG = "dataset.questions_digest"
"""Run tag: digest of the questions, references and corpus, without the recorded answers."""

JUDGE_SD = "judge_sd"
"""Suffix of the run metric ``<metric>.judge_sd`` (pooled within-row SD σ of the judge)."""

JUDGE_REPEATS_PARAM = "judge.repeats"
"""Param holding the number of judge repeats per (row, metric)."""

SWEEP_PARENT_TAG = "sweep.dir"
"""Tag of a sweep's parent run (:mod:`rag_experiments.tracking.sweep`): it has no per-query
results of its own."""


def judge_sd(run: RunFacts, metric: str) -> tuple[float, int] | None:
    """``(judge_sd, repeats)`` a run logged for ``metric`` (metric ``<metric>.judge_sd``, param
    ``judge.repeats``), or None when either is missing or unusable."""
    sd = run.metrics.get(sanitize_metric_name(f"{metric}.{JUDGE_SD}"))
    repeats = run.params.get(JUDGE_REPEATS_PARAM)
    if sd is None or repeats is None:
        return None
    try:
        r = int(float(repeats))
    except ValueError:
        return None
    return (float(sd), r) if r >= 1 and math.isfinite(sd) else None


def questions_digest(run: RunFacts) -> str | None:
    """The digest that says which questions a run evaluated: ``dataset.questions_digest``
    when logged, else ``dataset.digest``."""
    tags = run.tags
    return tags.get(QUESTIONS_DIGEST_TAG) or tags.get("dataset.digest")


def no_results(run: RunFacts, *, finished: bool = False) -> str:
    """Why ``run`` has no per-query results to gate, or "" when it may have them: a sweep
    parent (tag :data:`SWEEP_PARENT_TAG`), a FAILED or KILLED run (any run not FINISHED with
    ``finished``: a gate of logged runs; the end-of-run gate reads its own RUNNING run)."""
    run_id, status = run.run_id, run.status
    if SWEEP_PARENT_TAG in run.tags:
        return (
            f"run {run_id} is a sweep parent and has no per-query results; gate one of its "
            "child runs (rag-exp report <parent> lists them)"
        )
    if status in ("FAILED", "KILLED") or (finished and status != "FINISHED"):
        return (
            f"run {run_id} is {status}, not FINISHED, and has no complete per-query results; "
            "gate a finished run (rag-exp run … resume=<id> finishes a stopped one)"
        )
    return ""


def check_gate_runs(store: Store, candidate_id: str, baseline_ref: str | None) -> None:
    """Refuse, before the gate, runs it cannot read: an unknown candidate or baseline (alias or
    run id), or one that is a sweep parent or not FINISHED (:func:`no_results`). ``rag-exp
    gate`` calls it so that a wrong input is one error line (exit 2), not a line per rule.

    Raises:
        TrackingError: The candidate is not a run of the store.
        ConfigError: An unknown baseline, or a run with no per-query results to gate.
    """
    cand = store_io.read_run(store, candidate_id)
    runs = [cand]
    if baseline_ref:
        runs.append(store_io.read_run(store, store_io.resolve_baseline(store, cand, baseline_ref)))
    for run in runs:
        why = no_results(run, finished=True)
        if why:
            raise ConfigError(why)


def gate_runs(
    tracking_uri: str,
    candidate_id: str,
    baseline_ref: str | None,
    settings: GateSettings,
) -> GateResult:
    """Read both runs from the store and apply the rules (:func:`~.statistics.evaluate_tables`).

    Args:
        tracking_uri: Store holding both runs.
        candidate_id: The candidate run id.
        baseline_ref: A run id or an alias of the candidate's experiment; None for a gate of
            absolute bounds only.
        settings: The rules.

    Returns:
        The result; an unknown baseline (alias or run), ``max_drop`` rules without a
        baseline, a sweep parent or FAILED/KILLED run (:func:`no_results`), different
        questions or too few rows make it undecided (exit 2, the reason in ``problem`` or the
        rule's line), never an error (``rag-exp gate`` refuses the wrong inputs before, as
        one error line: :func:`check_gate_runs`).

    Raises:
        TrackingError: The candidate run or a run's table cannot be read.
        ConfigError: A rule's ``min``/``max`` lies outside its metric's range
            (:func:`~.rules.check_bounds`).
    """
    store = store_io.open_store(tracking_uri)
    cand = store_io.read_run(store, candidate_id)
    result = GateResult(candidate_id, "", baseline_ref or "", alpha=settings.alpha)
    base = None
    try:
        if baseline_ref is None and settings.needs_baseline:
            raise ConfigError(
                "the rules have max_drop but no baseline was given: pass --baseline <run id | "
                "alias> (gate.baseline=… in a run)"
            )
        if baseline_ref:
            result.baseline = store_io.resolve_baseline(store, cand, baseline_ref)
            base = store_io.read_run(store, result.baseline)
    except (ConfigError, TrackingError) as exc:
        result.problem = str(exc)
    unusable = [why for why in (no_results(cand), base and no_results(base)) if why]
    if not result.problem and unusable:
        result.problem = unusable[0]
    elif base is not None and questions_digest(cand) != questions_digest(base):
        result.problem = (
            f"the runs evaluated different questions (dataset digest of candidate "
            f"{candidate_id}: {questions_digest(cand)} vs baseline {result.baseline}: "
            f"{questions_digest(base)}); gate runs of one dataset"
        )
    if result.problem:
        result.results = all_undecided(settings, result.problem)
        return result
    base_id = result.baseline
    cand_specs = store_io.read_metric_specs(store, candidate_id)
    check_bounds(settings, cand_specs)
    cand_table = store_io.read_per_query(store, candidate_id)
    base_table, noise, base_names = None, {}, None
    if base is not None:
        base_names = {s.name for s in store_io.read_metric_specs(store, base_id)}
        base_table = store_io.read_per_query(store, base_id)
        for rule in settings.rules:
            pair = (judge_sd(base, rule.metric), judge_sd(cand, rule.metric))
            if pair[0] is not None and pair[1] is not None:
                noise[rule.metric] = pair
    try:
        result.results = evaluate_tables(
            cand_table, base_table, cand_specs, settings, noise=noise, baseline_metrics=base_names
        )
    except DatasetError as exc:  # no sample id in common
        result.problem = str(exc)
        result.results = all_undecided(settings, result.problem)
    return result


def log_gate(tracking_uri: str, result: GateResult, retry_s: float = 120.0) -> None:
    """Log the result on the candidate run: tags ``gate.result`` (pass|fail|undecided),
    ``gate.baseline`` (run id), ``gate.baseline_ref`` (as named), ``gate.failed`` (the failed
    rules' names) and the artifacts ``gate/junit.xml``, ``gate/summary.md``,
    ``gate/gate.json``; calls retried through a tracking-server outage
    (:class:`~rag_experiments.tracking.resilience.Outage`).

    Raises:
        TrackingError: The store refuses the tags or artifacts.
    """
    tags = {
        "gate.result": result.status,
        "gate.baseline": result.baseline,
        "gate.baseline_ref": result.baseline_ref,
        "gate.failed": "; ".join(r.name for r in result.results if r.status == FAIL)[:5000],
    }
    texts = {
        "gate/junit.xml": result.junit_xml(),
        "gate/summary.md": result.markdown(),
        "gate/gate.json": json.dumps(result.to_json(), indent=2, ensure_ascii=False),
    }
    store_io.write_gate_result(tracking_uri, result.candidate, tags, texts, retry_s)


def run_gate(
    tracking_uri: str,
    candidate: str,
    baseline: str | None,
    settings: GateSettings,
    *,
    junit: str | None = None,
    markdown: str | None = None,
    log: bool = True,
    retry_s: float = 120.0,
) -> GateResult:
    """Gate ``candidate`` against ``baseline``: print one line per rule and the summary, write
    the JUnit XML and Markdown files asked for, log the result on the candidate run. A baseline
    that resolves to the candidate itself gets a warning line on stderr (decided as usual).

    Returns:
        The result (``.exit_code`` is the process exit code).

    Raises:
        TrackingError: The candidate cannot be read or the result cannot be logged.
        ConfigError: Unknown baseline alias, ``max_drop`` rules without a baseline.
    """
    result = gate_runs(tracking_uri, candidate, baseline, settings)
    if result.baseline == result.candidate:  # e.g. `gate last` right after `promote last`
        print(
            f"warning: the candidate is the baseline ({result.baseline_ref} is run "
            f"{result.candidate}): every max_drop rule compares the run with itself",
            file=sys.stderr,
            flush=True,
        )
    print("\n".join(result.lines()), flush=True)
    # the Markdown is appended: $GITHUB_STEP_SUMMARY is shared by a job's steps
    for path, text, mode in ((junit, result.junit_xml(), "w"), (markdown, result.markdown(), "a")):
        if path:
            out = Path(path)
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open(mode, encoding="utf-8") as f:
                f.write(text)
    if log:
        log_gate(tracking_uri, result, retry_s)
    return result
