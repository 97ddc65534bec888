"""The harness's own overhead at scale: where the time of a ``rag-exp run`` goes at N questions.

Each N runs ``rag-exp run`` in a fresh process (as a user would) on the bundled sample
(``datasets/sample``, 69 questions) repeated with distinct ids until it has N questions, with
the fake models (``llm=fake judge=fake embedder=hash metrics=custom``) and a new sqlite
store (created before the timed run, as a user's store exists after the first run;
``--new-store`` times its creation too), or with ``--judge-server`` against the fake
OpenAI-compatible server (:mod:`rag_experiments.fakes.openai_server`, in its own process:
``judge=openai``, every call ``--latency`` seconds in one of ``--slots`` slots). The child
process runs the command itself (:func:`rag_experiments.cli.main`, its start-up and exit
included) and times its phases by wrapping the functions that do them (the package is
unchanged):

=======================  ===================================================================
phase                    what
=======================  ===================================================================
start-up                 process start → index build starts: imports, Hydra, the MLflow
                         store and run, params, loading the dataset, building the parts,
                         preflight (less the dataset input logging, counted below)
index                    the target's ``prepare`` (chunk, embed and index the corpus)
answering+judging        answering every question and judging it (the work; overlapped)
scoring                  code metrics over all rows, aggregates with bootstrap CIs, audit
per-query table          ``per_query.json`` + ``per_query_results.csv``
traces                   one MLflow trace per question (spans and assessments)
other logging            everything else until the process exits: dataset input, tags,
                         metrics, ``average_results.csv``, judge audit, ending the run, exit
=======================  ===================================================================

Printed per N, side by side: each phase (wall s, then CPU s of the process: on a shared
machine the wall time also counts waiting for a core), the whole process, questions/s, peak
RSS of the process, overhead = everything but answering+judging, overhead / work, and the cost per
question relative to the first N. A benchmark, not a test; absolute times depend on the
machine, compare ratios::

    .venv/bin/python bench/scale.py --n 69 1000 10000
    .venv/bin/python bench/scale.py --n 1000 --judge-server --latency 0.01 --slots 64
    .venv/bin/python bench/scale.py --n 1000 --profile /tmp/scale.prof   # cProfile, main thread
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "datasets" / "sample"
PHASES = (
    "start-up",
    "index",
    "answering+judging",
    "scoring",
    "per-query table",
    "traces",
    "other logging",
)
WORK = "answering+judging"


def make_dataset(n: int, path: Path) -> None:
    """The sample's questions repeated until there are ``n``; repeat ``k`` ≥ 1 of question
    ``id`` gets the id ``<id>~r<k>`` (the first copy keeps its id)."""
    rows = [
        json.loads(line)
        for line in (SAMPLE / "eval.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            row = dict(rows[i % len(rows)])
            k = i // len(rows)
            if k:
                row["id"] = f"{row['id']}~r{k}"
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


# --- the child: one timed `rag-exp run` -------------------------------------------------------


def _child(out: str, profile: str | None, overrides: list[str]) -> None:
    """Run ``rag-exp run <overrides>`` (:func:`rag_experiments.cli.main`, exit included) with
    phase timers; write them to ``out`` (JSON)."""
    durations: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    first_start: dict[str, float] = {}
    first_cpu: dict[str, float] = {}

    def timed(owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            first_start.setdefault(phase, time.time())
            first_cpu.setdefault(phase, time.process_time())
            started, started_cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                durations[phase] += time.perf_counter() - started
                cpu[phase] += time.process_time() - started_cpu

        setattr(owner, name, wrapper)

    # The command imports these (and MLflow) with the cyclic collector paused until the job
    # freezes the heap and turns it on (rag_experiments.cli._collector_paused, job.run_job);
    # imported here first, they are too, or the start-up would count ~0.5 CPU s of
    # collections the command does not make (turned on again here, the collector would
    # first scan everything imported: one ~0.2 s collection).
    import gc

    gc.disable()
    from rag_experiments import runner
    from rag_experiments.metrics.scheduler import JudgeScheduler
    from rag_experiments.targets.baseline import BaselineTarget
    from rag_experiments.tracking.mlflow_tracker import MlflowTracker

    timed(BaselineTarget, "prepare", "index")
    timed(runner, "_answer_all", WORK)
    timed(JudgeScheduler, "finish", WORK)
    for name in ("_score_all", "summarise", "collect_audit", "judge_error_counts"):
        timed(runner, name, "scoring")
    timed(MlflowTracker, "log_table", "per-query table")
    timed(MlflowTracker, "log_traces", "traces")
    timed(MlflowTracker, "log_dataset", "dataset input")

    def write() -> None:
        Path(out).write_text(
            json.dumps(
                {
                    "durations": durations,
                    "first_start": first_start,
                    "cpu": cpu,
                    "first_cpu": first_cpu,
                }
            ),
            encoding="utf-8",
        )

    import atexit

    atexit.register(write)
    from rag_experiments.cli import main  # the `rag-exp` command itself

    argv = ["run", *overrides]
    if profile:
        import cProfile

        code = cProfile.runctx("main(argv)", globals(), {"main": main, "argv": argv}, profile)
    else:
        code = main(argv)
    raise SystemExit(code)


# --- the parent ------------------------------------------------------------------------------


def run_once(n: int, args: argparse.Namespace, work: Path, judge: list[str]) -> dict[str, float]:
    """One child run at ``n`` questions; its phases, whole time, RSS and rates."""
    folder = work / f"n{n}"
    folder.mkdir()
    dataset = folder / "eval.jsonl"
    make_dataset(n, dataset)
    out = folder / "phases.json"
    overrides = [
        "dataset=jsonl",
        f"dataset.path={dataset}",
        f"dataset.corpus={SAMPLE / 'docs'}",
        f"dataset.name=scale-{n}",
        "llm=fake",
        "embedder=hash",
        "metrics=custom",
        *judge,
        "progress=false",
        f"paths.cache_dir={folder / 'cache'}",
        f"tracking.uri=sqlite:///{folder / 'mlruns.db'}",
        f"hydra.run.dir={folder / 'job'}",
        "max_failure_rate=1.0",
        *args.override,
    ]
    if not args.new_store:  # as a user's usual run: the store exists (its tables are made once)
        subprocess.run(
            [sys.executable, "-c", "import mlflow, sys; mlflow.MlflowClient(sys.argv[1])",
             f"sqlite:///{folder / 'mlruns.db'}"],
            check=True, capture_output=True,
        )  # fmt: skip
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out)]
    if args.profile:
        cmd += ["--profile", f"{args.profile}.{n}"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    spawned = time.time()
    with (folder / "run.log").open("wb") as log_file:
        proc = subprocess.Popen(
            [*cmd, "--", *overrides], cwd=folder, env=env, stdout=log_file,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
    whole = time.time() - spawned
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = (folder / "run.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"n={n}: rag-exp run exited {proc.returncode}:\n{tail}")
    timing = json.loads(out.read_text(encoding="utf-8"))
    d = timing["durations"]
    index_start = timing["first_start"].get("index", spawned)
    phases = {
        "start-up": index_start - spawned - d.get("dataset input", 0.0),
        "index": d.get("index", 0.0),
        WORK: d.get(WORK, 0.0),
        "scoring": d.get("scoring", 0.0),
        "per-query table": d.get("per-query table", 0.0),
        "traces": d.get("traces", 0.0),
    }
    phases["other logging"] = whole - sum(phases.values())
    phases["whole"] = whole
    phases["questions/s"] = n / whole
    phases["peak RSS MB"] = usage.ru_maxrss / 1024
    phases["overhead"] = whole - phases[WORK]
    phases["overhead/work"] = phases["overhead"] / max(phases[WORK], 1e-9)
    phases["per question ms"] = 1000 * whole / n
    c = timing["cpu"]
    cpu_whole = usage.ru_utime + usage.ru_stime
    cpu = {
        "start-up": timing["first_cpu"].get("index", 0.0) - c.get("dataset input", 0.0),
        **{p: c.get(p, 0.0) for p in PHASES[1:-1]},
    }
    cpu["other logging"] = cpu_whole - sum(cpu.values())
    cpu["whole"] = cpu_whole
    phases.update({f"cpu {k}": v for k, v in cpu.items()})
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[69, 1000])
    parser.add_argument("--judge-server", action="store_true", help="judge=openai, fake server")
    parser.add_argument("--latency", type=float, default=0.01, help="fake server, s per call")
    parser.add_argument("--slots", type=int, default=32, help="fake server's parallel slots")
    parser.add_argument(
        "--new-store", action="store_true", help="start-up includes creating the sqlite store"
    )
    parser.add_argument("--profile", help="cProfile the child's main thread to <path>.<n>")
    parser.add_argument("--override", nargs="*", default=[], help="more Hydra overrides")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        _child(args.child, args.profile, [a for a in rest if a != "--"])
        return
    server = None
    judge: list[str] = ["judge=fake"]
    if args.judge_server:
        server = subprocess.Popen(
            [sys.executable, "-m", "rag_experiments.fakes.openai_server",
             "--latency", str(args.latency), "--slots", str(args.slots)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        judge = [
            "judge=openai",
            f"judge.base_url={url}/v1" if not url.endswith("/v1") else f"judge.base_url={url}",
            "judge.model=fake",
            f"judge.max_concurrency={args.slots}",
            "cache.mode=off",
        ]
    results: dict[int, dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
            for n in args.n:
                results[n] = run_once(n, args, Path(tmp), judge)
                print(f"n={n}: {results[n]['whole']:.1f} s", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    first = results[args.n[0]]["per question ms"]
    rows = [*PHASES, "whole", "questions/s", "peak RSS MB", "overhead", "overhead/work"]
    header = f"{'phase (s)':<22}" + "".join(f"{f'n={n}':>12}" for n in args.n)
    print(header)
    print("-" * len(header))
    for row in rows:
        cells = "".join(f"{results[n][row]:>12.2f}" for n in args.n)
        print(f"{row:<22}{cells}")
    cells = "".join(f"{results[n]['per question ms'] / first:>12.2f}" for n in args.n)
    print(f"{'cost/question (x)':<22}{cells}")
    print("\nCPU seconds of the process (all threads; on a shared machine wall >> CPU)")
    for row in [*PHASES, "whole"]:
        cells = "".join(f"{results[n][f'cpu {row}']:>12.2f}" for n in args.n)
        print(f"{row:<22}{cells}")


if __name__ == "__main__":
    main()
