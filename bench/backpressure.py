"""Calls under HTTP 429: how each back-pressure policy of the model client's gate
(:class:`~rag_experiments.llm.gate.EndpointGate`) spends a run's wall time.

A fake OpenAI-compatible server (:mod:`rag_experiments.fakes.openai_server`, in its own
process) answers every chat request after ``--latency`` s in one of ``--slots`` slots, and
answers a deterministic ``--share`` of them ``429`` with ``Retry-After: --retry-after`` at once.
Our chat client (:class:`~rag_experiments.llm.openai_compat.OpenAICompatChat`, its real retry
policy and gate) makes ``--calls`` calls from a pool of worker threads, as the judge scheduler
does, once per variant, a new server each time:

- ``hold-all`` (the gate until issue 42): every 429 halves the bound and holds *every* new
  call until its ``Retry-After`` has passed;
- ``per-call``: only the refused call waits its ``Retry-After`` (its retry), the bound stays;
- ``aimd-5s``: the refused call waits; the bound is halved at most once per 5 s and grows back
  by ``1/bound`` per success (MLflow's GenAI evaluation: ``RPSRateLimiter`` in
  ``mlflow/genai/evaluation/rate_limiter.py``, β = 0.5, α = 1, ``_throttle_cooldown`` 5 s);
- ``per-call, 2x workers``: ``per-call`` with twice as many worker threads as the gate's
  limit, so a thread waiting out a ``Retry-After`` does not leave a slot idle (the gate still
  caps the calls in flight).

Printed per variant: wall time, the peak of calls in flight (counted by the server), the 429s
received, and calls made. ``python bench/backpressure.py`` (defaults: 2000 calls, 32 in flight,
32 slots, 0.1 s latency, 5 % 429 with Retry-After 1 s).
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from rag_experiments.common.http import RetryPolicy
from rag_experiments.llm.gate import EndpointGate
from rag_experiments.llm.openai_compat import OpenAICompatChat


@dataclass(frozen=True)
class Variant:
    name: str
    hold_all: bool
    decrease_every_s: float | None
    workers_per_slot: int = 1


VARIANTS = (
    Variant("hold-all (before)", hold_all=True, decrease_every_s=0.0),
    Variant("per-call", hold_all=False, decrease_every_s=None),
    Variant("aimd-5s (MLflow)", hold_all=False, decrease_every_s=5.0),
    Variant("per-call, 2x workers", hold_all=False, decrease_every_s=None, workers_per_slot=2),
)


def serve(args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rag_experiments.fakes.openai_server",
            "--latency",
            str(args.latency),
            "--slots",
            str(args.slots),
            "--fault",
            "429",
            "--fault-share",
            str(args.share),
            "--retry-after",
            str(args.retry_after),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip() if proc.stdout else ""
    return proc, url


def run(variant: Variant, args: argparse.Namespace) -> dict[str, float]:
    proc, url = serve(args)
    try:
        retry = RetryPolicy(max_retries=8, backoff_s=0.1, backoff_max_s=8.0, timeout_s=30.0)
        chat = OpenAICompatChat(
            base_url=url,
            model="fake",
            max_concurrency=args.in_flight,
            in_flight=args.in_flight,
            retry=retry,
        )
        chat.gate = EndpointGate(
            args.in_flight,
            where=chat.where,
            hold_all=variant.hold_all,
            decrease_every_s=variant.decrease_every_s,
        )
        messages = [{"role": "user", "content": "Is the sky blue?"}]
        started = time.perf_counter()
        workers = args.in_flight * variant.workers_per_slot
        with ThreadPoolExecutor(workers) as pool:
            replies = list(pool.map(lambda _: chat.complete(messages), range(args.calls)))
        wall = time.perf_counter() - started
        stats = httpx.get(url.removesuffix("/v1") + "/stats", trust_env=False).json()
        assert len(replies) == args.calls
        return {
            "wall_s": wall,
            "peak": stats["peak_in_flight"],
            "429s": stats["faults"],
            "requests": stats["requests"],
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--retry-after", type=float, default=1.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # one retry line per 429 would drown the table
    ideal = args.calls / args.slots * args.latency
    print(
        f"{args.calls} calls, {args.in_flight} in flight, {args.slots} slots x "
        f"{args.latency:g} s, {args.share:.0%} answered 429 + Retry-After: {args.retry_after:g} "
        f"(ideal without 429s: {ideal:.1f} s)"
    )
    print("| variant | wall (s) | peak in flight | 429s received | requests |")
    print("|---|---|---|---|---|")
    for variant in VARIANTS:
        r = run(variant, args)
        print(
            f"| {variant.name} | {r['wall_s']:.1f} | {r['peak']} | {r['429s']} | {r['requests']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
