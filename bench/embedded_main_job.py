"""Where the main job's time goes: ``rag-exp run max_samples=8`` (what ``make run`` runs) with
the embedded SmolLM2-135M as generator and judge, every model call timed.

The job runs in this process, in a scratch folder (its ``mlruns.db`` and ``outputs/`` there),
with ``cache.mode=off`` so every call reaches the model. Each call of
:class:`~rag_experiments.llm.embedded.EmbeddedChat` is recorded: its role (``generator``, or
the judged metric calling it), the prompt's tokens, the prompt tokens llama.cpp actually
evaluated (the rest are the prefix it kept from the same model's previous call), completion
tokens, whether the reply hit ``max_tokens``, and seconds split into prompt evaluation,
generation (one ``eval`` per token) and the rest (sampling under the JSON grammar, Python).

Before the job, the runtime's rates at the job's thread counts are measured as in
``bench/embedded_rates.py`` (a 600-token prompt, 64 greedy tokens). The limit they set is::

    limit = Σ evaluated prompt tokens / prompt_rate + Σ completion tokens / generation_rate

(the "no reuse" limit counts every prompt token). The generator and the judge are two model
instances in two threads, so on 2 cores their calls overlap and the wall time can be below the
sum of the calls' seconds. The load average is printed with the numbers: the machine may be
shared. A benchmark, not a test::

    .venv/bin/python bench/embedded_main_job.py [--max-samples 8] [--out /tmp/emj] [override ...]

Overrides (e.g. ``llm.n_threads=2``) are passed to ``rag-exp run``; the per-query table is
left in ``<out>/mlartifacts/…/per_query_results.csv`` (the newest path is printed) to diff two runs.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

_call = threading.local()


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure_rates(n_threads: int | None, n_threads_batch: int | None) -> tuple[float, float]:
    """(prompt tokens/s, generation tokens/s) of the bundled model with these thread counts."""
    from llama_cpp import Llama

    from rag_experiments.llm.embedded import bundled_model_path

    llm = Llama(
        model_path=str(bundled_model_path()),
        n_ctx=4096,
        n_threads=n_threads,
        n_threads_batch=n_threads_batch,
        verbose=False,
    )
    words = ("the retention period of personal data is set by the policy " * 200).encode()
    tokens = llm.tokenize(words, add_bos=True)[:600]
    llm.reset()
    started = time.perf_counter()
    llm.eval(tokens)
    prompt_rate = len(tokens) / (time.perf_counter() - started)
    started = time.perf_counter()
    made = 0
    for _ in llm.generate(tokens, temp=0.0):
        made += 1
        if made == 64:
            break
    gen_rate = made / (time.perf_counter() - started)
    threads = (llm.n_threads, llm.n_threads_batch)
    del llm
    print(
        f"rates (n_threads={threads[0]}, n_threads_batch={threads[1]}): prompt {prompt_rate:.0f}"
        f" tok/s, generation {gen_rate:.1f} tok/s; load {_load()}"
    )
    return prompt_rate, gen_rate


def _role() -> str:
    """The judged metric up the stack (its ``name``), else ``generator``."""
    from rag_experiments.metrics.scheduler import JudgedRowMetric

    frame = sys._getframe(2)
    while frame is not None:
        me = frame.f_locals.get("self")
        if isinstance(me, JudgedRowMetric):
            return str(me.name)
        frame = frame.f_back
    return "generator"


def instrument(calls: list[dict[str, Any]]) -> None:
    """Record every EmbeddedChat call into ``calls`` (patches the class and llama_cpp.Llama)."""
    import llama_cpp

    from rag_experiments.llm.embedded import EmbeddedChat

    real_eval = llama_cpp.Llama.eval
    real_complete = EmbeddedChat.complete

    def timed_eval(self: Any, tokens: Any) -> Any:
        rec = getattr(_call, "rec", None)
        started = time.perf_counter()
        try:
            return real_eval(self, tokens)
        finally:
            if rec is not None:
                took = time.perf_counter() - started
                if rec["evals"] == 0:  # the prompt (its part not kept from the last call)
                    rec["evaluated"] += len(tokens)
                    rec["prompt_s"] += took
                else:
                    rec["gen_s"] += took
                rec["evals"] += 1

    def recorded(self: Any, messages: Any, schema: Any = None, **options: Any) -> Any:
        rec = {
            "role": _role(),
            "evaluated": 0,
            "prompt_s": 0.0,
            "gen_s": 0.0,
            "evals": 0,
            "max_tokens": int(options.get("max_tokens", self.max_tokens)),
            "prompt": 0,
            "completion": 0,
            "capped": False,
            "error": "",
        }
        _call.rec = rec
        started = time.perf_counter()
        try:
            out = real_complete(self, messages, schema, **options)
            rec["prompt"], rec["completion"] = out.usage.prompt_tokens, out.usage.completion_tokens
            rec["capped"] = out.finish_reason == "length"
            return out
        except Exception as exc:
            usage = getattr(exc, "usage", None)
            if usage is not None:
                rec["prompt"], rec["completion"] = usage.prompt_tokens, usage.completion_tokens
            rec["capped"] = rec["completion"] >= rec["max_tokens"]
            rec["error"] = type(exc).__name__
            raise
        finally:
            rec["seconds"] = time.perf_counter() - started
            _call.rec = None
            calls.append(rec)

    llama_cpp.Llama.eval = timed_eval  # type: ignore[method-assign]
    EmbeddedChat.complete = recorded  # type: ignore[method-assign]


def table(calls: list[dict[str, Any]], rate_p: float, rate_g: float, wall: float) -> None:
    """Print the per-role table and the limit the rates set."""
    by: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for rec in calls:
        for key in ("role", "all"):
            row = by[rec["role"] if key == "role" else "**all**"]
            row["calls"] += 1
            for k in ("prompt", "evaluated", "completion", "seconds", "prompt_s", "gen_s"):
                row[k] += rec[k]
            row["capped"] += rec["capped"]
            row["max_completion"] = max(row["max_completion"], rec["completion"])
            row["max_tokens"] = max(row["max_tokens"], rec["max_tokens"])
            row["errors"] += bool(rec["error"])
    print(
        "| role / metric | calls | prompt tok | evaluated | completion tok | max compl. / cap "
        "| capped | s | prompt eval s | gen eval s | other s | limit s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in sorted(by, key=lambda n: (n == "**all**", n)):
        r = by[name]
        limit = r["evaluated"] / rate_p + r["completion"] / rate_g
        other = r["seconds"] - r["prompt_s"] - r["gen_s"]
        print(
            f"| {name} | {r['calls']:.0f} | {r['prompt']:.0f} | {r['evaluated']:.0f} | "
            f"{r['completion']:.0f} | {r['max_completion']:.0f} / {r['max_tokens']:.0f} | "
            f"{r['capped']:.0f} | {r['seconds']:.1f} | {r['prompt_s']:.1f} | {r['gen_s']:.1f} |"
            f" {other:.1f} | {limit:.1f} |"
        )
    r = by["**all**"]
    limit = r["evaluated"] / rate_p + r["completion"] / rate_g
    no_reuse = r["prompt"] / rate_p + r["completion"] / rate_g
    print(
        f"limit Σ evaluated/{rate_p:.0f} + Σ completion/{rate_g:.1f} = {limit:.1f} s "
        f"(no prefix reuse: {no_reuse:.1f} s); calls' seconds {r['seconds']:.1f} s; "
        f"job wall {wall:.1f} s; load {_load()}"
    )


def main() -> None:
    """Measure the rates, run the job instrumented, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", default="8")
    parser.add_argument("--out", default="/tmp/embedded_main_job")
    parser.add_argument("--threads", type=int, default=None, help="n_threads of the rates")
    parser.add_argument("--threads-batch", type=int, default=None, help="n_threads_batch")
    opts, overrides = parser.parse_known_args()
    print(f"load {_load()} on {os.cpu_count()} cores")
    rate_p, rate_g = measure_rates(opts.threads, opts.threads_batch)
    calls: list[dict[str, Any]] = []
    instrument(calls)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    os.chdir(out)
    from rag_experiments.cli import main as cli_main

    argv = [
        "run",
        f"max_samples={opts.max_samples}",
        "cache.mode=off",
        "progress=false",
        *overrides,
    ]
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        code = cli_main(argv)
    wall = time.perf_counter() - started
    print(f"rag-exp {' '.join(argv)}: exit {code}, {wall:.1f} s")
    table(calls, rate_p, rate_g, wall)
    newest = sorted(
        glob.glob(str(out / "**/per_query_results.csv"), recursive=True), key=os.path.getmtime
    )
    if newest:
        print(f"per-query values: {newest[-1]}")


if __name__ == "__main__":
    main()
