"""Agreement with RAGChecker's own computation: its metric functions
(``ragchecker/computation.py``, v0.1.9) and ours (:mod:`rag_experiments.metrics.claim_formulas`)
run on the same claim-level entailment labels of 24 hand-made questions, every edge included;
both tables are printed side by side with the largest difference.

RAGChecker is not a dependency: install it in a scratch environment without its heavy
dependencies and point ``--site`` at that environment's ``site-packages``::

    python -m venv /tmp/rc && /tmp/rc/bin/pip install --no-deps ragchecker==0.1.9 \\
        dataclasses-json loguru numpy
    PYTHONPATH=$PWD .venv/bin/python bench/ragchecker_agreement.py \\
        --site /tmp/rc/lib/python3.11/site-packages

``refchecker`` (claim extraction and checking by LLMs; not used here, the labels are given) is
replaced by an empty stub module. Without RAGChecker the script says so and exits 0.

Where a denominator is empty RAGChecker returns 0 and we return NaN with a reason (our
documented edge policy): those cells are listed apart; every other cell must agree to 1e-9
(exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import math
import sys
import types

from rag_experiments.metrics.claim_formulas import RAGCHECKER_NAMES, ClaimTables, claim_values

T, F = True, False

CASES: list[tuple[str, ClaimTables]] = [
    # name, (answer2response, response2answer, retrieved2response, retrieved2answer, k)
    (
        "all correct, all grounded",
        ClaimTables((T, T), (T, T), ((T, F), (F, T)), ((T, F), (F, T)), 2),
    ),
    ("all wrong, ungrounded", ClaimTables((F, F), (F, F), ((F, F), (F, F)), ((F, F), (F, F)), 2)),
    (
        "worked row",
        ClaimTables(
            (T, T, F, F),
            (T, F, T),
            ((T, F, F), (F, F, F), (F, F, T), (F, T, F)),
            ((T, F, F), (F, T, F), (F, F, F)),
            3,
        ),
    ),
    ("noise from irrelevant chunk", ClaimTables((T, F), (T,), ((T, F), (F, T)), ((T, F),), 2)),
    ("noise from relevant chunk", ClaimTables((T, F), (T,), ((T, F), (T, F)), ((T, F),), 2)),
    ("claim in relevant and irrelevant", ClaimTables((F,), (T,), ((T, T),), ((T, F),), 2)),
    ("self-knowledge only", ClaimTables((T, T), (T, T), ((F, F), (F, F)), ((T, F), (F, F)), 2)),
    ("hallucination only", ClaimTables((F, F), (F,), ((F, F), (F, F)), ((T, F),), 2)),
    ("one claim one chunk yes", ClaimTables((T,), (T,), ((T,),), ((T,),), 1)),
    ("one claim one chunk no", ClaimTables((F,), (F,), ((F,),), ((F,),), 1)),
    ("retriever misses all", ClaimTables((T,), (T, T), ((F, F, F),), ((F, F, F), (F, F, F)), 3)),
    (
        "utilization 1/3",
        ClaimTables((T, T), (T, F, F), ((T, F), (F, T)), ((T, F), (F, T), (T, T)), 2),
    ),
    (
        "precision 1, recall 1/4",
        ClaimTables((T,), (T, F, F, F), ((T, F),), ((T, F), (F, F), (F, T), (F, F)), 2),
    ),
    (
        "many chunks",
        ClaimTables(
            (T, F, T),
            (T, T),
            ((F, F, T, F, F), (F, F, F, F, T), (T, F, F, F, F)),
            ((T, F, F, F, F), (F, F, T, F, F)),
            5,
        ),
    ),
    (
        "mixed five claims",
        ClaimTables(
            (T, F, F, T, F),
            (F, T, T),
            ((T, F), (F, T), (F, F), (F, F), (T, T)),
            ((F, T), (F, F), (T, F)),
            2,
        ),
    ),
    ("P=0 R>0 (f1 0)", ClaimTables((F, F), (T,), ((T, F), (F, F)), ((T, F),), 2)),
    # edges
    ("edge: no response claims", ClaimTables((), (T, F), (), ((T, F), (F, F)), 2)),
    ("edge: no reference claims", ClaimTables((T, F), (), ((T, F), (F, T)), (), 2)),
    ("edge: no chunks", ClaimTables((T, F), (T,), ((), ()), ((),), 0)),
    ("edge: no recalled claims", ClaimTables((T,), (T, F), ((F, F),), ((F, F), (F, F)), 2)),
    ("edge: no claims at all", ClaimTables((), (), (), (), 2)),
    ("edge: no claims, no chunks", ClaimTables((), (), (), (), 0)),
    ("edge: no reference claims, no chunks", ClaimTables((T,), (), ((),), (), 0)),
    ("edge: P=R=0", ClaimTables((F,), (F,), ((F,),), ((F,),), 1)),
]


def _load_ragchecker(site: str | None) -> types.ModuleType | None:
    """``ragchecker.computation`` with ``refchecker`` stubbed, or None when not installed."""
    if site:
        sys.path.insert(0, site)
    stub_names = ("LLMExtractor", "LLMChecker", "NLIChecker", "AlignScoreChecker")
    for name in ("refchecker", "refchecker.extractor", "refchecker.checker"):
        module = types.ModuleType(name)
        for attr in stub_names:
            setattr(module, attr, object)
        sys.modules.setdefault(name, module)
    try:
        from ragchecker import computation
    except ImportError as exc:
        print(f"ragchecker is not importable ({exc}); see the module docstring. Skipped.")
        return None
    return computation


def _theirs(computation: types.ModuleType, t: ClaimTables) -> dict[str, float]:
    word = {True: "Entailment", False: "Neutral"}
    result = computation.RAGResult(
        query_id="q",
        query="",
        gt_answer="",
        response="",
        answer2response=[word[v] for v in t.answer2response],
        response2answer=[word[v] for v in t.response2answer],
        retrieved2response=[[word[v] for v in row] for row in t.retrieved2response],
        retrieved2answer=[[word[v] for v in row] for row in t.retrieved2answer],
    )
    out = {}
    for ours, theirs in RAGCHECKER_NAMES.items():
        computation.METRIC_FUNC_MAP[theirs](result)
        out[ours] = float(result.metrics[theirs])
    return out


def main() -> int:
    """Print both tables; exit 1 when a defined value differs by more than 1e-9."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", help="site-packages holding ragchecker (scratch venv)")
    args = parser.parse_args()
    computation = _load_ragchecker(args.site)
    if computation is None:
        return 0
    names = list(RAGCHECKER_NAMES)
    short = [n.replace("noise_sensitivity", "ns").replace("context_claim", "ctx") for n in names]
    print(f"{len(CASES)} questions; each cell ours / RAGChecker (NaN cells: our reason)\n")
    print(f"{'question':38s} " + " ".join(f"{s:>15s}" for s in short))
    worst, nan_cells, cells = 0.0, [], 0
    for label, tables in CASES:
        ours = claim_values(tables)
        theirs = _theirs(computation, tables)
        row = []
        for name in names:
            mine, other = ours[name], theirs[name]
            cells += 1
            if math.isnan(mine.value):
                nan_cells.append((label, name, mine.reason, other))
                row.append(f"{'NaN':>7s}/{other:<7.4f}")
            else:
                worst = max(worst, abs(mine.value - other))
                row.append(f"{mine.value:>7.4f}/{other:<7.4f}")
        print(f"{label[:38]:38s} " + " ".join(f"{c:>15s}" for c in row))
    print(
        f"\n{cells} cells; {cells - len(nan_cells)} defined in both: max |ours - RAGChecker| = "
        f"{worst:.3g}"
    )
    print(f"{len(nan_cells)} cells where RAGChecker returns 0 and we return NaN with a reason:")
    reasons: dict[tuple[str, float], list[str]] = {}
    for label, name, reason, other in nan_cells:
        reasons.setdefault((str(reason), other), []).append(f"{name} ({label})")
    for (reason, other), where in sorted(reasons.items()):
        print(f"  NaN {reason} vs RAGChecker {other}: {len(where)} cells")
    return 0 if worst <= 1e-9 and all(o == 0.0 for *_, o in nan_cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
