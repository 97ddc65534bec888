"""Tokens per second of the embedded model (llama-cpp-python, the bundled SmolLM2-135M GGUF)
on this machine: prompt evaluation and generation, at each thread count.

The main job's time is its model calls (``make run``: answers, then the judge's calls per
question), so these two rates bound it: a call of P prompt tokens and C completion tokens takes
at least ``P / prompt_rate + C / generation_rate``. Prompt tokens already in the KV cache from
the previous call (the shared prefix of one question's judge prompts) are not evaluated again
(llama-cpp-python keeps the longest common prefix). A benchmark, not a test::

    .venv/bin/python bench/embedded_rates.py [--threads 1 2] [--prompt-tokens 600] [--gen 64]
"""

from __future__ import annotations

import argparse
import os
import time

from rag_experiments.llm.embedded import bundled_model_path


def main() -> None:
    """Load the model once per thread count, time one prompt and one greedy generation."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prompt-tokens", type=int, default=600, help="prompt length")
    parser.add_argument("--gen", type=int, default=64, help="tokens generated")
    opts = parser.parse_args()
    from llama_cpp import Llama

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("| n_threads | prompt tok/s | generation tok/s |")
    print("| --- | --- | --- |")
    for threads in opts.threads:
        llm = Llama(
            model_path=str(bundled_model_path()),
            n_ctx=4096,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )
        words = ("the retention period of personal data is set by the policy " * 200).encode()
        tokens = llm.tokenize(words, add_bos=True)[: opts.prompt_tokens]
        llm.reset()
        started = time.perf_counter()
        llm.eval(tokens)
        prompt_rate = len(tokens) / (time.perf_counter() - started)
        started = time.perf_counter()
        made = 0
        for _ in llm.generate(tokens, temp=0.0):  # the prompt is cached: only new tokens
            made += 1
            if made == opts.gen:
                break
        gen_rate = made / (time.perf_counter() - started)
        print(f"| {threads} | {prompt_rate:.0f} | {gen_rate:.1f} |")
        del llm


if __name__ == "__main__":
    main()
