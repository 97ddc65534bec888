"""Judge calls per question of the claim diagnostics, with and without the shared claim cache,
and of the default suite (which the claim layer must leave unchanged).

Runs ``rag-exp run`` three times on the bundled sample with the deterministic fake generator
and fake judge (``llm=fake judge=fake``: no model, the calls are counted exactly) in a scratch
directory (its MLflow store is thrown away), and prints the run's own ``judge calls per
question`` line for each:

1. ``metrics=custom`` (the default suite);
2. ``metrics=diagnostics`` (every claim entry reads one shared claim layer);
3. ``metrics=diagnostics`` with ``claim_cache: false`` on every entry (each extracts and checks
   for itself).

Usage (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/claim_calls.py [--max-samples N]
"""

from __future__ import annotations

import argparse
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
LINE = re.compile(r"judge calls per question ([\d.]+) \(max (\d+)\)")


def calls_per_question(overrides: list[str], workdir: Path) -> str:
    """The ``judge calls per question`` of one run (text as the run prints it)."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    cmd = [
        sys.executable,
        "-m",
        "rag_experiments",
        "run",
        "llm=fake",
        "judge=fake",
        "progress=false",
    ]
    done = subprocess.run(
        cmd + overrides, cwd=workdir, env=env, capture_output=True, text=True, check=False
    )
    found = LINE.search(done.stdout + done.stderr)
    if done.returncode != 0 or found is None:
        tail = (done.stdout + done.stderr)[-2000:]
        raise SystemExit(f"run {' '.join(overrides)} failed (exit {done.returncode}):\n{tail}")
    return f"{float(found.group(1)):.2f} (max {found.group(2)})"


def main() -> None:
    """Run the three configurations and print their calls per question."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-samples", type=int, default=None)
    args = parser.parse_args()
    extra = [f"max_samples={args.max_samples}"] if args.max_samples else []
    no_cache = [f"metrics.suite.{e}.claim_cache=false" for e in ENTRIES]
    runs = [
        ("metrics=custom (default suite)", ["metrics=custom"]),
        ("metrics=diagnostics, claim cache on", ["metrics=diagnostics"]),
        ("metrics=diagnostics, claim cache off", ["metrics=diagnostics", *no_cache]),
    ]
    with tempfile.TemporaryDirectory(prefix="claim-calls-") as tmp:
        for label, overrides in runs:
            calls = calls_per_question(overrides + extra, Path(tmp))
            print(f"{label:40s} judge calls per question {calls}", flush=True)


if __name__ == "__main__":
    main()
