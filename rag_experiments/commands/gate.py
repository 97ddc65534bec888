"""``rag-exp gate <candidate> --baseline <run id | alias>`` and ``rag-exp promote <run id>
--alias <name>``: the regression gate of :mod:`rag_experiments.analysis.gate` as a command (one
plain line per rule, exit code 0 pass / 1 fail / 2 undecided, JUnit XML, Markdown, the result
logged on the candidate run), and the baseline alias it resolves. Every error of ``gate`` that
is not a rule's verdict (its input: the ``--config`` file, the rules, the runs, the store)
exits 2 as an undecided gate does, and so does every error of ``promote`` (a
:class:`~rag_experiments.errors.UsageError`), so CI never reads it as "a rule failed"."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import mlflow
import yaml

from rag_experiments.analysis.gate import (
    EXIT_CODES,
    UNDECIDED,
    parse_settings,
    resolve_run,
    run_gate,
    set_alias,
)
from rag_experiments.common.cliargs import add_tracking_uri, parse_store_command
from rag_experiments.common.uri import require_existing_store
from rag_experiments.errors import (
    ConfigError,
    GateFailed,
    RagExpError,
    UsageError,
)
from rag_experiments.locations import CONF_DIR
from rag_experiments.tracking.store import open_store

DEFAULT_RULES = CONF_DIR / "gate" / "default.yaml"
"""Rules of ``rag-exp gate`` without ``--config``: those of ``gate=default``."""


def read_gate_file(path: str | Path) -> dict[str, Any]:
    """The gate YAML file (``alpha``, ``min_pairs``, ``rules`` …) as a mapping.

    Raises:
        ConfigError: The file is missing, not YAML, or not a mapping.
    """
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        where = " ".join(str(exc).split())  # PyYAML's message spans lines: keep ours one line
        raise ConfigError(f"--config {path}: not valid YAML ({where})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: must be a mapping with `rules:`")
    return data


def gate_command(argv: list[str]) -> int:
    """``rag-exp gate <candidate> [--baseline B] [--config F] [--junit P] [--markdown P]``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp gate",
        description="Fail CI on a regression: apply per-metric rules (min/max on the "
        "candidate's mean; max_drop: paired CI entirely beyond the margin, or Holm p < alpha "
        "and the drop beyond it) to a candidate run against a baseline run or alias. Exit 0 "
        "pass, 1 a rule failed, 2 could not decide (different datasets, too few paired rows, "
        "a metric missing) or a wrong input (config file, rules, runs, store). The result "
        "is logged on the candidate run (tags gate.*, artifacts gate/).",
    )
    parser.add_argument(
        "candidate", help="candidate run id, or `last` (newest finished run of --experiment)"
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="baseline run id or alias of the candidate's experiment (rag-exp promote)",
    )
    parser.add_argument(
        "--config",
        default=None,
        help="gate YAML: {alpha, min_pairs, rules: {metric: {min, max, max_drop, by_type}}} "
        "(default: the rules of conf/gate/default.yaml)",
    )
    parser.add_argument("--junit", default=None, help="write JUnit XML here")
    parser.add_argument(
        "--markdown",
        default=None,
        help="append a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)",
    )
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    parser.add_argument(
        "--no-log", action="store_true", help="do not log the result on the candidate run"
    )
    _add_experiment(parser)
    add_tracking_uri(parser)
    opts = parse_store_command(parser, argv, existing_store=False)  # checked in the try
    try:
        candidate = resolve_run(_open_existing(opts.tracking_uri), opts.candidate, opts.experiment)
        raw = read_gate_file(opts.config or DEFAULT_RULES)
        settings = parse_settings(raw, opts.config or str(DEFAULT_RULES))
        baseline = opts.baseline or raw.get("baseline")
        result = run_gate(
            opts.tracking_uri,
            candidate,
            baseline,
            settings,
            junit=opts.junit,
            markdown=opts.markdown,
            log=not opts.no_log,
        )
    except GateFailed:
        raise
    except RagExpError as exc:  # not a rule's verdict: CI must not read it as "a rule failed"
        raise GateFailed(str(exc), EXIT_CODES[UNDECIDED]) from exc
    if opts.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    return result.exit_code


def promote_command(argv: list[str]) -> int:
    """``rag-exp promote <run id> --alias <name>``."""
    parser = argparse.ArgumentParser(
        prog="rag-exp promote",
        description="Point a baseline alias (e.g. production) of the run's experiment at the "
        "run: experiment tag rag_exp.alias.<name> = <run id>, which the baseline of `rag-exp "
        "gate` and gate.baseline=<name> resolve. Exit 0 the alias was set, 2 it was not: a "
        "wrong input (an unknown run, `last` with no finished run, a bad alias name, a store "
        "that does not exist or a tracking server that does not answer), as for `rag-exp gate`.",
    )
    parser.add_argument(
        "run_id", help="the run to promote, or `last` (newest finished run of --experiment)"
    )
    parser.add_argument("--alias", default="production", help="alias name (production)")
    _add_experiment(parser)
    add_tracking_uri(parser)
    opts = parse_store_command(parser, argv, existing_store=False)  # checked in the try
    try:
        run_id = resolve_run(_open_existing(opts.tracking_uri), opts.run_id, opts.experiment)
        experiment = set_alias(opts.tracking_uri, run_id, opts.alias)
    except RagExpError as exc:  # exit 2 as gate's input errors: 1 means "a rule failed"
        raise UsageError(str(exc)) from exc
    print(f"alias {opts.alias!r} of experiment {experiment!r} -> run {run_id}")
    return 0


def _open_existing(uri: str) -> mlflow.MlflowClient:
    """:func:`~rag_experiments.tracking.store.open_store`, refusing a sqlite file that does not
    exist (MLflow would create an empty store there, e.g. ``mlruns.db`` in a folder where
    ``rag-exp gate last`` was typed by mistake).

    Raises:
        TrackingError: No such sqlite file, or the store cannot be opened.
    """
    require_existing_store(uri)
    return open_store(uri)


def _add_experiment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--experiment",
        default="rag-experiments",
        help="experiment whose newest finished run `last` means (rag-experiments, as "
        "tracking.experiment)",
    )
