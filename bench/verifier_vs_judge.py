"""Faithfulness by a verifier beside faithfulness by a chat judge, on the same questions: model
calls per question and wall time.

The questions are the bundled labeled pairs of ``rag-exp judge-check`` (a question, its
contexts and an answer; :func:`~rag_experiments.qualify.pairs.load_pairs`), ``--n`` of them,
balanced. Each scorer computes ``faithfulness`` of every pair through the metric's public
``evaluate`` (the judge scheduler, as a run does) with no response cache:

- ``verifier local``: :class:`~rag_experiments.metrics.verifier_faithfulness.
  VerifierFaithfulness` with the tiny random BERT of
  :func:`~rag_experiments.fakes.tiny_verifier.make_tiny_verifier` in-process (a real verifier,
  such as an NLI DeBERTa-v3 small, costs more per pair; the call count is the same);
- ``verifier tei``: the same model behind the fake TEI server (HTTP ``/predict``);
- ``judge fake``: :class:`~rag_experiments.metrics.faithfulness.Faithfulness` with the fake
  judge (scripted replies, no model: the harness's own cost per call);
- ``judge embedded``: the same with the embedded SmolLM2-135M judge (llama.cpp on the CPU; what
  a run with no server uses), unless ``--no-embedded``.

Calls per question: the verifier makes one batched call per question (every sentence x every
context in one ``score``), the judge one call per question plus one per retry of an invalid
reply. A benchmark, not a test::

    .venv/bin/python bench/verifier_vs_judge.py [--n 20] [--no-embedded]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from rag_experiments.qualify.pairs import balanced_subset, load_pairs
from rag_experiments.records import RagResponse, Sample


def measure(metric: Any, samples: list[Sample], responses: list[RagResponse]) -> dict[str, Any]:
    """Wall time, calls and the mean faithfulness of one ``evaluate``."""
    start = time.perf_counter()
    rows = metric.evaluate(samples, responses)
    wall = time.perf_counter() - start
    calls = sum(int(r.get("judge_calls", 0)) for r in metric.audit())
    values = [r["faithfulness"].value for r in rows if r["faithfulness"].is_valid]
    return {
        "wall_s": wall,
        "calls": calls,
        "mean": sum(values) / len(values) if values else float("nan"),
        "n_valid": len(values),
    }


def main() -> None:
    """Run the scorers and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="labeled pairs (questions)")
    parser.add_argument("--no-embedded", action="store_true", help="skip the embedded judge")
    args = parser.parse_args()

    from rag_experiments.build import build_role_chat
    from rag_experiments.config.compose import compose_config
    from rag_experiments.fakes.tei_server import FakeTeiServer
    from rag_experiments.fakes.tiny_verifier import make_tiny_verifier
    from rag_experiments.metrics.faithfulness import Faithfulness
    from rag_experiments.metrics.verifier_faithfulness import VerifierFaithfulness
    from rag_experiments.verifier.local import LocalVerifier
    from rag_experiments.verifier.tei import TeiVerifier

    pairs = balanced_subset(load_pairs(None, "auto"), args.n, seed=0)
    samples = [Sample(id=p.id, user_input=p.question) for p in pairs]
    responses = [RagResponse(response=p.answer, retrieved_contexts=list(p.contexts)) for p in pairs]
    n = len(pairs)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_tiny_verifier(tmp)
        local = LocalVerifier(str(folder))
        results["verifier local (tiny BERT)"] = measure(
            VerifierFaithfulness(local), samples, responses
        )
        with FakeTeiServer(str(folder)) as server:
            tei = TeiVerifier(url=server.root)
            results["verifier tei (fake TEI, tiny BERT)"] = measure(
                VerifierFaithfulness(tei), samples, responses
            )
            results["verifier tei (fake TEI, tiny BERT)"]["http_requests"] = server.requests
    for name in ("fake", "embedded"):
        if name == "embedded" and args.no_embedded:
            continue
        cfg = compose_config("config", [f"judge={name}"])
        judge = build_role_chat(cfg.judge, "judge")  # judge=fake: its scripted verdicts
        label = "judge fake" if name == "fake" else "judge embedded (SmolLM2-135M)"
        results[label] = measure(Faithfulness(judge=judge), samples, responses)
    print(f"faithfulness of {n} questions (bundled labeled pairs), no response cache")
    print(f"  {'scorer':<36} {'calls/question':>14} {'wall s':>8} {'s/question':>10} {'mean':>6}")
    for name, r in results.items():
        extra = f"  ({r['http_requests']} HTTP requests)" if "http_requests" in r else ""
        print(
            f"  {name:<36} {r['calls'] / n:>14.2f} {r['wall_s']:>8.2f} "
            f"{r['wall_s'] / n:>10.3f} {r['mean']:>6.3f}{extra}"
        )


if __name__ == "__main__":
    main()
