"""Time of logging one run's results to each MLflow store, phase by phase.

Evaluates N questions once with the fake models (``llm=fake judge=fake embedder=hash
metrics=custom``; the bundled sample repeated with new ids up to N), then logs the same result
into a new run of each store and times each phase:

* ``params/metrics``: open the run (params, tags, ``config.yaml``), the dataset input, target
  tags, every aggregate metric;
* ``tables/artifacts``: ``per_query.json`` + ``per_query_results.csv``,
  ``average_results.csv``, ``metric_specs.json``, ``judge_audit.jsonl``;
* ``traces``: one trace per question with its spans and assessments.

Stores: a sqlite file (``sqlite``), an ``mlflow server`` over sqlite (``server-sqlite``) and
one over PostgreSQL (``server-pg``), both with proxied artifacts on 127.0.0.1, started here
(PostgreSQL from Debian's binaries, as in ``tests/mlflow_server.py``). Prints seconds per
phase side by side, the ratio to sqlite, and the per-question cost against the first N.
A benchmark, not a test::

    .venv/bin/python bench/logging_throughput.py [--questions 345 2000] [--more 10000]
        [--stores sqlite server-sqlite server-pg] [--no-traces]
"""

from __future__ import annotations

import argparse
import json
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
STORES = ("sqlite", "server-sqlite", "server-pg")


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


def _log(uri: str, experiment: str, cfg: Any, exp: Any, result: Any, tags: Any, traces: bool):
    """Log the result into a new run of ``uri``; seconds per phase."""
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
    times = dict.fromkeys(PHASES, 0.0)
    params = OmegaConf.to_container(cfg, resolve=True)
    started = time.perf_counter()
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
        times["params/metrics"] += time.perf_counter() - started

        started = time.perf_counter()
        tracker.log_table(result.rows(), name="per_query")
        tracker.log_csv(result.average_rows(), "average_results.csv")
        tracker.log_dict({s.name: s.description for s in result.specs}, "metric_specs.json")
        if result.audit:
            tracker.log_text("\n".join(json.dumps(r) for r in result.audit), "judge_audit.jsonl")
        times["tables/artifacts"] += time.perf_counter() - started

        started = time.perf_counter()
        tracker.log_traces(result, exp.metrics, tags)
        times["traces"] += time.perf_counter() - started
        started = time.perf_counter()
    times["params/metrics"] += time.perf_counter() - started  # ending the run
    return times


@contextmanager
def _stores(names: list[str], folder: Path) -> Iterator[dict[str, str]]:
    from mlflow_server import MlflowServer, run_postgres

    with ExitStack() as stack:
        uris: dict[str, str] = {}
        for name in names:
            if name == "sqlite":
                uris[name] = f"sqlite:///{folder / 'bench.db'}"
                continue
            workdir = folder / name
            workdir.mkdir()
            backend = None
            if name == "server-pg":
                new_database: Callable[[str], str] = stack.enter_context(run_postgres())
                backend = new_database("bench")
            server = MlflowServer(workdir, backend)
            server.start()
            stack.callback(server.stop)
            uris[name] = server.url
        yield uris


def main() -> None:
    """Parse the arguments, evaluate once per N, log to every store, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, nargs="+", default=[345, 2000])
    parser.add_argument("--more", type=int, nargs="*", default=[], help="further N (10000…)")
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    parser.add_argument("--no-traces", action="store_true", help="leave the traces phase out")
    args = parser.parse_args()
    sizes = [*args.questions, *args.more]

    import logging

    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="rag-exp-bench-") as tmp:
        folder = Path(tmp)
        with _stores(args.stores, folder) as uris:
            per_question: dict[str, dict[int, float]] = {s: {} for s in args.stores}
            for n in sizes:
                cfg, exp, result, tags = _evaluate(n, folder)
                print(f"\n{n} questions, {len(result.specs)} metric columns (fake models)")
                rows: dict[str, dict[str, float]] = {}
                for store, uri in uris.items():
                    rows[store] = _log(
                        uri, f"bench-{n}", cfg, exp, result, tags, not args.no_traces
                    )
                _print(rows, args.stores)
                for store in args.stores:
                    per_question[store][n] = sum(rows[store].values()) / n
            if len(sizes) > 1:
                first = sizes[0]
                print(f"\nper-question logging cost, ms (ratio to N={first})")
                for store in args.stores:
                    cells = "  ".join(
                        f"N={n}: {per_question[store][n] * 1000:6.2f} "
                        f"({per_question[store][n] / per_question[store][first]:.2f}x)"
                        for n in sizes
                    )
                    print(f"  {store:<14} {cells}")


def _print(rows: dict[str, dict[str, float]], stores: list[str]) -> None:
    """Seconds per phase and store, with each store's ratio to sqlite."""
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
