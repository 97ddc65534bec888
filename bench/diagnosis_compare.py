"""The diagnosis line of ``rag-exp compare`` on a candidate made worse only by irrelevant
chunks: the must-show of issue 39.

Writes two recorded answer sets (RAGAS JSONL, ``target=recorded``) of the same 30 questions:

* **baseline** (top_k 4): two chunks holding the reference fact and two off-topic chunks; the
  answer states the reference fact;
* **candidate** (top_k 5): the same four chunks plus one more irrelevant chunk; for 18 of the 30
  questions the answer repeats, after the reference fact, a sentence of that extra chunk (the
  generator distracted by noise).

Both are scored with ``metrics=diagnostics`` and the offline lexical claim checker
(``checker=lexical``: sentences are claims, entailment by word overlap; no model), then
``rag-exp compare baseline candidate --force`` (the recorded answers differ, so the dataset
digests do) prints the table and the diagnosis. Expected by hand: noise sensitivity (irrelevant
chunks) 0 → 18/30 · 1/2 = 0.30; the retriever's context precision 2/4 → 2/5 (−0.10); claim
precision 1 → 1 − 0.30 = 0.70; the diagnosis names noise sensitivity (irrelevant chunks).

Usage (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/diagnosis_compare.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ENTRIES = (
    "claim_correctness",
    "retriever_claims",
    "context_claim_utilization",
    "noise_sensitivity",
    "unfaithfulness",
    "claim_faithfulness",
)
ITEMS = "badge laptop parking travel leave pension visa locker phone desk".split()
OFFICES = "security procurement facilities finance personnel payroll legal logistics".split()
PLACES = "Leeds Bristol Glasgow Cardiff Belfast Dundee".split()
RUN_ID = re.compile(r"MLflow run ([0-9a-f]{32})")


def rows(candidate: bool) -> list[dict[str, object]]:
    """The 30 recorded answers of one run (module docstring)."""
    out = []
    for i in range(30):
        item, office = ITEMS[i % len(ITEMS)], OFFICES[i % len(OFFICES)]
        fact = f"The {item} request {i} is approved by {office} within {i % 9 + 2} days."
        relevant = [f"{fact} Requests go through the portal.", f"Policy note: {fact}"]
        off_topic = [
            f"Canteen menus in {PLACES[i % 6]} change every {i % 4 + 2} weeks.",
            f"Fire drills in building {i + 7} happen twice yearly.",
        ]
        noise = f"Courier parcels for {PLACES[(i + 3) % 6]} depot {i} leave on Thursdays."
        contexts = relevant + off_topic + ([noise] if candidate else [])
        distracted = candidate and i % 5 in (0, 1, 2)  # 18 of 30
        out.append(
            {
                "user_input": f"Who approves {item} request {i}, and how fast?",
                "reference": fact,
                "response": f"{fact} {noise}" if distracted else fact,
                "retrieved_contexts": contexts,
            }
        )
    return out


def rag_exp(args: list[str], cwd: Path) -> str:
    """Run ``rag-exp`` with ``args`` in ``cwd``; its output (stops on failure)."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-m", "rag_experiments", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"rag-exp {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout + done.stderr


def main() -> None:
    """Write both answer sets, run both, compare them and print the comparison."""
    lexical = [f"metrics.suite.{e}.checker=lexical" for e in ENTRIES]
    with tempfile.TemporaryDirectory(prefix="diagnosis-compare-") as tmp:
        work = Path(tmp)
        ids = []
        for name in ("baseline", "candidate"):
            path = work / f"{name}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in rows(name == "candidate")))
            out = rag_exp(
                [
                    "run",
                    "dataset=ragas",
                    f"dataset.path={path}",
                    "target=recorded",
                    "metrics=diagnostics",
                    "~metrics.suite.retrieval",
                    "judge=fake",
                    "progress=false",
                    f"run_name={name}",
                    *lexical,
                ],
                work,
            )
            ids.append(RUN_ID.findall(out)[-1])
        print(rag_exp(["compare", ids[0], ids[1], "--force", "--all"], work))


if __name__ == "__main__":
    main()
