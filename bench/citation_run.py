"""A citation run: the must-show of issue 39 for citation accuracy.

A recorded target (``target=recorded``, RAGAS JSONL) answers six questions over the same three
passages with good, wrong, missing, fabricated, redundant and no citations; ``rag-exp run
metrics=citations`` with the offline lexical checker (no model) scores them. Hand values
(ALCE, :mod:`rag_experiments.metrics.citations`)::

    row  answer                                   recall  precision
    good       [1] fact of 1, [2] fact of 2        1       1
    wrong      [3] fact of 1, [2] fact of 3        0       0
    missing    fact of 1 uncited, [3] fact of 3    1/2     1
    fabricated [5] fact of 3 (no passage 5)        0       0
    redundant  [1][3] fact of 3                    1       1/2  ([1] irrelevant)
    none       fact of 3, no marker                0       NaN no_citations
    mean                                           2.5/6 = 0.4167   2.5/5 = 0.5000

A second run scores **structured citations** (``recorded.citations`` in our JSONL; chunk ids
``it#0``, ``it#1``, ``hr#0`` for the three passages) instead of markers::

    row         citations                                   recall  precision
    s_good      fact 1 -> it#0, fact 2 -> it#1 (chunk ids)   1       1
    s_wrong     fact 1 -> hr#0, fact 3 -> it#1               0       0
    s_missing   fact 3 -> passage 3 by exact text; fact 1     1/2     1
    s_fabric    fact 3 -> chunk x#9 (not retrieved)           0       0
    s_doc       fact 2 -> document "it" (passages 1+2)        1       1
    s_overlap   fact 3 -> "Badges are collected at the        1       1
                reception desk" (5/7 words of passage 3)
    s_none      fact 3, an empty citation list                0       NaN no_citations
    mean                                           3.5/7 = 0.5000   4/6 = 0.6667

Usage (from the repository root)::

    PYTHONPATH=$PWD .venv/bin/python bench/citation_run.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CONTEXTS = [
    "Form AR-1 requests a new account.",
    "The Service Desk creates accounts within 2 business days.",
    "Badges are collected at reception.",
]
F1, F2, F3 = (c.rstrip(".") for c in CONTEXTS)
ANSWERS = {
    "good": f"{F1} [1]. {F2} [2].",
    "wrong": f"{F1} [3]. {F3} [2].",
    "missing": f"{F1}. {F3} [3].",
    "fabricated": f"{F3} [5].",
    "redundant": f"{F3} [1][3].",
    "none": f"{F3}.",
}


IDS = ["it#0", "it#1", "hr#0"]
STRUCTURED = {
    "s_good": (
        f"{F1}. {F2}.",
        [{"statement": F1, "chunk_id": "it#0"}, {"statement": F2, "chunk_id": "it#1"}],
    ),
    "s_wrong": (
        f"{F1}. {F3}.",
        [{"statement": F1, "chunk_id": "hr#0"}, {"statement": F3, "chunk_id": "it#1"}],
    ),
    "s_missing": (f"{F1}. {F3}.", [{"statement": F3, "text": CONTEXTS[2]}]),
    "s_fabric": (f"{F3}.", [{"statement": F3, "chunk_id": "x#9"}]),
    "s_doc": (f"{F2}.", [{"statement": F2, "doc_id": "it"}]),
    "s_overlap": (
        f"{F3}.",
        [{"statement": F3, "text": "Badges are collected at the reception desk"}],
    ),
    "s_none": (f"{F3}.", []),
}


def main() -> None:
    """Write the recorded answers (markers, then structured), run ``metrics=citations`` on
    each set and print the outputs."""
    inline = [
        {
            "user_input": f"Question {name}?",
            "reference": F1,
            "response": answer,
            "retrieved_contexts": CONTEXTS,
        }
        for name, answer in ANSWERS.items()
    ]
    structured = [
        {
            "id": name,
            "user_input": f"Question {name}?",
            "reference": F1,
            "recorded": {
                "response": answer,
                "retrieved_contexts": CONTEXTS,
                "retrieved_ids": IDS,
                "citations": citations,
            },
        }
        for name, (answer, citations) in STRUCTURED.items()
    ]
    _run("ragas", inline)
    _run("jsonl", structured)


def _run(dataset: str, rows: list[dict]) -> None:
    """Score ``rows`` (a ``dataset`` file) with ``metrics=citations`` and print the output."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="citation-run-") as tmp:
        path = Path(tmp) / "answers.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        args = [
            "run",
            f"dataset={dataset}",
            f"dataset.path={path}",
            "target=recorded",
            "metrics=citations",
            "judge=fake",
            "progress=false",
            "metrics.suite.citation_accuracy.checker=lexical",
            "metrics.suite.claim_faithfulness.checker=lexical",
        ]
        done = subprocess.run(
            [sys.executable, "-m", "rag_experiments", *args],
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(repo)},
            capture_output=True,
            text=True,
            check=False,
        )
        out = done.stdout + done.stderr
        print(out[out.find("MLflow run") :] if done.returncode == 0 else out[-3000:])
        for csv in Path(tmp).rglob("per_query_results.csv"):
            print(csv.read_text())


if __name__ == "__main__":
    main()
