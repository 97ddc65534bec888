"""Recorded answers for the gate's end-to-end tests: the bundled sample's questions with their
reference as the answer (a perfect baseline), and a candidate that answers "I don't know." to a
known set of answerable questions (its ``false_refusal_rate`` rises by exactly that share)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rag_experiments.locations import PROJECT_ROOT

SAMPLE = PROJECT_ROOT / "datasets" / "sample" / "eval.jsonl"
FAKE_RUN = ("target=recorded", "dataset=ragas", "llm=fake", "judge=fake", "embedder=hash")
"""Overrides of a run that scores recorded answers with the fake models."""


def sample_rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def answerable_ids() -> list[str]:
    return [r["id"] for r in sample_rows() if r.get("answerable", True)]


def write_answers(path: Path, refuse: Iterable[str] = (), drop: Iterable[str] = ()) -> Path:
    """A RAGAS JSONL of the sample: response = reference (refusal for unanswerable ones),
    retrieved_contexts = reference contexts; ``refuse`` ids answer "I don't know.", ``drop``
    ids are left out (another dataset)."""
    refuse, drop = set(refuse), set(drop)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in sample_rows():
            if r["id"] in drop:
                continue
            answer = r["reference"] if r.get("answerable", True) else "I don't know."
            row = {
                "id": r["id"],
                "question_type": r.get("question_type"),
                "answerable": r.get("answerable", True),
                "user_input": r["user_input"],
                "reference": r["reference"],
                "reference_contexts": r.get("reference_contexts") or [],
                "response": "I don't know." if r["id"] in refuse else answer,
                "retrieved_contexts": r.get("reference_contexts") or ["(no context)"],
            }
            f.write(json.dumps(row) + "\n")
    return path
