"""Retriever throughput on a BEIR collection (default: SciFact, ``../shared/real/ir/scifact``):
the BM25 index build time and queries/s of ``retriever=bm25``, ``dense`` and ``hybrid`` side by
side.

Each retriever is built as ``rag-exp run`` builds it (:func:`rag_experiments.build.build_baseline`
through :func:`~rag_experiments.build.build`, ``experiment=scifact``: whole abstracts as chunks,
``retrieval`` metrics, so the ranking is 100 deep) and prepared on the corpus; then every test
query is retrieved once, one after the other, in this process. Printed per retriever:
``prepare`` (index build, or load when cached), ``build`` (BM25 only: a fresh build into an
empty folder, the figure the ≤ 15 s budget is about), queries, queries/s.

Dense queries/s include embedding each query with MiniLM (the dominant cost); the dense index
comes from ``--cache-dir`` (built on the first run: minutes for SciFact's 5,183 abstracts on
CPU; a run of ``rag-exp run experiment=scifact`` with the same cache dir builds it too).

Usage::

    python bench/retriever_throughput.py [--path ../shared/real/ir/scifact]
        [--cache-dir .cache] [--retrievers bm25,dense,hybrid]

Absolute times are noisy on a shared machine: quote ratios, and the load (``uptime``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from hydra import compose, initialize_config_dir

import rag_experiments  # noqa: F401  (offline environment first)
from rag_experiments.build import build
from rag_experiments.config import register
from rag_experiments.index.bm25 import Bm25Store
from rag_experiments.locations import CONF_DIR, PROJECT_ROOT
from rag_experiments.retrieval.bm25 import index_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=str(PROJECT_ROOT.parent / "shared/real/ir/scifact"))
    parser.add_argument("--cache-dir", default=".cache")
    parser.add_argument("--retrievers", default="bm25,dense,hybrid")
    args = parser.parse_args()
    register()
    rows = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for name in args.retrievers.split(","):
            cfg = compose(
                config_name="config",
                overrides=[
                    "experiment=scifact",
                    f"dataset.path={args.path}",
                    f"retriever={name}",
                    f"paths.cache_dir={args.cache_dir}",
                    "progress=false",
                ],
            )
            exp = build(cfg)
            target, dataset = exp.target, exp.dataset
            started = time.perf_counter()
            target.prepare(dataset)
            prepare_s = time.perf_counter() - started
            build_s = None
            if name == "bm25":  # a fresh build of the same index, into an empty folder
                retriever = target.retriever
                chunks = [c for d in dataset.corpus for c in target.chunker.split(d)]
                with tempfile.TemporaryDirectory() as tmp:
                    started = time.perf_counter()
                    Bm25Store(tmp).ensure(
                        [index_text(c, retriever.index_title) for c in chunks],
                        [c.id for c in chunks],
                        "bench",
                        retriever.params,
                    )
                    build_s = time.perf_counter() - started
            queries = [s.user_input for s in dataset.samples]
            started = time.perf_counter()
            for q in queries:
                target.retriever.retrieve(q)
            seconds = time.perf_counter() - started
            rows.append((name, len(dataset.corpus), prepare_s, build_s, len(queries), seconds))
    print(f"\nload average {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    print(f"{'retriever':<10}{'docs':>7}{'prepare s':>11}{'build s':>9}{'queries':>9}{'q/s':>9}")
    for name, docs, prep, built, n, secs in rows:
        b = f"{built:.2f}" if built is not None else "-"
        print(f"{name:<10}{docs:>7}{prep:>11.2f}{b:>9}{n:>9}{n / secs:>9.1f}")
    if len(rows) > 1:
        base = rows[0]
        for name, *_, n, secs in rows[1:]:
            ratio = (base[4] / base[5]) / (n / secs)
            print(f"{base[0]} answers {ratio:.1f}x as many queries/s as {name}")


if __name__ == "__main__":
    main()
