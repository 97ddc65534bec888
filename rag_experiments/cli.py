"""``rag-exp``: the command line.

Subcommands::

    rag-exp run [hydra overrides…]     evaluate one configuration (or a sweep with -m)
    rag-exp serve [--host H] [--port P] [--max-request-mb M] [hydra overrides…]
                                       serve the built-in baseline over HTTP (POST /ask)
    rag-exp generate docs=<folder or [files]> n=40 out=<folder> [hydra overrides…]
                                       generate an evaluation dataset from documents
    rag-exp dataset stats <path> [--json]
                                       type distribution and question/answer lengths
    rag-exp dataset report <path> [--corpus DIR] [--judge J] [--json] [--out DIR] [--log]
                                       quality report: balance, duplicates, coverage, groundedness
    rag-exp judge-check [judge=…] [n=…] [judge_check.data=…] [--json]
                                       qualify a judge on labeled pairs (MLflow experiment judges)
    rag-exp review [dataset=<file.jsonl>] [--port N] [--host H] [--workspace DIR] [--out FILE]
                                       review, edit and approve generated pairs in the browser
    rag-exp review --run <run_id> [--metric M …] [--n 20] [--seed 0] [--tracking-uri URI]
                                       grade a run's answers in the browser (blind 0/1 verdicts)
    rag-exp rerun <run_id> [--tracking-uri URI] [key=value…]
                                       repeat a logged run; print what changed
    rag-exp grade-sheet <run_id> [--n 20] [--seed 0] [--out DIR]
                                       blinded CSV for human graders + a separate key
    rag-exp agreement <filled.csv | graded run_id> [--key KEY.json]
                                       raw agreement and Cohen's kappa, logged to the run
    rag-exp compare <run_a> <run_b> [--json] [--metrics …] [--force]
                                       paired comparison (diff, CI, p, flipped questions)
    rag-exp report <parent_run_id | experiment>
                                       sweep report (table, best configs, plots) on the parent
    rag-exp merge <parent_run_id> [--tracking-uri URI]
                                       join a sweep's shard runs into one run
    rag-exp export <run_id> --format ragas|deepeval|jsonl --out FILE [--tracking-uri URI]
                                       a run's answers as a dataset file (target=recorded)
    rag-exp gate <run_id> [--baseline RUN|ALIAS] [--config gate.yaml] [--junit F] [--markdown F]
                                       regression gate; exit 0 pass, 1 fail, 2 undecided
                                       or a wrong input
    rag-exp promote <run_id> [--alias production]
                                       point a baseline alias of the experiment at the run;
                                       exit 2 on a wrong input
    rag-exp align <graded run | labels file> --metric M [--run RUN] [--k 4] [overrides…]
                                       few-shot examples from labels into the judge's prompt;
                                       kappa and balanced accuracy before/after (CV)
    rag-exp init [--dir DIR] [--force]  a starter conf/ overlay (experiment, HTTP target)

``rag-exp run --help`` shows our usage, examples and the config groups, read from ``conf/``
without composing (:mod:`rag_experiments.run_help`); ``rag-exp run --cfg job`` prints the
resolved config without running.

Errors are handled in one place, :func:`main`, for every command: our own errors
(:class:`~rag_experiments.errors.RagExpError`) and Hydra's config errors print as
``rag-exp <command>: error: <message>`` (an unknown config key says which keys the schema has,
e.g. "did you mean retriever.top_k", and a key under an unselected group which option to pick,
as one line without Hydra's advice), with exit code 1 (a run whose end-of-run gate,
``gate=``, failed: 1; could not decide: 2; every error of ``rag-exp gate`` and ``promote``
itself, and a sweep given ``gate=``: 2, so that 1 always means a rule failed) and no stack
trace; any other exception is a bug and shows its stack trace. Hydra's own reporting is turned
off for the command (``HYDRA_FULL_ERROR=1`` while it runs), so its errors reach :func:`main` too.
``rag-exp --verbose <command> …`` (or ``HYDRA_FULL_ERROR=1``) shows the stack trace of every
error. SIGINT (Ctrl-C) and SIGTERM stop a command the same way
(:mod:`rag_experiments.common.interrupt`): its MLflow runs end KILLED with tag ``error``
naming the signal, and the exit code is 128 + the signal number (130, 143).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

from rag_experiments.common import interrupt
from rag_experiments.common.redact import scrubbed_console
from rag_experiments.locations import (  # ./conf of this folder, if any
    add_user_code_path,
    with_user_conf,
)

_HYDRA_JOB_LINE = "Error executing job with overrides:"


class _WithoutHydraJobLine:
    """``sys.stderr`` minus Hydra's ``Error executing job with overrides: [...]`` line, which
    ``hydra.core.utils.JobReturn.return_value`` writes before re-raising a failed job's error:
    :func:`main` prints the error itself, as one line (the overrides are what the user typed).

    Args:
        stream: The stream to forward everything else to.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if text.startswith(_HYDRA_JOB_LINE):
            return len(text)
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def _without_hydra_job_line() -> Iterator[None]:
    """:class:`_WithoutHydraJobLine` as ``sys.stderr`` for the block."""
    err = sys.stderr
    sys.stderr = _WithoutHydraJobLine(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stderr = err


def run_command(argv: list[str]) -> int:
    """``rag-exp run [hydra flags] [overrides…]``: ``--help`` from ``conf/`` alone (Hydra's
    own composes: ~30 s), else the Hydra app, composing the config once
    (:func:`~rag_experiments.config.compose.compose_once`).

    Args:
        argv: The arguments after ``run``, with the ``./conf`` overlay already added
            (:func:`~rag_experiments.locations.with_user_conf`).
    """
    from rag_experiments.run_help import config_dirs, run_help

    text = run_help(argv)
    if text is not None:
        print(text)
        return 0
    from rag_experiments.app import hydra_main, refuse_gated_sweep
    from rag_experiments.config import register
    from rag_experiments.config.compose import compose_once, prompt_previews

    register(config_dirs(argv)[1:])  # the derived schemas of a --config-dir overlay too
    refuse_gated_sweep(argv)  # before Hydra makes the sweep's folder and parent run
    sys.argv = ["rag-exp run", *argv]
    # the cyclic collector is off from the command's start (main, _collector_paused)
    # --cfg job: a YAML rubric's prompt is printed under its suite entry (prompt_preview)
    with compose_once(), prompt_previews(), _without_hydra_job_line():
        hydra_main()
    return 0


def serve_command(argv: list[str]) -> int:
    """``rag-exp serve [--host H] [--port P] [--max-request-mb M] [hydra overrides…]``."""
    from rag_experiments.commands.serve import main as serve_main

    parser = argparse.ArgumentParser(
        prog="rag-exp serve",
        allow_abbrev=False,
        description='Serve the built-in baseline over HTTP: POST /ask {"question"} -> '
        "{answer, contexts, context_ids, doc_ids}, GET /health. Every other argument is a "
        "Hydra override, as for `rag-exp run` (see `rag-exp run --help`).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8000, help="TCP port (default 8000; 0 = any free)"
    )
    parser.add_argument(
        "--max-request-mb",
        type=float,
        default=1.0,
        help="largest request body in MB; a larger one gets HTTP 413 (default 1)",
    )
    opts, overrides = parser.parse_known_args(argv)
    if not opts.max_request_mb > 0:
        parser.error(f"--max-request-mb must be > 0, got {opts.max_request_mb:g}")
    serve_main(
        with_user_conf(overrides),
        host=opts.host,
        port=opts.port,
        max_request_bytes=int(opts.max_request_mb * 1_000_000),
    )
    return 0


@dataclass(frozen=True)
class Command:
    """One ``rag-exp`` command, as :data:`COMMANDS` declares it.

    Attributes:
        function: ``"module:function"``; the function takes the command's arguments (a list
            of strings) and returns the exit code. Imported when the command runs.
        help: The one-line help of ``rag-exp --help``.
        hydra: A Hydra app (its arguments are overrides): the current folder's ``./conf``
            overlay is put on its config search path first
            (:func:`~rag_experiments.locations.with_user_conf`).
    """

    function: str
    help: str
    hydra: bool = False

    def run(self, argv: list[str]) -> int:
        """Import the command's function and call it with ``argv``; its exit code."""
        module, _, name = self.function.partition(":")
        handler = getattr(importlib.import_module(module), name)
        return int(handler(with_user_conf(argv) if self.hydra else list(argv)))


COMMANDS: dict[str, Command] = {
    "run": Command(
        "rag_experiments.cli:run_command",
        "evaluate a RAG configuration (Hydra overrides follow; -m sweeps)",
        hydra=True,
    ),
    "serve": Command(
        "rag_experiments.cli:serve_command",
        "serve the built-in baseline as an HTTP endpoint (POST /ask, GET /health)",
    ),
    "generate": Command(
        "rag_experiments.commands.generate:generate_command",
        "generate an evaluation dataset from PDF/DOCX/MD/TXT with a local LLM",
        hydra=True,
    ),
    "dataset": Command(
        "rag_experiments.commands.dataset:dataset_command",
        "inspect a dataset: `dataset stats|report <path> [--json]`",
    ),
    "judge-check": Command(
        "rag_experiments.commands.judge_check:judge_check_command",
        "judge agreement with labeled pairs (kappa, CIs), logged to `judges`",
    ),
    "review": Command(
        "rag_experiments.review.server:review_command",
        "review generated pairs in the browser: upload, generate, edit, approve",
    ),
    "rerun": Command(
        "rag_experiments.commands.rerun:rerun_command",
        "repeat a logged run exactly (`rerun <run_id>`) and diff its metrics",
    ),
    "grade-sheet": Command(
        "rag_experiments.commands.agreement:grade_sheet_command",
        "export a blinded CSV of a run's answers for human grading",
    ),
    "agreement": Command(
        "rag_experiments.commands.agreement:agreement_command",
        "judge-human agreement (Cohen's kappa) from a filled grade sheet",
    ),
    "compare": Command(
        "rag_experiments.commands.compare:compare_command",
        "did run b beat run a? paired diff, CI, p-value, flipped questions",
    ),
    "report": Command(
        "rag_experiments.commands.report:report_command",
        "sweep report on the parent run: table, best configs, plots, Pareto",
    ),
    "merge": Command(
        "rag_experiments.commands.merge:merge_command",
        "join a sweep's shard runs (shard.index=0..N-1) into one run",
    ),
    "export": Command(
        "rag_experiments.commands.export:export_command",
        "write a run's answers as a RAGAS, DeepEval or JSONL dataset file",
    ),
    "gate": Command(
        "rag_experiments.commands.gate:gate_command",
        "CI regression gate: rules vs a baseline run or alias; exit 0/1/2, JUnit",
    ),
    "promote": Command(
        "rag_experiments.commands.gate:promote_command",
        "set a baseline alias (e.g. production) of the run's experiment",
    ),
    "align": Command(
        "rag_experiments.commands.align:align_command",
        "few-shot examples from people's labels into a judge's prompt; kappa before/after",
    ),
    "init": Command(
        "rag_experiments.starter:init_command",
        "write a starter conf/ overlay here (an experiment, an HTTP target)",
    ),
}
"""Every ``rag-exp`` command: name → :class:`Command`. A new command is one entry here and
its function (in its own module); nothing else of the CLI names it."""


@contextmanager
def _hydra_raises() -> Iterator[None]:
    """``HYDRA_FULL_ERROR=1`` for the block: Hydra re-raises a task's or a composition's
    exception instead of printing it, so :func:`main` reports it like any other."""
    before = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before


def _exit_without_collecting() -> None:
    """Move every object to the collector's permanent generation as the process exits.

    Registered when the command starts, so it runs after the exit handlers registered during
    the command (every run ended, every file and log flushed): the interpreter's shutdown then
    no longer walks the whole heap in repeated full collections (MLflow, pandas, SQLAlchemy
    and a run's rows: 2-7 s of a 1,000-question run's exit on a loaded 2-core machine; seen
    with ``py-spy dump --native``: ``gc_collect_main``). The only difference: reference
    cycles that are garbage at exit are left to the operating system instead of being
    collected first (CPython does not promise to finalize objects at exit anyway).
    """
    gc.freeze()


@contextmanager
def _collector_paused(paused: bool) -> Iterator[None]:
    """The cyclic garbage collector off for the block when ``paused`` (as it was after).

    ``rag-exp run`` pauses it from the command's first import: its start-up allocates
    millions of long-lived objects (our modules, Hydra, MLflow, pandas, SQLAlchemy, the
    config, the dataset) and no garbage worth a collection, and the collector stays off until
    the job freezes them and starts answering (:func:`rag_experiments.job.run_job` turns it
    on). It saves ~1 CPU s of collections (``import mlflow`` alone: 4.8 -> 3.9 CPU s; the
    imports before MLflow's: ~0.2 CPU s more).
    """
    collecting = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``rag-exp <command> …``; returns the process exit code (errors: see the
    module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[1:2] if args[:1] == ["--verbose"] else args[:1]
    with _collector_paused(command == ["run"]):
        return _main(args)


def _main(args: list[str]) -> int:
    """:func:`main` for the arguments ``args``."""
    from rag_experiments.config.reporting import CallbackAbort, error_message, exit_code

    atexit.unregister(_exit_without_collecting)  # once per process, however often called
    atexit.register(_exit_without_collecting)

    verbose = bool(args) and args[0] == "--verbose"
    if verbose:
        args = args[1:]
    traces = verbose or os.environ.get("HYDRA_FULL_ERROR") == "1"
    parser = argparse.ArgumentParser(
        prog="rag-exp",
        description="Evaluate RAG systems offline with local models; results go to MLflow.",
        epilog="Example: rag-exp run -m chunker.size=256,512 retriever.top_k=3,5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show the stack trace of errors (as HYDRA_FULL_ERROR=1 does)",
    )
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, declared in COMMANDS.items():
        sub.add_parser(name, help=declared.help, add_help=False)
    if not args or args[0] not in COMMANDS:
        parser.parse_args(args or ["--help"])
        return 2
    command, handler = args[0], COMMANDS[args[0]].run
    add_user_code_path()  # the user's metric/target modules beside ./conf, for every command
    with scrubbed_console(args[1:]):  # a secret typed as an argument is never echoed
        try:
            with interrupt.handled(), _hydra_raises():
                code = handler(args[1:])
            sys.stdout.flush()
            return code
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM, after every run was closed KILLED
            name = interrupt.received() or "SIGINT"
            print(f"rag-exp {command}: {exc or f'stopped by {name}'}", file=sys.stderr)
            return 128 + int(signal.Signals[name])
        except BrokenPipeError:  # `rag-exp … | head`: the reader left; not an error of ours
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python docs, signal)
            return 0
        except (Exception, CallbackAbort) as exc:  # CallbackAbort: a Hydra callback stopped it
            message = error_message(exc)
            if message is None or traces:
                raise
            print(f"rag-exp {command}: error: {message}", file=sys.stderr)
            return exit_code(exc)
