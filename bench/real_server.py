"""Judging against a real, compute-bound OpenAI-compatible server: ours and DeepEval's
``evaluate()`` (``include_reason=False``) on the same answers, at 1 and 4 slots.

The server is llama-cpp-python's own (``python -m llama_cpp.server``,
:class:`~rag_experiments.fakes.llama_cpp_server.LlamaCppServer`) serving the bundled SmolLM2-135M
GGUF on 127.0.0.1 with ``--cache true``: it computes one request at a time and restores the
longest cached prompt prefix. "Slots" here are the requests each system keeps going at once:

- ours: ``judge.max_concurrency = slots`` with ``slot_affinity`` (one question's calls in
  sequence on one lane, lanes = slots; ``in_flight`` left at its default);
- DeepEval: ``AsyncConfig(max_concurrent=slots)``, its metrics calling the server through a
  ``DeepEvalBaseLLM`` that asks for JSON of DeepEval's schema the way this server accepts it
  (``{"type": "json_object", "schema": …}``) with the same completion cap as ours.

The answers are made once by the baseline (fake generator, hash embedder) on the first
``--questions`` sample questions. For each system and slot count: wall seconds, judge calls,
prompt tokens (as the server reports them in ``usage``), of which reused from its prompt cache
(read from the server's log: ``prefix-match hit``; the server does not report it in ``usage``)
and its share, completion tokens, and values returned (not NaN) of all the metric values asked.
A benchmark, not a test (minutes: a 135M model on one CPU thread)::

    .venv/bin/python bench/real_server.py [--questions 5] [--slots 1 4] [--skip evaluate]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, os.path.dirname(__file__))

from judge_throughput import answers, deepeval_evaluate  # noqa: E402

from rag_experiments.common.http import RetryPolicy
from rag_experiments.fakes.llama_cpp_server import LlamaCppServer, prompt_reuse  # noqa: E402
from rag_experiments.llm.cache import CachedChat  # noqa: E402
from rag_experiments.llm.openai_compat import OpenAICompatChat  # noqa: E402
from rag_experiments.llm.usage import UsageMeter  # noqa: E402
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy  # noqa: E402
from rag_experiments.metrics.context_precision import ContextPrecision  # noqa: E402
from rag_experiments.metrics.context_recall import ContextRecall  # noqa: E402
from rag_experiments.metrics.faithfulness import Faithfulness  # noqa: E402
from rag_experiments.metrics.scheduler import judge_rows  # noqa: E402

MAX_TOKENS = 256
"""Completion cap of every judge call of both systems (our metrics' default)."""


def ours(url: str, slots: int, samples: list[Any], responses: list[Any], embedder: Any) -> dict:
    """Our four core metrics with ``max_concurrency = slots`` and slot affinity."""
    meter = UsageMeter("judge")
    judge = CachedChat(
        OpenAICompatChat(
            base_url=url,
            model="smollm2",
            max_tokens=MAX_TOKENS,
            max_concurrency=slots,
            slot_affinity=True,
            retry=RetryPolicy(timeout_s=900),
        ),
        meter,
    )
    metrics = [
        Faithfulness(judge=judge),
        AnswerRelevancy(judge=judge, embedder=embedder),
        ContextPrecision(judge=judge),
        ContextRecall(judge=judge),
    ]
    out = judge_rows(metrics, samples, responses, progress=False)
    values = [v for r in out.values() for row in r.values for v in row.values()]
    return {
        "calls": meter.calls,
        "prompt": meter.prompt_tokens,
        "completion": meter.completion_tokens,
        "returned": sum(not math.isnan(v.value) for v in values),
        "asked": len(values),
    }


def deepeval_llm(url: str) -> Any:
    """A ``DeepEvalBaseLLM`` for llama-cpp-python's server, counting calls and tokens."""
    from deepeval.models import DeepEvalBaseLLM

    class ServerLLM(DeepEvalBaseLLM):
        def __init__(self) -> None:
            self.calls = self.prompt = self.completion = 0
            self.lock = threading.Lock()
            self.aclient: httpx.AsyncClient | None = None
            super().__init__("smollm2")

        def load_model(self) -> Any:
            return self

        def _body(self, prompt: str, schema: Any) -> dict[str, Any]:
            body: dict[str, Any] = {
                "model": "smollm2",
                "temperature": 0,
                "seed": 0,
                "max_tokens": MAX_TOKENS,
                "messages": [{"role": "user", "content": prompt}],
            }
            if schema is not None:
                body["response_format"] = {
                    "type": "json_object",
                    "schema": schema.model_json_schema(),
                }
            return body

        def _out(self, reply: httpx.Response, schema: Any) -> Any:
            data = reply.json()
            usage = data.get("usage") or {}
            with self.lock:
                self.calls += 1
                self.prompt += int(usage.get("prompt_tokens") or 0)
                self.completion += int(usage.get("completion_tokens") or 0)
            text = data["choices"][0]["message"]["content"]
            return schema.model_validate_json(text) if schema is not None else text

        def generate(self, prompt: str, schema: Any = None) -> Any:
            reply = httpx.post(
                f"{url}/chat/completions",
                json=self._body(prompt, schema),
                timeout=900,
                trust_env=False,
            )
            return self._out(reply, schema)

        async def a_generate(self, prompt: str, schema: Any = None) -> Any:
            if self.aclient is None:
                self.aclient = httpx.AsyncClient(timeout=900, trust_env=False)
            reply = await self.aclient.post(
                f"{url}/chat/completions", json=self._body(prompt, schema)
            )
            return self._out(reply, schema)

        def get_model_name(self) -> str:
            return "smollm2"

    return ServerLLM()


def theirs(url: str, slots: int, samples: list[Any], responses: list[Any]) -> dict:
    """DeepEval's ``evaluate()``, reason off, ``max_concurrent = slots``."""
    llm = deepeval_llm(url)
    # DeepEval's own per-task deadline is far shorter than a 135M model on a loaded CPU needs
    os.environ.setdefault("DEEPEVAL_PER_TASK_TIMEOUT_SECONDS_OVERRIDE", "7200")
    # a reply cut at the token cap fails its metric (no score), as ours gives NaN, and the
    # run goes on: counted in "values"
    result = deepeval_evaluate(
        samples, responses, llm, include_reason=False, max_concurrent=slots, ignore_errors=True
    )
    scores = [m.score for case in result.test_results for m in (case.metrics_data or [])]
    returned = sum(s is not None and not math.isnan(s) for s in scores)
    return {
        "calls": llm.calls,
        "prompt": llm.prompt,
        "completion": llm.completion,
        "returned": returned,
        "asked": 4 * len(samples),
    }


def main() -> None:
    """Start the server, run each system at each slot count, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--skip", nargs="*", default=[], choices=["custom", "evaluate"])
    parser.add_argument("--threads", type=int, default=1, help="the server's CPU threads")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    os.chdir(os.path.join(os.path.dirname(__file__), ".."))
    samples, responses, embedder = answers(args.questions)
    log = Path(tempfile.mkdtemp(prefix="bench-llama-")) / "server.log"  # rewritten per run
    print(
        f"llama-cpp-python server, bundled SmolLM2-135M GGUF, n_ctx 4096, {args.threads} "
        f"thread(s), --cache true; {len(samples)} questions; 4 core metrics; max_tokens "
        f"{MAX_TOKENS}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    header = (
        f"\n{'system':<34} {'slots':>5} {'wall s':>7} {'calls':>5} {'prompt tok':>10} "
        f"{'reused':>7} {'reused %':>8} {'compl tok':>9} {'values':>7}"
    )
    print(header, flush=True)
    for slots in args.slots:
        for name in ("custom", "evaluate"):
            if name in args.skip:
                continue
            # a fresh server each time: its prompt cache must not hold the last run's prompts
            with LlamaCppServer(log, n_ctx=4096, n_threads=args.threads, cache=True) as server:
                started = time.perf_counter()
                if name == "custom":
                    row = ours(server.url, slots, samples, responses, embedder)
                    label = "rag-exp metrics=custom"
                else:
                    row = theirs(server.url, slots, samples, responses)
                    label = "deepeval evaluate(), reason off"
                wall = time.perf_counter() - started
                reused, _ = prompt_reuse(server.log())
            share = reused / row["prompt"] if row["prompt"] else float("nan")
            print(
                f"{label:<34} {slots:>5} {wall:>7.1f} {row['calls']:>5} {row['prompt']:>10} "
                f"{reused:>7} {share:>8.0%} {row['completion']:>9} "
                f"{row['returned']:>3}/{row['asked']:<3}",
                flush=True,
            )
    print(
        "\nprompt tok: as the server reports them (usage); reused: of those, restored from its "
        "prompt cache instead of computed (its log); values: metric values returned (not NaN) "
        "of those asked."
    )


if __name__ == "__main__":
    main()
