"""Documents per second and nDCG@10 of the MiniLM embedder per backend, on BEIR SciFact.

Embeds the SciFact corpus (``title + " " + text``, as the index and MTEB embed it) with every
backend of :class:`~rag_experiments.embedding.SentenceTransformerEmbedder` (``torch``,
``onnx``, ``onnx-int8``), ranks it for the test queries by exact cosine similarity and scores
nDCG@10 with the project's :class:`~rag_experiments.metrics.retrieval.RetrievalMetrics`
(pytrec_eval through ir-measures). The corpus is embedded in slices, each slice by every
backend in turn (rotating which goes first), so load from other processes on a shared machine
falls on all backends alike. Model loading and the one-off ONNX export are timed apart and
not counted in docs/s. No embedding cache. A benchmark, not a test::

    .venv/bin/python bench/embed_throughput.py [--data ../shared/real/ir/scifact] \
        [--limit 500] [--backends torch onnx onnx-int8] [--batch-size 32]

``--limit N`` keeps N documents: the test queries' relevant ones first, then others in corpus
order; only queries with a relevant document left are scored.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from rag_experiments.data.beir import BeirDataset
from rag_experiments.embedding.onnx_runtime import BACKENDS
from rag_experiments.embedding.sentence_transformers import SentenceTransformerEmbedder
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import RagResponse

DEFAULT_DATA = PROJECT_ROOT.parent / "shared" / "real" / "ir" / "scifact"
SLICE = 256
"""Documents per timed slice."""


def main() -> None:
    """Parse the arguments, embed and score with every backend, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR SciFact folder")
    parser.add_argument("--limit", type=int, default=None, help="documents to keep (quick run)")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--batch-size", type=int, default=32, help="texts per forward pass")
    parser.add_argument("--cache-dir", default=".cache", help="where ONNX exports are kept")
    args = parser.parse_args()

    ds = BeirDataset(str(args.data)).load()
    relevant = {d for s in ds.samples for d in s.reference_doc_ids}
    docs = sorted(ds.corpus, key=lambda d: d.id not in relevant)  # stable: corpus order kept
    if args.limit is not None:
        docs = docs[: args.limit]
    kept = {d.id for d in docs}
    samples = [s for s in ds.samples if kept & set(s.reference_doc_ids)]
    texts = [f"{d.title} {d.text}" if d.title else d.text for d in docs]

    embedders: dict[str, SentenceTransformerEmbedder] = {}
    load_s: dict[str, float] = {}
    for b in args.backends:
        started = time.perf_counter()
        embedders[b] = SentenceTransformerEmbedder(
            backend=b, batch_size=args.batch_size, cache_dir=args.cache_dir, show_progress=False
        )
        embedders[b].embed_documents(texts[:4])  # load (and export once) + warm-up
        load_s[b] = time.perf_counter() - started
    print(
        f"{args.data.name}: {len(docs)} documents, {len(samples)} test queries, "
        f"batch {args.batch_size}, slices of {SLICE}, backends in turn",
        flush=True,
    )

    vectors: dict[str, list[np.ndarray]] = {b: [] for b in args.backends}
    spent = dict.fromkeys(args.backends, 0.0)
    for n, start in enumerate(range(0, len(texts), SLICE)):
        part = texts[start : start + SLICE]
        order = args.backends[n % len(args.backends) :] + args.backends[: n % len(args.backends)]
        for b in order:
            started = time.perf_counter()
            vectors[b].append(embedders[b].embed_documents(part))
            spent[b] += time.perf_counter() - started
        if (n + 1) % 5 == 0:
            print(f"  {start + len(part)}/{len(texts)} documents", flush=True)

    metric = RetrievalMetrics(cutoffs=(10,), measures=("nDCG",), chunk_level=False)
    ids = [d.id for d in docs]
    results: dict[str, tuple[float, float]] = {}  # backend -> (docs/s, nDCG@10)
    for b in args.backends:
        matrix = np.concatenate(vectors[b])
        queries = np.stack([embedders[b].embed_query(s.user_input) for s in samples])
        scores = queries @ matrix.T
        responses = [
            RagResponse(retrieved_doc_ids=[ids[i] for i in np.argsort(-row)[:10]]) for row in scores
        ]
        rows = metric.evaluate(samples, responses)
        ndcg = float(np.nanmean([r["nDCG@10"].value for r in rows]))
        results[b] = (len(texts) / spent[b], ndcg)

    base = results.get("torch", (math.nan, math.nan))
    print(
        f"{'backend':>10} {'load s':>7} {'docs/s':>8} {'x torch':>8} {'nDCG@10':>8} "
        f"{'d nDCG':>8}  id"
    )
    for b, (rate, ndcg) in results.items():
        print(
            f"{b:>10} {load_s[b]:>7.1f} {rate:>8.1f} {rate / base[0]:>8.2f} {ndcg:>8.4f} "
            f"{ndcg - base[1]:>+8.4f}  {embedders[b].id}"
        )


if __name__ == "__main__":
    main()
