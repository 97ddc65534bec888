"""Requests per second of the HTTP model layer against max_concurrency.

Runs batches of chat requests through :func:`rag_experiments.llm.batch.complete_many` and
:class:`~rag_experiments.llm.ollama.OllamaChat` against the fake Ollama server on 127.0.0.1,
whose every ``/api/chat`` takes a fixed ``latency`` seconds, and prints the measured rate next
to the ideal one, ``concurrency / latency`` (each worker completes one request per latency
period). No response cache, so every request reaches the server. A benchmark, not a test::

    .venv/bin/python bench/llm_throughput.py [--latency 0.2] [--requests 48] \
        [--concurrency 1 2 4 8 16]
"""

from __future__ import annotations

import argparse
import time

from rag_experiments.common.http import RetryPolicy
from rag_experiments.fakes.ollama_server import FakeOllamaServer
from rag_experiments.llm.base import Completion
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.ollama import OllamaChat


def main() -> None:
    """Parse the arguments, run one batch per concurrency level, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2, help="server latency (s)")
    parser.add_argument("--requests", type=int, default=48, help="requests per batch")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    args = parser.parse_args()

    with FakeOllamaServer(latency_s=args.latency) as server:
        model = OllamaChat(model="fake-llm", base_url=server.url, retry=RetryPolicy(timeout_s=30))
        model.complete([{"role": "user", "content": "warm-up"}])
        print(
            f"fake Ollama at {server.url}, latency {args.latency * 1000:.0f} ms per request, "
            f"{args.requests} requests per batch"
        )
        print(
            f"{'max_concurrency':>15} {'wall s':>8} {'req/s':>8} {'ideal req/s':>12} "
            f"{'efficiency':>10}"
        )
        for c in args.concurrency:
            requests = [
                ChatRequest([{"role": "user", "content": f"c{c} q{i}"}])
                for i in range(args.requests)
            ]
            started = time.perf_counter()
            results = complete_many(model, requests, max_concurrency=c, progress=False)
            wall = time.perf_counter() - started
            failed = sum(not isinstance(r, Completion) for r in results)
            rate = args.requests / wall
            ideal = c / args.latency
            note = f"  ({failed} failed)" if failed else ""
            print(f"{c:>15} {wall:>8.2f} {rate:>8.1f} {ideal:>12.1f} {rate / ideal:>10.0%}{note}")


if __name__ == "__main__":
    main()
