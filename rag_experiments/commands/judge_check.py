"""``rag-exp judge-check``: compose ``conf/judge_check.yaml``, build the judge, run the probes
(:mod:`rag_experiments.qualify.check`), print the report and log it to MLflow experiment
``judges`` (:mod:`rag_experiments.qualify.registry`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rag_experiments.build import (
    build_embedder,
    build_role_chat,
    build_tracker,
    build_verifier,
    model_session,
)
from rag_experiments.config.compose import compose_config
from rag_experiments.errors import ConfigError
from rag_experiments.metrics.audit import nan_to_none
from rag_experiments.qualify.check import JudgeCheck, labeled_probes
from rag_experiments.qualify.config import register_judge_check_config
from rag_experiments.qualify.pairs import LabeledPair, balanced_subset, load_pairs
from rag_experiments.qualify.registry import (
    JUDGES_EXPERIMENT,
    check_metrics,
    qualification_params,
)

register_judge_check_config()

RUN_ID = re.compile(r"[0-9a-f]{32}")
"""An MLflow run id (``judge_check.data`` takes one besides a file)."""


def compose_judge_check(overrides: list[str]) -> DictConfig:
    """Compose ``conf/judge_check.yaml`` with Hydra overrides (``judge=ollama``, ``n=20``).

    Raises:
        ConfigError: An override does not parse or names an unknown key or option.
    """
    return compose_config("judge_check", overrides)


def _labeled_pairs(cfg: DictConfig) -> list[LabeledPair]:
    """The labeled pairs of ``judge_check.data``: a file (:func:`load_pairs`), or the id of a
    run graded with ``rag-exp review --run`` in ``tracking.uri`` (its rows with the people's
    faithfulness verdicts, :func:`~rag_experiments.qualify.graded.graded_pairs`)."""
    data = cfg.judge_check.data
    if data is not None and not Path(str(data)).exists() and RUN_ID.fullmatch(str(data)):
        from rag_experiments.qualify.graded import graded_pairs
        from rag_experiments.tracking.store import RunStore

        return graded_pairs(RunStore(str(cfg.tracking.uri), where="tracking.uri"), str(data))
    return load_pairs(data, str(cfg.judge_check.format))


def run_judge_check(
    cfg: DictConfig, *, judge: Any = None, quiet: bool = False
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Run the check a composed ``judge_check`` config describes and log it.

    Args:
        cfg: The composed config.
        judge: A chat model to use instead of building ``cfg.judge`` (tests).
        quiet: Print nothing (the caller prints the JSON).

    Returns:
        ``({probe: summary dict}, MLflow run id or None when ``judge_check.log=false``)``.

    Raises:
        RagExpError: Bad settings, an unreadable labeled set, or a judge that cannot load.
    """
    settings = cfg.judge_check
    pairs = balanced_subset(
        _labeled_pairs(cfg), None if cfg.n is None else int(cfg.n), seed=int(cfg.seed)
    )
    data_name = str(settings.data) if settings.data else "bundled"
    session = model_session(cfg)  # the response cache and a fresh usage meter
    verifier = build_verifier(cfg.get("verifier"), session)
    probes = verifier_probes(list(settings.probes), verifier is not None)
    needs_judge = any(
        p not in labeled_probes() or "judge" in labeled_probes()[p].requires for p in probes
    )
    model = None
    if needs_judge:
        model = (
            session.build_chat(judge, "judge")
            if judge is not None
            else build_role_chat(cfg.judge, "judge", session)
        )
    embedder = build_embedder(cfg) if "answer_relevancy" in probes else None
    check = JudgeCheck(
        model,
        embedder,
        threshold=float(settings.threshold),
        relevancy_threshold=float(settings.relevancy_threshold),
        seed=int(cfg.seed),
        verifier=verifier,
    )
    qualified = model if model is not None else verifier
    identity = {f"judge.{k}": str(v) for k, v in qualified.describe().items()}
    if not quiet:
        print(
            f"judge-check: {identity.get('judge.provider')}/{identity.get('judge.model')} on "
            f"{len(pairs)} pairs of {data_name} ({', '.join(probes)})",
            file=sys.stderr,
        )
    run_id = None
    if bool(settings.log):
        tracker = build_tracker(
            cfg,
            experiment=JUDGES_EXPERIMENT,
            run_name=f"judge-check-{identity.get('judge.model')}",
        )
        params = {**OmegaConf.to_container(cfg, resolve=True), **qualification_params(identity)}
        with tracker.start_run(
            params=params,
            config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
            tags={"judge_check.data": data_name},
        ):
            try:
                results = check.run(pairs, probes)
            finally:
                tracker.set_tags(session.identity_by_role())
            report = {k: nan_to_none(v.to_dict()) for k, v in results.items()}
            tracker.log_metrics(check_metrics(results))
            tracker.log_dict(report, "judge_check.json")
        run_id = tracker.run_id
    else:
        results = check.run(pairs, probes)
        report = {k: nan_to_none(v.to_dict()) for k, v in results.items()}
    if not quiet:
        for result in results.values():
            print(result.format())
        if run_id is not None:
            print(tracker.describe_location())
    return report, run_id


def verifier_probes(probes: list[str], with_verifier: bool) -> list[str]:
    """The probes a check runs: with a verifier (``verifier=local``/``tei``) the probes whose
    metric requires one (the check qualifies the verifier, not the judge); without, the others
    (a verifier probe cannot run).

    Raises:
        ConfigError: A verifier is set and none of ``probes`` uses it.
    """
    uses = {n for n, c in labeled_probes().items() if "verifier" in c.requires}
    kept = [p for p in probes if (p in uses) == with_verifier]
    if with_verifier and not kept:
        raise ConfigError(
            f"judge_check.probes={probes} has no probe that uses the verifier; add one of "
            f"{sorted(uses)} or set verifier=none"
        )
    return kept


def judge_check_command(argv: list[str]) -> int:
    """``rag-exp judge-check [overrides…] [--json]``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="rag-exp judge-check",
        description="Measure a judge's agreement with labeled pairs through our own metric "
        "prompts (faithfulness, answer relevancy, context relevance, position bias): accuracy, "
        "balanced accuracy, Cohen's kappa with 95% bootstrap intervals, confusion matrix, "
        "judge calls, wall time. Logged to MLflow experiment 'judges'; later runs with the "
        "same judge carry the result as tags. Other arguments are Hydra overrides of "
        "conf/judge_check.yaml (judge=…, n=…, judge_check.data=…).",
        epilog="Example: rag-exp judge-check judge=embedded n=20 --json",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    opts, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        raise ConfigError(f"unknown option {bad[0]}; see rag-exp judge-check --help")
    cfg = compose_judge_check(overrides)
    report, _ = run_judge_check(cfg, quiet=opts.json)
    if opts.json:
        print(json.dumps(report, indent=2))
    return 0
