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

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rag_experiments.analysis.gate import (
    EXIT_CODES,
    UNDECIDED,
    check_gate_runs,
    parse_settings,
    resolve_run,
    run_gate,
    set_alias,
)
from rag_experiments.analysis.gate.store_io import open_existing_store
from rag_experiments.common.cliargs import add_tracking_uri, parse_store_command
from rag_experiments.errors import (
    ConfigError,
    GateFailed,
    RagExpError,
    UsageError,
)
from rag_experiments.locations import CONF_DIR

GATE_PRESETS = CONF_DIR / "gate"
"""Folder of the gate presets (``gate=<name>`` of ``rag-exp run``, ``--config <name>``)."""

DEFAULT_RULES = GATE_PRESETS / "default.yaml"
"""Rules of ``rag-exp gate`` without ``--config``: those of ``gate=default``."""


def gate_file(ref: str | Path) -> Path:
    """The gate YAML file ``ref`` names: ``ref`` as a path when that file exists, else a preset
    (``retrieval`` or ``retrieval.yaml``, as ``gate=retrieval`` of ``rag-exp run``) of the
    user's ``./conf/gate`` overlay (:func:`~rag_experiments.locations.user_conf_dir`) or of the
    bundled conf/gate, in that order.

    Raises:
        ConfigError: Neither an existing file nor a preset; the message lists the presets.
    """
    from rag_experiments.locations import user_conf_dir

    text = str(ref)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    overlay = user_conf_dir()
    folders = [*([overlay / "gate"] if overlay else []), GATE_PRESETS]
    name = text.removesuffix(".yaml")
    if "/" not in name:
        for folder in folders:
            if (folder / f"{name}.yaml").is_file():
                return folder / f"{name}.yaml"
    presets = ", ".join(sorted({p.stem for f in folders for p in f.glob("*.yaml")}))
    raise ConfigError(
        f"--config {text}: no such file and no such preset; give a gate YAML path or a preset "
        f"of conf/gate ({presets})"
    )


def read_gate_file(ref: str | Path) -> dict[str, Any]:
    """The gate YAML (``alpha``, ``min_pairs``, ``rules`` …) of a preset name or a path
    (:func:`gate_file`) as a mapping, without the Hydra ``defaults`` list of a preset.

    Raises:
        ConfigError: No such preset or file, not YAML, or not a mapping.
    """
    path = gate_file(ref)
    try:  # OmegaConf's YAML, as Hydra reads the `gate=` group (1e-2 is a number there)
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except OSError as exc:  # OmegaConf raises it for a scalar file too (no strerror then)
        if exc.strerror is None:
            raise ConfigError(f"--config {path}: must be a mapping with `rules:`") from exc
        raise ConfigError(f"--config {path}: cannot read it ({exc.strerror})") from exc
    except (yaml.YAMLError, OmegaConfBaseException) as exc:
        where = " ".join(str(exc).split())  # the message spans lines: keep ours one line
        raise ConfigError(f"--config {path}: not valid YAML ({where})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: must be a mapping with `rules:`")
    data.pop("defaults", None)  # a preset's Hydra defaults list (the schema), not a setting
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
        help="gate YAML path or preset name of conf/gate (default, retrieval): {alpha, "
        "min_pairs, rules: {metric: {min, max, max_drop, by_type}}} (default: the rules of "
        "conf/gate/default.yaml, which include judged metrics)",
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
        store = open_existing_store(opts.tracking_uri)
        candidate = resolve_run(store, opts.candidate, opts.experiment)
        config = gate_file(opts.config or DEFAULT_RULES)
        raw = read_gate_file(config)
        settings = parse_settings(raw, str(config))
        baseline = opts.baseline or raw.get("baseline")
        check_gate_runs(store, candidate, baseline)
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
        run_id = resolve_run(open_existing_store(opts.tracking_uri), opts.run_id, opts.experiment)
        experiment = set_alias(opts.tracking_uri, run_id, opts.alias)
    except RagExpError as exc:  # exit 2 as gate's input errors: 1 means "a rule failed"
        raise UsageError(str(exc)) from exc
    print(f"alias {opts.alias!r} of experiment {experiment!r} -> run {run_id}")
    return 0


def _add_experiment(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--experiment",
        default="rag-experiments",
        help="experiment whose newest finished run `last` means (rag-experiments, as "
        "tracking.experiment)",
    )
