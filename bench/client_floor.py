"""The floor a Python client can reach when it sends N judge-sized requests at once: wall time
over the ideal (one latency) and client CPU per call, by HTTP library, with nothing else of
ours on the path.

``bench/judge_throughput.py --slots 0`` (unbounded: 258 calls of 0.2 s at once) asks for our
whole judging path to finish within 1.2x of one latency (0.24 s), i.e. at most ~40 ms of
client time on the critical path for 258 calls (~0.15 ms each). This script measures what the
libraries themselves need for the same load against the same fake server
(:mod:`rag_experiments.fakes.openai_server`, in its own process, ``--slots 0`` = unbounded),
each as its idiomatic concurrent form, the body the size of one of our judge prompts:

- ``threads, no HTTP``: a thread per call that only sleeps the latency (the cost of the
  thread per call alone: :class:`~rag_experiments.metrics.scheduler.WorkerPool`);
- ``urllib3, thread per call``: our transport today (:mod:`rag_experiments.llm.transport`);
- ``aiohttp, one event loop``: every call a coroutine on one loop (an async core);
- ``aiohttp, loop thread + thread per call``: a loop thread carrying the HTTP, called from one
  thread per call (an async transport under the present thread-per-task scheduler);
- ``httpx.AsyncClient, one event loop``.

Each variant runs once to open its connections, then ``--reps`` timed times; printed: the best
and the median wall / ideal, and CPU ms per call (this process, all threads). A benchmark, not
a test; on a shared machine read the CPU columns and the ratios::

    .venv/bin/python bench/client_floor.py [--calls 258] [--latency 0.2] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

BODY: dict[str, Any] = {
    "model": "fake-judge",
    "messages": [
        {"role": "system", "content": "You are a strict grader. " * 60},
        {"role": "user", "content": "Contexts:\n" + "[1] some retrieved context text. " * 80},
    ],
    "max_tokens": 512,
    "temperature": 0.0,
    "seed": 0,
    "stream": False,
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "Verdict",
            "schema": {
                "type": "object",
                "properties": {"verdict": {"type": "integer", "minimum": 0, "maximum": 1}},
                "required": ["verdict"],
            },
        },
    },
}
"""A request the size of one of our judge prompts (~3 kB)."""

HEADERS = {"Content-Type": "application/json"}


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    """The fake server, unbounded slots, in its own process; ``(process, /v1 URL)``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_experiments.fakes.openai_server",
         "--latency", str(latency), "--slots", "100000"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def threads_each(n: int, one: Callable[[int], None]) -> None:
    """``one(i)`` for ``i < n``, a thread each, all at once; returns when all are done."""
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def variants(url: str, n: int, latency: float) -> tuple[dict[str, Callable[[], None]], Callable]:
    """``({name: run n calls at once}, close)``."""
    import aiohttp
    import httpx
    import urllib3

    root, path = url.removesuffix("/v1"), "/v1/chat/completions"
    pool = urllib3.connection_from_url(root, maxsize=n + 8, block=True, retries=False)

    def u3_one(_: int) -> None:
        r = pool.urlopen("POST", path, body=json.dumps(BODY).encode(), headers=HEADERS,
                         retries=False, redirect=False)  # fmt: skip
        json.loads(r.data)

    loop = asyncio.new_event_loop()
    bg = asyncio.new_event_loop()
    threading.Thread(target=bg.run_forever, daemon=True).start()

    async def session() -> Any:
        return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    sess = loop.run_until_complete(session())
    bsess = asyncio.run_coroutine_threadsafe(session(), bg).result()

    async def aio_post(s: Any) -> Any:
        async with s.post(root + path, data=json.dumps(BODY).encode(), headers=HEADERS) as r:
            return await r.read()

    async def aio_all() -> None:
        for data in await asyncio.gather(*[aio_post(sess) for _ in range(n)]):
            json.loads(data)

    def aio_from_thread(_: int) -> None:
        json.loads(asyncio.run_coroutine_threadsafe(aio_post(bsess), bg).result())

    hloop = asyncio.new_event_loop()

    async def hclient() -> httpx.AsyncClient:
        return httpx.AsyncClient(
            trust_env=False, limits=httpx.Limits(max_connections=n + 8), timeout=60
        )

    hc = hloop.run_until_complete(hclient())

    async def hx_all() -> None:
        async def one() -> None:
            r = await hc.post(root + path, content=json.dumps(BODY).encode(), headers=HEADERS)
            r.json()

        await asyncio.gather(*[one() for _ in range(n)])

    def close() -> None:
        loop.run_until_complete(sess.close())
        asyncio.run_coroutine_threadsafe(bsess.close(), bg).result()
        hloop.run_until_complete(hc.aclose())
        pool.close()

    return {
        "threads, no HTTP": lambda: threads_each(n, lambda _: time.sleep(latency)),
        "urllib3, thread per call": lambda: threads_each(n, u3_one),
        "aiohttp, one event loop": lambda: loop.run_until_complete(aio_all()),
        "aiohttp, loop thread + thread per call": lambda: threads_each(n, aio_from_thread),
        "httpx.AsyncClient, one event loop": lambda: hloop.run_until_complete(hx_all()),
    }, close


def main() -> None:
    """Run every variant ``--reps`` times; print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=258, help="calls at once (258 = the bench)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency per call (s)")
    parser.add_argument("--reps", type=int, default=5, help="timed runs per variant")
    args = parser.parse_args()
    proc, url = start_server(args.latency)
    try:
        runs, close = variants(url, args.calls, args.latency)
        print(
            f"{args.calls} calls at once, {args.latency * 1000:.0f} ms each, fake server "
            f"unbounded; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}\n"
        )
        print(f"{'variant':<40} {'best wall/ideal':>15} {'median':>7} {'CPU ms/call':>11}")
        for name, run in runs.items():
            run()  # connections opened, first-use costs paid
            walls, cpus = [], []
            for _ in range(args.reps):
                wall, cpu = time.perf_counter(), time.process_time()
                run()
                walls.append((time.perf_counter() - wall) / args.latency)
                cpus.append((time.process_time() - cpu) / args.calls * 1000)
            print(
                f"{name:<40} {min(walls):>15.2f} {statistics.median(walls):>7.2f} "
                f"{statistics.median(cpus):>11.2f}",
                flush=True,
            )
        close()
        print(f"\nideal = one latency; machine load after: {os.getloadavg()[0]:.1f}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
