"""Time of logging one run's results to each MLflow store, phase by phase.

Evaluates N questions once with the fake models (``llm=fake judge=fake embedder=hash
metrics=custom``; the bundled sample repeated with new ids up to N), then logs the same result
into a new run of each store and times each phase:

* ``params/metrics``: open the run (params, tags, ``config.yaml``), the dataset input, target
  tags, every aggregate metric;
* ``tables/artifacts``: ``per_query.json`` + ``per_query_results.csv``,
  ``average_results.csv``, ``metric_specs.json``, ``judge_audit.jsonl``;
* ``traces``: one trace per question with its spans and assessments.

Stores: a sqlite file (``sqlite``), an ``mlflow server`` over sqlite (``server-sqlite``), one
over PostgreSQL (``server-pg``) and ``mlflow server --app-name rag-experiments`` over
PostgreSQL (``server-pg-app``, "server+plugin over PostgreSQL": traces through our batch
endpoint, ``rag_experiments/tracking/server_app.py``), all with proxied artifacts on 127.0.0.1,
started here (PostgreSQL from Debian's binaries, as in ``tests/mlflow_server.py``) with
``--workers 1`` as in the tests (``--server-workers``; MLflow's own default is 4). Prints, per
phase and store, the wall seconds and the CPU seconds of this process plus the store's server
and database processes (read from ``/proc``: on a shared, loaded machine the CPU ratio is the
steadier one), each with its ratio to sqlite, then the per-question cost against the first N.
``--repeats R`` logs R times to every store, the stores taking turns (a load spike on the shared
machine then hits every store, not one), and prints the median of each phase with the spread
of the whole's ratio to sqlite over the rounds.
``--stores … pg`` adds the PostgreSQL database itself as the tracking URI (no server: what a
client with database access could do; traces then take the multi-row INSERT path).
A benchmark, not a test::

    .venv/bin/python bench/logging_throughput.py [--questions 345 2000] [--more 10000]
        [--stores sqlite server-sqlite server-pg server-pg-app pg] [--no-traces]
        [--server-workers 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helpers of the tests

PHASES = ("params/metrics", "tables/artifacts", "traces")
WARM_UP = 100
"""Questions of the untimed first logging to every store: one full trace batch request (100
questions), so the first timed logging to a server does not pay the server's and its
database's first full-size requests (with 20 questions, the first of three rounds took 1.43x
sqlite's time on the server+plugin over PostgreSQL and the next two 0.99x and 0.94x; with 100,
0.83x, 0.79x, 0.99x; 345 questions, load ~1). A team's server is long-running: a run's logging
finds it warm."""
STORES = ("sqlite", "server-sqlite", "server-pg", "server-pg-app", "pg")


def _dataset(n: int, folder: Path) -> Path:
    """The sample's questions repeated (ids suffixed ``-<copy>``) up to ``n`` rows."""
    rows = [
        json.loads(x)
        for x in (ROOT / "datasets" / "sample" / "eval.jsonl").read_text().splitlines()
    ]
    out = []
    for i in range(n):
        row = dict(rows[i % len(rows)])
        row["id"] = f"{row['id']}-{i // len(rows)}"
        out.append(json.dumps(row, ensure_ascii=False))
    path = folder / f"eval-{n}.jsonl"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def _evaluate(n: int, folder: Path) -> tuple[Any, Any, Any, Any]:
    """``(cfg, dataset, target, metrics, result)`` of N questions with the fake models."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from rag_experiments.build import build
    from rag_experiments.config import register
    from rag_experiments.locations import CONF_DIR
    from rag_experiments.runner import evaluate

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "llm=fake", "judge=fake", "embedder=hash", "metrics=custom", "progress=false",
                "dataset=jsonl", f"dataset.path={_dataset(n, folder)}",
                f"dataset.corpus={ROOT / 'datasets' / 'sample' / 'docs'}",
                f"dataset.name=sample-x{n}", f"paths.cache_dir={folder / 'cache'}",
            ],
        )  # fmt: skip
    GlobalHydra.instance().clear()
    exp = build(cfg)
    result = evaluate(exp.dataset, exp.target, exp.metrics, progress=False)
    return cfg, exp, result, exp.target.describe()


def _log(
    uri: str,
    server_cpu: Callable[[], float],
    experiment: str,
    cfg: Any,
    exp: Any,
    result: Any,
    tags: Any,
    traces: bool,
) -> dict[str, tuple[float, float]]:
    """Log the result into a new run of ``uri``; ``(wall s, CPU s)`` per phase, the CPU time
    of this process plus ``server_cpu()`` (the store's server and database processes)."""
    from omegaconf import OmegaConf

    from rag_experiments.tracking.mlflow_tracker import (
        MlflowTracker,
        ensure_experiment,
        open_client,
    )

    tracker = MlflowTracker(uri, experiment, traces=traces)
    # the store's tables and the experiment exist before the clock starts (a new sqlite
    # file's migrations take seconds; a server ran its own at start-up)
    ensure_experiment(open_client(tracker.uri), experiment, tracker.uri)
    times = {phase: [0.0, 0.0] for phase in PHASES}  # [wall s, CPU s]

    def now() -> tuple[float, float]:
        return time.perf_counter(), time.process_time() + server_cpu()

    def lap(phase: str, since: tuple[float, float]) -> tuple[float, float]:
        end = now()
        times[phase][0] += end[0] - since[0]
        times[phase][1] += end[1] - since[1]
        return end

    params = OmegaConf.to_container(cfg, resolve=True)
    started = now()
    with tracker.start_run(
        params=params, config_yaml=OmegaConf.to_yaml(cfg, resolve=True), tags={}
    ):
        dataset = exp.dataset
        tracker.log_dataset(
            dataset.name,
            dataset.digest,
            dataset.source,
            [s.model_dump(mode="json") for s in dataset.samples],
        )
        tracker.set_tags(tags)
        tracker.log_metrics(result.metrics())
        started = lap("params/metrics", started)

        tracker.log_table(result.rows(), name="per_query")
        tracker.log_csv(result.average_rows(), "average_results.csv")
        tracker.log_dict({s.name: s.description for s in result.specs}, "metric_specs.json")
        if result.audit:
            tracker.log_text("\n".join(json.dumps(r) for r in result.audit), "judge_audit.jsonl")
        started = lap("tables/artifacts", started)

        tracker.log_traces(result, tags)
        started = lap("traces", started)
    lap("params/metrics", started)  # ending the run
    return {phase: (wall, cpu) for phase, (wall, cpu) in times.items()}


def _tree_cpu(roots: Callable[[], list[int]]) -> Callable[[], float]:
    """CPU seconds (user + system, with reaped children) of the processes ``roots()`` and
    their descendants, read from ``/proc`` (Linux); 0 where ``/proc`` is missing."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def cpu() -> float:
        parent: dict[int, int] = {}
        used: dict[int, float] = {}
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue  # gone meanwhile
            parent[int(entry.name)] = int(fields[1])
            used[int(entry.name)] = sum(int(x) for x in fields[11:15]) / tick
        wanted = set(roots())
        total = 0.0
        for pid, seconds in used.items():
            p = pid
            while p > 1 and p not in wanted:
                p = parent.get(p, 0)
            if p in wanted:
                total += seconds
        return total

    return cpu


def _postmaster(uri: str) -> Callable[[], list[int]]:
    """The pid of the PostgreSQL serving ``uri`` (``postgres … -p <port>``), found once."""
    port = uri.rsplit(":", 1)[1].split("/", 1)[0]
    found: list[int] = []

    def pids() -> list[int]:
        if not found:
            for entry in Path("/proc").glob("[0-9]*"):
                try:
                    cmd = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if cmd and cmd[0].endswith(b"/postgres") and port.encode() in cmd:
                    found.append(int(entry.name))
        return found

    return pids


@contextmanager
def _stores(
    names: list[str], folder: Path, workers: int
) -> Iterator[dict[str, tuple[str, Callable[[], float]]]]:
    """``{store: (uri, CPU seconds of its server and database processes)}``, servers started."""
    from mlflow_server import MlflowServer, run_postgres

    with ExitStack() as stack:
        stores: dict[str, tuple[str, Callable[[], float]]] = {}
        postgres: list[Callable[[str], str]] = []  # started once, for server-pg and pg

        def new_database(name: str) -> str:
            if not postgres:
                postgres.append(stack.enter_context(run_postgres()))
            return postgres[0](name)

        for name in names:
            if name == "sqlite":
                stores[name] = (f"sqlite:///{folder / 'bench.db'}", lambda: 0.0)
                continue
            if name == "pg":  # the database itself, no server: the SQL fast path for traces
                uri = new_database("direct")
                stores[name] = (uri, _tree_cpu(_postmaster(uri)))
                continue
            workdir = folder / name
            workdir.mkdir()
            backend = None
            database: Callable[[], list[int]] = list
            app_name = None
            if name in ("server-pg", "server-pg-app"):
                backend = new_database(name.replace("-", "_"))
                database = _postmaster(backend)
            if name == "server-pg-app":
                app_name = "rag-experiments"
            server = MlflowServer(workdir, backend, workers=workers, app_name=app_name)
            server.start()
            stack.callback(server.stop)
            pid = server.proc.pid if server.proc else 0
            stores[name] = (server.url, _tree_cpu(lambda pid=pid, db=database: [pid, *db()]))
        yield stores


def main() -> None:
    """Parse the arguments, evaluate once per N, log to every store, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, nargs="+", default=[345, 2000])
    parser.add_argument("--more", type=int, nargs="*", default=[], help="further N (10000…)")
    parser.add_argument("--stores", nargs="+", default=list(STORES[:4]), choices=STORES)
    parser.add_argument("--no-traces", action="store_true", help="leave the traces phase out")
    parser.add_argument(
        "--server-workers",
        type=int,
        default=1,
        help="mlflow server --workers (1 as in the tests; MLflow's own default is 4)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="log R times to every store, in turns; print the medians (default 1)",
    )
    args = parser.parse_args()
    sizes = [*args.questions, *args.more]

    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="rag-exp-bench-") as tmp:
        folder = Path(tmp)
        os.chdir(folder)  # a store without its own artifact root writes ./mlruns here
        with _stores(args.stores, folder, args.server_workers) as stores:
            per_question: dict[str, dict[int, tuple[float, float]]] = {s: {} for s in stores}
            # warm-up, untimed: lazy imports (trace writer, SQL store, dataset profile) and
            # each server's first requests would otherwise be paid by the first store timed
            cfg, exp, result, tags = _evaluate(WARM_UP, folder)
            for uri, server_cpu in stores.values():
                _log(uri, server_cpu, "bench-warm-up", cfg, exp, result, tags, not args.no_traces)
            for n in sizes:
                cfg, exp, result, tags = _evaluate(n, folder)
                print(
                    f"\n{n} questions, {len(result.specs)} metric columns (fake models), "
                    f"servers with --workers {args.server_workers}"
                )
                runs: dict[str, list[dict[str, tuple[float, float]]]] = {s: [] for s in stores}
                for _ in range(max(1, args.repeats)):
                    for store, (uri, server_cpu) in stores.items():
                        runs[store].append(
                            _log(
                                uri, server_cpu, f"bench-{n}", cfg, exp, result, tags,
                                not args.no_traces,
                            )
                        )  # fmt: skip
                rows = {store: _median(t) for store, t in runs.items()}
                for k, what in enumerate(("wall s", "CPU s: client + server + database")):
                    print(f"  {what}")
                    _print({st: {p: v[k] for p, v in t.items()} for st, t in rows.items()})
                if args.repeats > 1 and "sqlite" in runs:
                    _print_spread(runs)
                for store, t in rows.items():
                    per_question[store][n] = (
                        sum(v[0] for v in t.values()) / n,
                        sum(v[1] for v in t.values()) / n,
                    )
            if len(sizes) > 1:
                first = sizes[0]
                print(f"\nper-question logging cost, ms wall | ms CPU (ratio to N={first})")
                for store, cost in per_question.items():
                    cells = "  ".join(
                        f"N={n}: {cost[n][0] * 1000:6.2f} ({cost[n][0] / cost[first][0]:.2f}x)"
                        f" | {cost[n][1] * 1000:6.2f} ({cost[n][1] / cost[first][1]:.2f}x)"
                        for n in sizes
                    )
                    print(f"  {store:<14} {cells}")


def _median(runs: list[dict[str, tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    """Per phase, the median wall and the median CPU seconds over ``runs``."""
    return {
        phase: (
            statistics.median(r[phase][0] for r in runs),
            statistics.median(r[phase][1] for r in runs),
        )
        for phase in runs[0]
    }


def _print_spread(runs: dict[str, list[dict[str, tuple[float, float]]]]) -> None:
    """Each round's ratio of the whole (wall) to sqlite's in the same round, per store."""
    base = [sum(w for w, _ in r.values()) for r in runs["sqlite"]]
    print("  whole wall / sqlite's, each round")
    for store, rounds in runs.items():
        if store == "sqlite":
            continue
        ratios = [sum(w for w, _ in r.values()) / b for r, b in zip(rounds, base, strict=True)]
        print(f"  {store:<18}" + "  ".join(f"{x:.2f}x" for x in ratios))


def _print(rows: dict[str, dict[str, float]]) -> None:
    """Seconds per phase and store, with each store's ratio to sqlite."""
    stores = list(rows)
    print(f"  {'phase':<18}" + "".join(f"{s:>16}" for s in stores))
    base = rows.get("sqlite")
    for phase in [*PHASES, "total", "total w/o traces"]:
        cells = []
        for store in stores:
            t = rows[store]
            value = {
                "total": sum(t.values()),
                "total w/o traces": sum(v for k, v in t.items() if k != "traces"),
            }.get(phase, t.get(phase, 0.0))
            ref = None
            if base is not None:
                ref = {
                    "total": sum(base.values()),
                    "total w/o traces": sum(v for k, v in base.items() if k != "traces"),
                }.get(phase, base.get(phase))
            ratio = f" ({value / ref:.2f}x)" if ref and store != "sqlite" else ""
            cells.append(f"{value:8.2f}{ratio:>8}")
        print(f"  {phase:<18}" + "".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    main()
