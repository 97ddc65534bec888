"""Retrieval metrics at document level, computed with ir-measures (pytrec_eval provider,
i.e. trec_eval semantics).

Canonical names carry their cutoff: ``Hit@k``, ``MRR@k``, ``nDCG@k``, ``P@k``, ``R@k``,
``MAP@k``. Definitions (Manning et al., *Introduction to IR*, ch. 8; trec_eval):

- ``Hit@k`` (trec_eval ``success_k``) = 1 if a relevant doc is in the top k, else 0.
- ``MRR@k`` (``recip_rank`` cut at k) = 1 / rank of the first relevant doc in the top k, else 0.
- ``nDCG@k`` (``ndcg_cut_k``) = DCG@k / IDCG@k, DCG@k = Σ_{i≤k} rel_i / log2(i + 1) (trec_eval's
  linear gain), IDCG@k the same sum over the ideal ordering of the judged documents.
- ``P@k`` (``P_k``) = relevant docs in the top k / k (k, not the number retrieved).
- ``R@k`` (``recall_k``) = relevant docs in the top k / all relevant docs.
- ``MAP@k`` (``map_cut_k``) = Σ_{relevant i ≤ k} P@i / all relevant docs.

A chunk ranking becomes a document ranking by keeping each document's first (best) chunk
(see :class:`~rag_experiments.retrieval.retriever.Retriever`). Unanswerable samples and samples
with no relevant docs are NaN with reasons ``unanswerable`` / ``no_reference_docs``; a sample
whose target failed is NaN with ``target_error``.
"""

from __future__ import annotations

from collections.abc import Sequence

import ir_measures
from ir_measures import AP, RR, P, R, Success, nDCG

from rag_experiments.errors import ConfigError
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

_MEASURES = {
    "Hit": (Success, "share of queries with a relevant document in the top k"),
    "MRR": (RR, "reciprocal rank of the first relevant document within the top k"),
    "nDCG": (nDCG, "normalised discounted cumulative gain of the top k (graded relevance)"),
    "P": (P, "relevant documents in the top k divided by k"),
    "R": (R, "share of the relevant documents found in the top k"),
    "MAP": (AP, "average precision over the relevant documents, cut at k"),
}


def _provider() -> object:
    provider = ir_measures.providers.registry["pytrec_eval"]
    if not provider.is_available():  # pragma: no cover - depends on the install
        raise ConfigError("ir-measures needs pytrec_eval: run `pip install pytrec-eval-terrier`")
    return provider


class RetrievalMetrics:
    """Doc-level retrieval metrics for every cutoff in ``cutoffs``.

    Args:
        cutoffs: Ranks k at which every measure is reported (each ≥ 1).
        measures: Which of ``Hit, MRR, nDCG, P, R, MAP`` to report.

    Raises:
        ConfigError: A cutoff < 1 or an unknown measure name.
    """

    def __init__(
        self,
        cutoffs: Sequence[int] = (1, 3, 5, 10),
        measures: Sequence[str] = ("Hit", "MRR", "nDCG", "P", "R", "MAP"),
    ) -> None:
        if not cutoffs or any(int(k) < 1 for k in cutoffs):
            raise ConfigError(f"retrieval cutoffs must be ≥ 1, got {list(cutoffs)}")
        unknown = [m for m in measures if m not in _MEASURES]
        if unknown:
            raise ConfigError(f"unknown retrieval measure(s) {unknown}; choose from {list(_MEASURES)}")
        self.cutoffs = sorted({int(k) for k in cutoffs})
        self.measures = list(measures)
        self._ir = {
            f"{name}@{k}": _MEASURES[name][0] @ k for name in self.measures for k in self.cutoffs
        }

    @property
    def depth(self) -> int:
        """Deepest cutoff: how deep a ranking the retriever should return."""
        return self.cutoffs[-1]

    def specs(self) -> list[MetricSpec]:
        """One spec per (measure, cutoff), all in [0, 1], higher is better."""
        return [
            MetricSpec(f"{name}@{k}", True, 0.0, 1.0, _MEASURES[name][1])
            for name in self.measures
            for k in self.cutoffs
        ]

    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]:
        """Per-sample values, computed in one ir-measures call over all scorable samples.

        Args:
            samples: Samples with ``qrels()``.
            responses: Their responses; ``retrieved_doc_ids`` is the doc ranking.

        Returns:
            One dict per sample keyed by metric name.
        """
        names = list(self._ir)
        out: list[dict[str, MetricValue]] = []
        qrels: list[ir_measures.Qrel] = []
        run: list[ir_measures.ScoredDoc] = []
        scorable: dict[str, int] = {}
        for i, (sample, resp) in enumerate(zip(samples, responses, strict=True)):
            reason = self._skip_reason(sample, resp)
            if reason is not None:
                out.append({n: MetricValue.nan(reason) for n in names})
                continue
            out.append({})
            qid = f"{i}"
            scorable[qid] = i
            qrels.extend(ir_measures.Qrel(qid, d, int(g)) for d, g in sample.qrels().items())
            ranking = resp.retrieved_doc_ids or []
            # Strictly decreasing scores keep our rank order (trec_eval breaks ties by doc id).
            run.extend(
                ir_measures.ScoredDoc(qid, d, float(len(ranking) - r)) for r, d in enumerate(ranking)
            )
        if scorable:
            values = self._calc(qrels, run)
            for qid, i in scorable.items():
                # A query with an empty ranking is absent from trec_eval's output: it scored 0.
                out[i] = {n: MetricValue(values.get((qid, n), 0.0)) for n in names}
        return out

    def _calc(
        self, qrels: list[ir_measures.Qrel], run: list[ir_measures.ScoredDoc]
    ) -> dict[tuple[str, str], float]:
        """``{(query_id, name): value}`` for every measure.

        ``MRR@k`` is computed as plain ``RR`` over the run cut to its top k documents per query
        (trec_eval's ``-M k``): ir-measures 0.4.3's pytrec_eval provider ignores the cutoff of
        ``RR@k`` (``RR@1`` of a ranking whose first relevant document is at rank 2 comes out
        0.5, not 0), which a test pins.
        """
        provider = _provider()
        values: dict[tuple[str, str], float] = {}
        plain = {k: v for k, v in self._ir.items() if not k.startswith("MRR@")}
        by_measure = {v: k for k, v in plain.items()}
        if plain:
            for m in provider.iter_calc(list(plain.values()), qrels, run):
                values[(m.query_id, by_measure[m.measure])] = float(m.value)
        if "MRR" in self.measures:
            for k in self.cutoffs:
                cut = _truncate(run, k)
                for m in provider.iter_calc([RR], qrels, cut):
                    values[(m.query_id, f"MRR@{k}")] = float(m.value)
        return values

    @staticmethod
    def _skip_reason(sample: Sample, resp: RagResponse) -> str | None:
        if not sample.answerable:
            return "unanswerable"
        if not any(g > 0 for g in sample.qrels().values()):
            return "no_reference_docs"
        if resp.error is not None:
            return "target_error"
        if resp.retrieved_doc_ids is None:
            return "no_doc_ids"
        return None


def _truncate(run: list[ir_measures.ScoredDoc], k: int) -> list[ir_measures.ScoredDoc]:
    """Keep the k highest-scored documents of every query (``run`` is in rank order)."""
    seen: dict[str, int] = {}
    out = []
    for d in run:
        n = seen.get(d.query_id, 0)
        if n < k:
            out.append(d)
        seen[d.query_id] = n + 1
    return out
