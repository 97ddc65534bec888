"""Judging throughput against a served judge: our custom backend, our DeepEval backend and
DeepEval's own ``evaluate()``, on the same answers, against the same server, in one run.

A fake OpenAI-compatible server on 127.0.0.1 (:class:`~rag_experiments.fakes.openai_server.
FakeOpenAIServer`, in its own process, as a real server would be) answers every chat request
after ``--latency`` seconds in one of ``--slots`` parallel slots, like a vLLM or llama.cpp
server. The answers are made once, by the baseline with the fake generator and the hash
embedder on the bundled sample (69 questions). Then, one after the other, the same four core
metrics (faithfulness, answer relevancy, context precision, context recall) judge them:

- ``rag-exp custom``: our metrics (:mod:`rag_experiments.metrics`), ``judge.max_concurrency
  = slots``;
- ``rag-exp deepeval``: our DeepEval backend (DeepEval's metric classes, one per row);
- ``deepeval evaluate()``: DeepEval's own runner with a ``DeepEvalBaseLLM`` that calls the same
  server (async, its default concurrency), with ``include_reason=False`` and with its defaults.

Each at every ``--slots`` value (default 8, 32, 128 and unbounded), a new server each time;
our judge declares ``max_concurrency`` = the slots and keeps its default ``in_flight`` (twice
that). Before timing, our judge opens its connection pool (``in_flight`` warm-up requests at
once, at most 300), as the first seconds of a long run do; DeepEval's client opens its own
inside ``evaluate()``. For each: judge calls (counted by the server), wall time, two ideals and
wall / each, each system's wall time over ours, and the CPU seconds of the client (this
process) and of the server while it judged (what a loaded machine does not blur). No response
cache: every call reaches the server. By default only ours and DeepEval's ``evaluate()`` with
``include_reason=False`` run (``--skip`` chooses).

**The ideal (a lower bound on the wall time).** ``ideal`` (the honest one)::

    ideal = max(ceil(calls / slots), chain) x latency

``ceil(calls / slots)``: rounds with every slot busy (slots = unbounded: 1). ``chain``: the
longest chain of dependent calls of any one question, which no number of slots shortens: a
call that needs an earlier call's reply starts a latency after it. Counted per system:

- ours (both backends): from the audit records of the run itself — a (question, metric) task's
  calls (``judge_calls``) run one after the other (a retry follows its failed call; DeepEval's
  metrics in our backend run with ``async_mode=False``), tasks of one question run in parallel,
  so ``chain`` = the most calls of any task; with ``slot_affinity`` lanes (not used here) a
  question's metrics run in sequence on one lane, so it would be the sum over its metrics. Our
  four custom metrics make one call each (faithfulness asks for claims and their context
  numbers in one call), so ``chain`` is 1 unless a reply had to be retried;
- DeepEval's ``evaluate()``: from its metrics' declared call structure (DeepEval 4.3
  ``a_measure``): faithfulness truths and claims together, then verdicts; answer relevancy
  statements, then verdicts; contextual precision and recall one verdict call each; then one
  reason call per metric when ``include_reason``: ``chain`` = 2 reason-off, 3 with reasons
  (:data:`DEEPEVAL_CHAIN`).

The answers are all known before judging starts, so no question waits for its answer (in a
live run the bound is also at least the last answer's arrival plus its chain). ``ideal 1 round``
is the former figure, ``ceil(calls / slots) x latency`` alone (1 round when unbounded), printed
beside it; the two differ only where the chain is the longer, e.g. unbounded slots.
A benchmark,
not a test::

    .venv/bin/python bench/judge_throughput.py [--latency 0.2] [--slots 8 32 128 0]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import httpx

import rag_experiments.offline  # noqa: F401 - telemetry off before DeepEval is imported
from rag_experiments.chunking.semantic import SemanticChunker
from rag_experiments.common.http import RetryPolicy
from rag_experiments.data.jsonl import JsonlDataset
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.index.chroma import ChromaIndex
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.openai_compat import OpenAICompatChat
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.context_recall import ContextRecall
from rag_experiments.metrics.deepeval_backend import (
    DeepEvalAnswerRelevancy,
    DeepEvalContextPrecision,
    DeepEvalContextRecall,
    DeepEvalFaithfulness,
)
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.scheduler import judge_rows
from rag_experiments.retrieval.retriever import Retriever
from rag_experiments.runner import evaluate
from rag_experiments.targets.baseline import BaselineTarget


def answers(n: int) -> tuple[list[Any], list[Any], Any]:
    """The bundled sample's first ``n`` questions answered by the baseline (fake generator,
    hash embedder), and the embedder."""
    dataset = JsonlDataset("datasets/sample/eval.jsonl", corpus="datasets/sample/docs").load()
    if n < len(dataset.samples):
        dataset = dataset.subset(n, seed=0)
    embedder = HashEmbedder()
    target = BaselineTarget(
        chunker=SemanticChunker(),
        embedder=embedder,
        retriever=Retriever(top_k=5),
        index=ChromaIndex(path=tempfile.mkdtemp(prefix="bench-chroma-")),
        generator=FakeChat(),
        generate=True,
    )
    result = evaluate(dataset, target, [], progress=False)
    return result.samples, result.responses, embedder


class ServerProcess:
    """``python -m rag_experiments.fakes.openai_server`` in a child process."""

    def __init__(self, latency: float, slots: int) -> None:
        slots = slots or 100_000  # unbounded
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rag_experiments.fakes.openai_server",
                "--latency",
                str(latency),
                "--slots",
                str(slots),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip() if self.proc.stdout else ""
        self.root = self.url.removesuffix("/v1")
        self.model = "fake-judge"

    @property
    def requests(self) -> int:
        """Chat requests the server has received."""
        return int(httpx.get(f"{self.root}/stats", trust_env=False).json()["requests"])

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used (Linux; NaN elsewhere)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """End the server."""
        self.proc.terminate()
        self.proc.wait(timeout=10)


def timed(server: ServerProcess, fn: Callable[[], Any]) -> tuple[int, float, float, float, Any]:
    """``(calls the server received, wall seconds, this process's CPU seconds, the server's CPU
    seconds, fn's result)``. CPU seconds (user + system, all threads) say what each system costs
    when a loaded machine makes wall times noisy; the server's are read from Linux's
    ``/proc/<pid>/stat`` (NaN elsewhere)."""
    before = server.requests
    server_before = server.cpu_s()
    started = time.perf_counter()
    cpu_started = time.process_time()
    out = fn()
    wall = time.perf_counter() - started  # before asking the server for its count (an HTTP call)
    cpu = time.process_time() - cpu_started
    return server.requests - before, wall, cpu, server.cpu_s() - server_before, out


def deepeval_llm(base_url: str, model: str) -> Any:
    """A ``DeepEvalBaseLLM`` that asks the server for JSON of DeepEval's schema, as a user of
    DeepEval with a local OpenAI-compatible server would write it."""
    from deepeval.models import DeepEvalBaseLLM

    class ServerLLM(DeepEvalBaseLLM):
        def __init__(self) -> None:
            self.client = httpx.Client(base_url=base_url, timeout=120, trust_env=False)
            self.aclient: httpx.AsyncClient | None = None
            super().__init__(model)

        def load_model(self) -> Any:
            return self

        def _body(self, prompt: str, schema: Any) -> dict[str, Any]:
            body: dict[str, Any] = {
                "model": model,
                "temperature": 0,
                "messages": [{"role": "user", "content": prompt}],
            }
            if schema is not None:
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()},
                }
            return body

        @staticmethod
        def _out(reply: httpx.Response, schema: Any) -> Any:
            text = reply.json()["choices"][0]["message"]["content"]
            return schema.model_validate_json(text) if schema is not None else text

        def generate(self, prompt: str, schema: Any = None) -> Any:
            reply = self.client.post("/chat/completions", json=self._body(prompt, schema))
            return self._out(reply, schema)

        async def a_generate(self, prompt: str, schema: Any = None) -> Any:
            if self.aclient is None:  # one per event loop
                self.aclient = httpx.AsyncClient(
                    base_url=base_url,
                    timeout=120,
                    trust_env=False,
                    limits=httpx.Limits(max_connections=100),
                )
            reply = await self.aclient.post("/chat/completions", json=self._body(prompt, schema))
            return self._out(reply, schema)

        def get_model_name(self) -> str:
            return model

    return ServerLLM()


def deepeval_evaluate(
    samples: list[Any],
    responses: list[Any],
    llm: Any,
    include_reason: bool,
    max_concurrent: int | None = None,
    ignore_errors: bool = False,
) -> Any:
    """DeepEval's own ``evaluate()`` on the four core metrics, quiet, no cache
    (``max_concurrent``: its ``AsyncConfig`` bound, None = its default; ``ignore_errors``: its
    ``ErrorConfig``, a metric that fails is left without a score instead of ending the run)."""
    from deepeval import evaluate as de_evaluate
    from deepeval.evaluate import AsyncConfig, CacheConfig, DisplayConfig, ErrorConfig
    from deepeval.metrics import (
        AnswerRelevancyMetric,
        ContextualPrecisionMetric,
        ContextualRecallMetric,
        FaithfulnessMetric,
    )
    from deepeval.test_case import LLMTestCase

    cases = [
        LLMTestCase(
            input=s.user_input,
            actual_output=r.response,
            expected_output=s.reference or "-",
            retrieval_context=list(r.retrieved_contexts) or ["-"],
        )
        for s, r in zip(samples, responses, strict=True)
    ]
    kw: dict[str, Any] = (
        {"model": llm} if include_reason else {"model": llm, "include_reason": False}
    )
    metrics = [
        FaithfulnessMetric(**kw),
        AnswerRelevancyMetric(**kw),
        ContextualPrecisionMetric(**kw),
        ContextualRecallMetric(**kw),
    ]
    asyncio.set_event_loop(asyncio.new_event_loop())
    return de_evaluate(
        test_cases=cases,
        metrics=metrics,
        async_config=(
            AsyncConfig() if max_concurrent is None else AsyncConfig(max_concurrent=max_concurrent)
        ),
        display_config=DisplayConfig(show_indicator=False, print_results=False),
        cache_config=CacheConfig(write_cache=False, use_cache=False),
        error_config=ErrorConfig(ignore_errors=ignore_errors),
    )


WARM_UP_MAX = 300
"""Most warm-up requests sent at once before timing (enough connections for 69 questions)."""


DEEPEVAL_CHAIN = {False: 2, True: 3}
"""Longest chain of dependent calls of one question in DeepEval's ``evaluate()``, by
``include_reason`` (see the module docstring: verdicts after truths/claims or statements, then
the reason)."""


def ideal_s(calls: int, latency: float, slots: int, chain: int = 1) -> float:
    """A lower bound on the wall time of ``calls`` calls of ``latency`` seconds each on
    ``slots`` slots (0 = unbounded), all questions available at the start, when a question's
    longest chain of dependent calls is ``chain`` calls:
    ``max(ceil(calls / slots), chain) x latency`` (``chain=1``: the former ideal, every slot
    busy in every round but the last; 1 round when unbounded)."""
    rounds = 1 if slots == 0 else math.ceil(calls / slots)
    return max(rounds, chain) * latency


def chain_of(results: dict[int, Any]) -> int:
    """Longest chain of dependent judge calls of one question in a :func:`judge_rows` result:
    the most ``judge_calls`` of any (question, metric) task (tasks of a question run in
    parallel; a task's calls in sequence). At least 1."""
    return max(
        [1] + [int(rec.get("judge_calls", 0)) for r in results.values() for rec in r.audit if rec]
    )


def judge_for(server: ServerProcess, slots: int, in_flight: int | None) -> OpenAICompatChat:
    """Our judge as a user would configure it: ``max_concurrency`` = the server's slots
    (``in_flight`` left at its default, twice that), or every call at once when unbounded."""
    declared = slots or 512
    return OpenAICompatChat(
        base_url=server.url,
        model=server.model,
        max_concurrency=declared,
        in_flight=in_flight,
        retry=RetryPolicy(max_retries=0),
    )


def run_slots(
    args: argparse.Namespace, slots: int, samples: list[Any], responses: list[Any], embedder: Any
) -> list[tuple[str, int, float, int, float, float]]:
    """Every system against one server of ``slots`` slots (0 = unbounded):
    ``[(system, calls, wall s, chain, client CPU s, server CPU s)]`` (``chain``: longest chain
    of dependent calls of one question, see :func:`ideal_s`; CPU: see :func:`timed`)."""
    rows: list[tuple[str, int, float, int, float, float]] = []
    server = ServerProcess(args.latency, slots)
    try:
        judge = judge_for(server, slots, args.in_flight)
        # steady state: open the connection pool first, as the first seconds of a long run do
        warm = min(judge.max_concurrency, WARM_UP_MAX)
        complete_many(
            judge,
            [ChatRequest([{"role": "user", "content": f"warm-up {i}"}]) for i in range(warm)],
            max_concurrency=warm,
            progress=False,
        )
        if "custom" not in args.skip:
            core = [
                Faithfulness(judge=judge),
                AnswerRelevancy(judge=judge, embedder=embedder),
                ContextPrecision(judge=judge),
                ContextRecall(judge=judge),
            ]
            calls, wall, cpu, server_cpu, out = timed(
                server, lambda: judge_rows(core, samples, responses, progress=False)
            )
            rows.append(("rag-exp metrics=custom", calls, wall, chain_of(out), cpu, server_cpu))
        if "deepeval" not in args.skip:
            ours = [
                cls(judge=judge)
                for cls in (
                    DeepEvalFaithfulness,
                    DeepEvalAnswerRelevancy,
                    DeepEvalContextPrecision,
                    DeepEvalContextRecall,
                )
            ]
            calls, wall, cpu, server_cpu, out = timed(
                server, lambda: judge_rows(ours, samples, responses, progress=False)
            )
            rows.append(("rag-exp metrics=deepeval", calls, wall, chain_of(out), cpu, server_cpu))
        for name, with_reason in (("evaluate", False), ("evaluate-defaults", True)):
            if name in args.skip:
                continue
            llm = deepeval_llm(server.url, server.model)  # its async client binds to one loop
            calls, wall, cpu, server_cpu, _ = timed(
                server,
                lambda r=with_reason, m=llm: deepeval_evaluate(
                    samples, responses, m, include_reason=r
                ),
            )
            label = (
                "deepeval evaluate(), include_reason=False"
                if not with_reason
                else "deepeval evaluate(), defaults"
            )
            rows.append((label, calls, wall, DEEPEVAL_CHAIN[with_reason], cpu, server_cpu))
    finally:
        server.stop()
    return rows


def main() -> None:
    """Parse the arguments, run the systems at every slot count, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.2, help="server latency per call (s)")
    parser.add_argument(
        "--slots",
        type=int,
        nargs="+",
        default=[8, 32, 128, 0],
        help="requests the server serves at once, one run per value (0 = unbounded)",
    )
    parser.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="our judge's in_flight (default: the config default, 2 x slots)",
    )
    parser.add_argument("--questions", type=int, default=69, help="questions (69 = the sample)")
    parser.add_argument(
        "--skip",
        nargs="*",
        default=["deepeval", "evaluate-defaults"],
        choices=["custom", "deepeval", "evaluate", "evaluate-defaults"],
        help="systems to leave out (default: ours with DeepEval's metrics, and evaluate() with "
        "reasons)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    for handler in logging.getLogger().handlers:  # DeepEval sets its logger to INFO when its
        handler.setLevel(logging.ERROR)  # settings load: one line per test case otherwise
    os.chdir(os.path.join(os.path.dirname(__file__), ".."))
    samples, responses, embedder = answers(args.questions)
    print(
        f"fake OpenAI-compatible judge: {args.latency * 1000:.0f} ms per call; "
        f"{len(samples)} questions; 4 core metrics; {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}"
    )
    print(
        f"\n{'slots':>9} {'system':<44} {'calls':>6} {'chain':>5} {'wall s':>7} "
        f"{'ideal s':>8} {'wall/ideal':>10} {'1-round s':>9} {'wall/1-round':>12} "
        f"{'vs custom':>10} {'CPU s':>6} {'CPU ms/call':>11} {'server CPU s':>12}"
    )
    for slots in args.slots:
        rows = run_slots(args, slots, samples, responses, embedder)
        ours = next((r[2] for r in rows if r[0] == "rag-exp metrics=custom"), None)
        for name, calls, wall, chain, cpu, server_cpu in rows:
            ideal = ideal_s(calls, args.latency, slots, chain)
            one_round = ideal_s(calls, args.latency, slots)
            vs = wall / ours if ours else float("nan")
            print(
                f"{slots or 'unbounded':>9} {name:<44} {calls:>6} {chain:>5} {wall:>7.2f} "
                f"{ideal:>8.2f} {wall / ideal:>10.2f} {one_round:>9.2f} "
                f"{wall / one_round:>12.2f} {vs:>9.2f}x {cpu:>6.2f} "
                f"{cpu / max(calls, 1) * 1000:>11.2f} {server_cpu:>12.2f}",
                flush=True,
            )
    print(
        "\nideal: max(ceil(calls / slots), chain) x latency, chain = the longest chain of "
        "dependent calls of one question (ours: from the run's audit records; DeepEval "
        "evaluate(): its declared call structure, 2 reason-off, 3 with reasons). 1-round: the "
        "former ideal, ceil(calls / slots) x latency (1 round when unbounded). 'vs custom': "
        "that system's wall time over rag-exp metrics=custom's (> 1 = slower than ours). CPU s: "
        "this process's CPU seconds (all threads) while that system judged, and per server "
        "call; server CPU s: the fake server's (10 ms ticks) — on a loaded machine the wall "
        "times wait for a core, these do not. Our "
        "judge declares max_concurrency = slots (512 when unbounded), in_flight "
        f"{'= ' + str(args.in_flight) if args.in_flight else 'default (2 x slots)'}; "
        f"machine load after: {os.getloadavg()[0]:.1f}."
    )


if __name__ == "__main__":
    main()
