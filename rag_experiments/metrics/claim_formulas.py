"""Claim-level formulas: correctness against the reference and RAGChecker's diagnostics, from
the four claim label tables of one row (no judge here; the tables come from
:mod:`~rag_experiments.metrics.claim_layer`).

Notation (RAGChecker's, ``ragchecker/container.py``), for one question with response claims
``r_1..r_m``, reference (ground-truth answer) claims ``g_1..g_n`` and retrieved chunks
``c_1..c_k``:

* ``answer2response[i]``  = reference ⊨ r_i (response claim i is entailed by the reference);
* ``response2answer[j]``  = response ⊨ g_j;
* ``retrieved2response[i][l]`` = c_l ⊨ r_i;  ``retrieved2answer[j][l]`` = c_l ⊨ g_j.

Definitions, exactly as RAGChecker computes them (``ragchecker/computation.py``, v0.1.9),
with ``1[·]`` the indicator and means over the rows named:

* ``claim_precision`` = mean_i answer2response[i]                 (RAGChecker ``precision``)
* ``claim_recall``    = mean_j response2answer[j]                 (RAGChecker ``recall``)
* ``claim_f1``        = 2·P·R / (P + R), 0 when P = R = 0         (RAGChecker ``f1``)
* ``context_claim_recall``    = mean_j max_l retrieved2answer[j][l]   (retriever ``claim_recall``)
* ``context_claim_precision`` = mean_l max_j retrieved2answer[j][l]   (retriever
  ``context_precision``: the share of chunks entailing at least one reference claim)
* ``context_claim_utilization`` (RAGChecker ``context_utilization``; not RAGAS's
  ``context_utilization``, which is context precision judged against the response)
  = Σ_j (recalled_j ∧ response2answer[j]) / Σ_j recalled_j,
  with recalled_j = max_l retrieved2answer[j][l]
* relevant_l = max_j retrieved2answer[j][l] (chunk l holds a reference claim);
  rel_faithful_i = max_l (relevant_l ∧ retrieved2response[i][l]);
  irr_faithful_i = max_l (¬relevant_l ∧ retrieved2response[i][l]) ∧ ¬rel_faithful_i;
  ``noise_sensitivity_relevant``   = mean_i (rel_faithful_i ∧ ¬answer2response[i]),
  ``noise_sensitivity_irrelevant`` = mean_i (irr_faithful_i ∧ ¬answer2response[i])
  (lower is better: incorrect response claims that a relevant / only an irrelevant chunk
  entails)
* unfaithful_i = ¬max_l retrieved2response[i][l];
  ``hallucination``  = mean_i (unfaithful_i ∧ ¬answer2response[i]),
  ``self_knowledge`` = mean_i (unfaithful_i ∧ answer2response[i])   (lower is better for both)
* ``claim_faithfulness`` = mean_i max_l retrieved2response[i][l]   (generator ``faithfulness``)

**RAGAS FactualCorrectness differs** (``ragas/metrics/_factual_correctness.py``): with
``tp = Σ_i answer2response[i]``, ``fp = Σ_i ¬answer2response[i]``, ``fn = Σ_j ¬response2answer[j]``
it reports precision ``tp / (tp + fp + 1e-8)`` (= ours up to the 1e-8), recall
``tp / (tp + fn + 1e-8)`` — a count of *response* claims over a mix of response and reference
claims, not the share of reference claims recalled — and ``F_β(tp, fp, fn)``, all rounded to 2
decimals. We report RAGChecker's recall (the share of reference claims the response entails),
which is what "claim recall" means; RAGAS's is not reproduced.

**Edges.** RAGChecker returns 0 whenever a denominator is empty; we return NaN with a reason
(never a default 0 or 1): no response claims → ``no_claims``; no reference claims →
``no_reference_claims``; no reference claim found in the chunks (context utilization) →
``no_recalled_claims``; no retrieved chunk → ``empty_context`` (NaN for context precision,
utilization, hallucination and self-knowledge, whose split by chunk is undefined; a flagged
0.0 for context claim recall, claim faithfulness and both noise sensitivities, which are 0 by
their formula when nothing was retrieved). Everywhere else the value equals RAGChecker's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rag_experiments.records import MetricValue

Row = Sequence[bool]
Table = Sequence[Sequence[bool]]

TABLES = ("answer2response", "response2answer", "retrieved2response", "retrieved2answer")

REQUIRES: dict[str, tuple[str, ...]] = {
    "claim_precision": ("answer2response",),
    "claim_recall": ("response2answer",),
    "claim_f1": ("answer2response", "response2answer"),
    "context_claim_recall": ("retrieved2answer",),
    "context_claim_precision": ("retrieved2answer",),
    "context_claim_utilization": ("retrieved2answer", "response2answer"),
    "noise_sensitivity_relevant": ("retrieved2response", "answer2response", "retrieved2answer"),
    "noise_sensitivity_irrelevant": ("retrieved2response", "answer2response", "retrieved2answer"),
    "hallucination": ("retrieved2response", "answer2response"),
    "self_knowledge": ("retrieved2response", "answer2response"),
    "claim_faithfulness": ("retrieved2response",),
}
"""The label tables each value reads (RAGChecker's ``METRIC_REQUIREMENTS``, with precision and
recall matched to the tables their formulas read)."""

GROUPS: dict[str, str] = {
    "claim_precision": "overall",
    "claim_recall": "overall",
    "claim_f1": "overall",
    "context_claim_recall": "retriever",
    "context_claim_precision": "retriever",
    "context_claim_utilization": "generator",
    "noise_sensitivity_relevant": "generator",
    "noise_sensitivity_irrelevant": "generator",
    "hallucination": "generator",
    "self_knowledge": "generator",
    "claim_faithfulness": "generator",
}
"""Which part of the RAG system each value speaks about (RAGChecker's grouping)."""

READABLE: dict[str, str] = {
    "claim_precision": "claim precision",
    "claim_recall": "claim recall",
    "claim_f1": "claim F1",
    "context_claim_recall": "claim recall of the retrieved chunks",
    "context_claim_precision": "context precision (chunks holding a reference claim)",
    "context_claim_utilization": "context utilization",
    "noise_sensitivity_relevant": "noise sensitivity (relevant chunks)",
    "noise_sensitivity_irrelevant": "noise sensitivity (irrelevant chunks)",
    "hallucination": "hallucination",
    "self_knowledge": "self-knowledge",
    "claim_faithfulness": "claim faithfulness",
}
"""How a diagnosis line names each value."""

RAGCHECKER_NAMES = {
    "claim_precision": "precision",
    "claim_recall": "recall",
    "claim_f1": "f1",
    "context_claim_recall": "claim_recall",
    "context_claim_precision": "context_precision",
    "context_claim_utilization": "context_utilization",
    "noise_sensitivity_relevant": "noise_sensitivity_in_relevant",
    "noise_sensitivity_irrelevant": "noise_sensitivity_in_irrelevant",
    "hallucination": "hallucination",
    "self_knowledge": "self_knowledge",
    "claim_faithfulness": "faithfulness",
}
"""Our canonical name → RAGChecker's key in ``RAGResult.metrics``."""


@dataclass(frozen=True)
class ClaimTables:
    """The label tables of one row; a table that could not be made is a reason string.

    Attributes:
        answer2response: Per response claim (reference ⊨ claim), or why it is missing.
        response2answer: Per reference claim (response ⊨ claim), or why it is missing.
        retrieved2response: Per response claim, per chunk, or why it is missing.
        retrieved2answer: Per reference claim, per chunk, or why it is missing.
        n_chunks: Retrieved chunks checked (``k``).
    """

    answer2response: Row | str
    response2answer: Row | str
    retrieved2response: Table | str
    retrieved2answer: Table | str
    n_chunks: int


def _mean(values: Sequence[bool], empty: str) -> MetricValue:
    return MetricValue(sum(values) / len(values)) if values else MetricValue.nan(empty)


def claim_values(t: ClaimTables, names: Sequence[str] | None = None) -> dict[str, MetricValue]:
    """The values named (default all of :data:`REQUIRES`) of one row (module docstring).

    Args:
        t: The row's label tables.
        names: Which values to compute.

    Returns:
        ``{name: MetricValue}``: a float in [0, 1], or NaN with the reason (a missing table's
        reason, or the edge's).
    """
    out: dict[str, MetricValue] = {}
    for name in names or REQUIRES:
        missing = [getattr(t, r) for r in REQUIRES[name] if isinstance(getattr(t, r), str)]
        out[name] = MetricValue.nan(str(missing[0])) if missing else _value(name, t)
    return out


def _value(name: str, t: ClaimTables) -> MetricValue:  # noqa: PLR0911 - one branch per value
    a2r, r2a = t.answer2response, t.response2answer
    ret2r, ret2a = t.retrieved2response, t.retrieved2answer
    k = t.n_chunks
    if name == "claim_precision":
        return _mean(list(a2r), "no_claims")  # type: ignore[arg-type]
    if name == "claim_recall":
        return _mean(list(r2a), "no_reference_claims")  # type: ignore[arg-type]
    if name == "claim_f1":
        p, r = _value("claim_precision", t), _value("claim_recall", t)
        if not p.is_valid:
            return p
        if not r.is_valid:
            return r
        if p.value > 0 and r.value > 0:
            return MetricValue(2 * p.value * r.value / (p.value + r.value))
        return MetricValue(0.0)
    if name in ("context_claim_recall", "context_claim_precision", "context_claim_utilization"):
        if not ret2a:
            return MetricValue.nan("no_reference_claims")
        recalled = [any(row) for row in ret2a]  # type: ignore[union-attr]
        if name == "context_claim_recall":
            return MetricValue(sum(recalled) / len(recalled), "empty_context" if k == 0 else None)
        if k == 0:
            return MetricValue.nan("empty_context")
        if name == "context_claim_precision":
            useful = [any(row[ch] for row in ret2a) for ch in range(k)]  # type: ignore[union-attr]
            return MetricValue(sum(useful) / k)
        if not any(recalled):
            return MetricValue.nan("no_recalled_claims")
        used = [c and u for c, u in zip(recalled, r2a, strict=True)]  # type: ignore[arg-type]
        return MetricValue(sum(used) / sum(recalled))
    if not ret2r:
        return MetricValue.nan("no_claims")
    faithful = [any(row) for row in ret2r]  # type: ignore[union-attr]
    if name == "claim_faithfulness":
        return MetricValue(sum(faithful) / len(faithful), "empty_context" if k == 0 else None)
    correct = list(a2r)  # type: ignore[arg-type]
    if name in ("hallucination", "self_knowledge"):
        if k == 0:
            return MetricValue.nan("empty_context")
        want = name == "self_knowledge"
        hits = [not f and c == want for f, c in zip(faithful, correct, strict=True)]
        return MetricValue(sum(hits) / len(hits))
    # noise sensitivity
    if not ret2a:
        return MetricValue.nan("no_reference_claims")
    flag = "empty_context" if k == 0 else None
    relevant = [any(row[ch] for row in ret2a) for ch in range(k)]  # type: ignore[union-attr]
    rel = [any(relevant[ch] and row[ch] for ch in range(k)) for row in ret2r]  # type: ignore[union-attr]
    irr = [
        any(not relevant[ch] and row[ch] for ch in range(k)) and not rel[i]
        for i, row in enumerate(ret2r)  # type: ignore[arg-type]
    ]
    chosen = rel if name == "noise_sensitivity_relevant" else irr
    hits = [s and not c for s, c in zip(chosen, correct, strict=True)]
    return MetricValue(sum(hits) / len(hits), flag)


def is_nan(value: MetricValue) -> bool:
    """Whether ``value`` is NaN."""
    return math.isnan(value.value)


def as_dict(values: Mapping[str, MetricValue]) -> dict[str, float]:
    """``{name: float}`` of ``values``."""
    return {k: v.value for k, v in values.items()}
