"""Retrieval metrics at document and chunk level, computed with ir-measures (pytrec_eval
provider, i.e. trec_eval semantics).

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
whose target failed is NaN with ``target_error``; a target that returns no document ids (a
black-box endpoint that gives only context texts) is NaN with ``no_doc_ids``.

**An empty ranking** (the retriever returned nothing: BM25 for a question of stop words or
emoji only, or sharing no term with the corpus) is a ranking, not a missing one: every measure
above is defined on it and is 0.0 — Hit@k, MRR@k, P@k, R@k and MAP@k have numerator 0 over a
positive denominator (k, or the number of relevant documents, > 0 since a sample without
relevant documents is NaN ``no_reference_docs``), and nDCG@k = 0 / IDCG@k with IDCG@k > 0
for the same reason. trec_eval scores it so with ``-c`` ("missing queries will contribute a
value of 0 to all evaluation measures", trec_eval's usage text); ir-measures gives 0 for a query
without a run. None of them is NaN; the 0.0 is flagged with the target's
``metadata["retrieval_note"]`` (``no_query_terms``, ``no_matching_terms``) or ``empty_ranking``
so the row says why.

**Chunk level** (``chunk_level=True``, names prefixed ``chunk.``: ``chunk.nDCG@10``,
``chunk.R@5`` …): the same measures, where the "relevant documents" are the sample's
``reference_contexts`` and the ranking is ``retrieved_contexts``. Each retrieved context is
mapped to the reference context it covers by
:func:`~rag_experiments.metrics.context_match.match_contexts` (normalised word overlap ≥
``min_overlap`` or verbatim containment, first not-yet-found reference wins; the exact rule is
in :mod:`rag_experiments.metrics.context_match`), so it works for the baseline and for black-box
targets alike. Then, with n reference contexts:

- ``chunk.R@k`` = reference contexts covered in the top k contexts / n.
- ``chunk.P@k`` = contexts in the top k that cover a (not yet found) reference context / k.
- ``chunk.Hit@k``, ``chunk.MRR@k``, ``chunk.nDCG@k``, ``chunk.MAP@k`` as above, every reference
  context with grade 1; a context that only covers references found higher up counts as not
  relevant.

``retrieved_contexts`` holds only the ``top_k`` texts the generator saw, so a chunk-level cutoff
deeper than ``top_k`` sees only those ``top_k`` contexts (``chunk.R@10`` with ``top_k = 5`` equals
``chunk.R@5``; ``chunk.P@10`` still divides by 10). Samples without reference contexts are NaN
with ``no_reference_contexts``; ``unanswerable`` and ``target_error`` as at doc level. A sample
whose target returned no context at all scores 0.0 flagged ``empty_context``.
"""

from __future__ import annotations

from collections.abc import Sequence

import ir_measures
from ir_measures import AP, RR, P, R, Success, nDCG
from ir_measures.measures import Measure
from ir_measures.providers import Provider

from rag_experiments.common.memo import forgetting
from rag_experiments.errors import ConfigError
from rag_experiments.metrics.context_match import (
    check_overlap,
    has_words,
    match_contexts,
    normalised_texts,
)
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.protocols import MetricBase
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

_MEASURES = {
    "Hit": (Success, "share of queries with a relevant document in the top k"),
    "MRR": (RR, "reciprocal rank of the first relevant document within the top k"),
    "nDCG": (nDCG, "normalised discounted cumulative gain of the top k (graded relevance)"),
    "P": (P, "relevant documents in the top k divided by k"),
    "R": (R, "share of the relevant documents found in the top k"),
    "MAP": (AP, "average precision over the relevant documents, cut at k"),
}

CHUNK_PREFIX = "chunk."
"""Prefix of the chunk-level metric names (``chunk.nDCG@10``)."""

_CHUNK_DESCRIPTIONS = {
    "Hit": "share of queries with a reference context covered by the top k contexts",
    "MRR": "reciprocal rank of the first context covering a reference context, within the top k",
    "nDCG": "normalised discounted cumulative gain of the top k contexts over reference contexts",
    "P": "contexts in the top k covering a reference context, divided by k",
    "R": "share of the reference contexts covered by the top k contexts",
    "MAP": "average precision over the reference contexts, cut at k",
}

_Row = tuple[dict[str, int], list[str], str | None]
"""One scorable query: qrels ``{id: grade}``, ranked ids, flag for its values (or None)."""


_IR_SOURCE = "ir-measures (pytrec_eval, trec_eval semantics)"
_CHUNK_SOURCE = "this project (text overlap with reference_contexts), ir-measures formulas"
_KEYS = (("nDCG", 10, 10), ("MRR", 10, 20), ("Hit", 5, 30), ("R", 10, 40))
"""(measure, cutoff, key priority) of the doc-level key metrics; ``chunk.nDCG@10`` follows."""


def _provider() -> Provider:
    provider = ir_measures.providers.registry["pytrec_eval"]
    if not provider.is_available():  # pragma: no cover - depends on the install
        raise ConfigError("ir-measures needs pytrec_eval: run `pip install pytrec-eval-terrier`")
    return provider


class RetrievalMetrics(MetricBase):
    """Doc-level (and chunk-level) retrieval metrics for every cutoff in ``cutoffs``.

    Args:
        cutoffs: Ranks k at which every measure is reported (each ≥ 1).
        measures: Which of ``Hit, MRR, nDCG, P, R, MAP`` to report.
        chunk_level: Also report every measure at chunk level, as ``chunk.<name>@k``, against
            the samples' ``reference_contexts`` (see the module docstring).
        min_overlap: Share in (0, 1] of a reference context's distinct words a retrieved
            context must hold to cover it (chunk level only).

    Raises:
        ConfigError: A cutoff < 1, an unknown measure name, or ``min_overlap`` outside (0, 1].
    """

    declaration = MetricDeclaration(
        outputs=tuple(
            MetricDefinition(
                f"{m}@{k}", True, 0.0, 1.0, _MEASURES[m][1], _IR_SOURCE, key=key,
                answer_level=False,
            )
            for m, k, key in _KEYS
        )
        + (
            MetricDefinition(
                f"{CHUNK_PREFIX}nDCG@10", True, 0.0, 1.0, _CHUNK_DESCRIPTIONS["nDCG"],
                _CHUNK_SOURCE, key=50, answer_level=False,
            ),
        )
    )  # fmt: skip
    """The key metrics among its columns (the columns depend on ``cutoffs`` and ``measures``;
    :meth:`specs` lists them all)."""

    def __init__(
        self,
        cutoffs: Sequence[int] = (1, 3, 5, 10),
        measures: Sequence[str] = ("Hit", "MRR", "nDCG", "P", "R", "MAP"),
        chunk_level: bool = True,
        min_overlap: float = 0.7,
    ) -> None:
        if not cutoffs or any(int(k) < 1 for k in cutoffs):
            raise ConfigError(f"retrieval cutoffs must be ≥ 1, got {list(cutoffs)}")
        unknown = [m for m in measures if m not in _MEASURES]
        if unknown:
            raise ConfigError(
                f"unknown retrieval measure(s) {unknown}; choose from {list(_MEASURES)}"
            )
        self.cutoffs = sorted({int(k) for k in cutoffs})
        self.measures = list(measures)
        self.chunk_level = bool(chunk_level)
        self.min_overlap = check_overlap(min_overlap, "retrieval min_overlap")
        self._ir = {
            f"{name}@{k}": _MEASURES[name][0] @ k for name in self.measures for k in self.cutoffs
        }

    @property
    def depth(self) -> int:
        """Deepest cutoff: how deep a ranking the retriever should return."""
        return self.cutoffs[-1]

    def specs(self) -> list[MetricSpec]:
        """One spec per (measure, cutoff), all in [0, 1], higher is better; then the same
        with the ``chunk.`` prefix when ``chunk_level`` is on."""
        specs = [
            MetricSpec(f"{name}@{k}", True, 0.0, 1.0, _MEASURES[name][1])
            for name in self.measures
            for k in self.cutoffs
        ]
        if self.chunk_level:
            specs += [
                MetricSpec(f"{CHUNK_PREFIX}{name}@{k}", True, 0.0, 1.0, _CHUNK_DESCRIPTIONS[name])
                for name in self.measures
                for k in self.cutoffs
            ]
        return specs

    @forgetting(normalised_texts)
    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]:
        """Per-sample values, computed in one ir-measures pass per level over all scorable samples.

        Args:
            samples: Samples with ``qrels()`` (doc level) and ``reference_contexts`` (chunk
                level).
            responses: Their responses; ``retrieved_doc_ids`` is the doc ranking,
                ``retrieved_contexts`` (with ``retrieved_ids`` when known) the chunk ranking.

        Returns:
            One dict per sample keyed by metric name (every name of :meth:`specs`).
        """
        out: list[dict[str, MetricValue]] = []
        doc_rows: dict[int, _Row] = {}
        chunk_rows: dict[int, _Row] = {}
        for i, (sample, resp) in enumerate(zip(samples, responses, strict=True)):
            row: dict[str, MetricValue] = {}
            out.append(row)
            reason = self._skip_reason(sample, resp)
            if reason is None:
                ranking = list(resp.retrieved_doc_ids or [])
                doc_rows[i] = (sample.qrels(), ranking, None if ranking else _empty_flag(resp))
            else:
                row.update({n: MetricValue.nan(reason) for n in self._ir})
            if not self.chunk_level:
                continue
            reason = self._chunk_skip_reason(sample, resp)
            if reason is None:
                chunk_rows[i] = self._chunk_row(sample, resp)
            else:
                row.update({CHUNK_PREFIX + n: MetricValue.nan(reason) for n in self._ir})
        self._score(doc_rows, "", out)
        self._score(chunk_rows, CHUNK_PREFIX, out)
        return out

    def _score(self, rows: dict[int, _Row], prefix: str, out: list[dict[str, MetricValue]]) -> None:
        """Compute every measure for ``rows`` and write it into ``out`` under ``prefix + name``."""
        if not rows:
            return
        # ir-measures' dict-of-dict form ({query: {doc: grade}}, {query: {doc: score}}), built
        # as its converters build it from Qrel/ScoredDoc lists (a later duplicate overwrites).
        qrels: dict[str, dict[str, int]] = {}
        rankings: dict[str, list[str]] = {}
        for i, (judged, ranking, _) in rows.items():
            qid = f"{i}"
            if judged:
                qrels[qid] = {d: int(g) for d, g in judged.items()}
            rankings[qid] = ranking
        values = self._calc(qrels, rankings)
        names = [(n, prefix + n) for n in self._ir]
        shared: dict[tuple[float, str | None], MetricValue] = {}  # immutable: one per value
        for i, (_, _, flag) in rows.items():
            # A query with an empty ranking is absent from trec_eval's output: it scored 0
            # (ir-measures' default for a query it has no value for).
            got = values.get(f"{i}", {})
            row = out[i]
            for n, column in names:
                key = (got.get(n, 0.0), flag)
                value = shared.get(key)
                if value is None:
                    value = shared[key] = MetricValue(*key)
                row[column] = value

    def _chunk_row(self, sample: Sample, resp: RagResponse) -> _Row:
        """Chunk-level qrels and run of one sample.

        Reference context ``j`` (one with at least one word) is judged ``ref{j}`` with grade 1.
        The context at rank ``r`` gets the id ``ref{j}`` of the reference it is assigned by
        :func:`match_contexts`, else ``ctx{r}`` (``ctx{r}:{chunk id}`` when the chunk id is
        known): unique, and never equal to a ``ref{j}``, whatever ids a target returns.
        """
        refs = sample.reference_contexts
        judged = {f"ref{j}": 1 for j, text in enumerate(refs) if has_words(text)}
        contexts = resp.retrieved_contexts
        ids = resp.retrieved_ids or []
        ranking = []
        for r, j in enumerate(match_contexts(refs, contexts, self.min_overlap)):
            if j is not None:
                ranking.append(f"ref{j}")
            elif r < len(ids):
                ranking.append(f"ctx{r}:{ids[r]}")
            else:
                ranking.append(f"ctx{r}")
        return judged, ranking, None if contexts else "empty_context"

    def _calc(
        self, qrels: dict[str, dict[str, int]], rankings: dict[str, list[str]]
    ) -> dict[str, dict[str, float]]:
        """``{query_id: {name: value}}`` for every measure.

        ir-measures' pytrec_eval provider translates the measures into pytrec_eval evaluators
        (trec_eval measure names, relevance level, judged-only flag): its
        :meth:`~ir_measures.providers.Provider.evaluator`, built once per measure set; each of
        its evaluators then scores the whole run in one call, and its per-query output is read
        directly (the values ``iter_calc`` would wrap one ``Metric`` object at a time; a test
        pins the two as equal).

        ``MRR@k`` is computed as plain ``RR`` over the run cut to its top k documents per query
        (trec_eval's ``-M k``): ir-measures 0.4.3's pytrec_eval provider ignores the cutoff of
        ``RR@k`` (``RR@1`` of a ranking whose first relevant document is at rank 2 comes out
        0.5, not 0), which a test pins.
        """
        provider = _provider()
        values: dict[str, dict[str, float]] = {}
        plain = {k: v for k, v in self._ir.items() if not k.startswith("MRR@")}
        if plain:
            _evaluate(provider, plain, qrels, _run(rankings, None), values)
        if "MRR" in self.measures:
            for k in self.cutoffs:
                _evaluate(provider, {f"MRR@{k}": RR}, qrels, _run(rankings, k), values)
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

    @staticmethod
    def _chunk_skip_reason(sample: Sample, resp: RagResponse) -> str | None:
        if not sample.answerable:
            return "unanswerable"
        if not any(has_words(text) for text in sample.reference_contexts):
            return "no_reference_contexts"
        if resp.error is not None:
            return "target_error"
        return None


def _empty_flag(resp: RagResponse) -> str:
    """Flag of the 0.0 an empty doc ranking scores: the target's ``retrieval_note`` when it
    gave one, else ``empty_ranking``."""
    note = resp.metadata.get("retrieval_note")
    return note if isinstance(note, str) and note else "empty_ranking"


def _run(rankings: dict[str, list[str]], k: int | None) -> dict[str, dict[str, float]]:
    """The run ``{query: {doc: score}}`` of ranked ids, cut to the top ``k`` (None: all).

    Strictly decreasing scores keep our rank order (trec_eval breaks ties by doc id); a query
    with an empty ranking is left out, as ir-measures leaves it out of a ``ScoredDoc`` list.
    """
    run: dict[str, dict[str, float]] = {}
    for qid, ranking in rankings.items():
        n = len(ranking)
        cut = ranking if k is None else ranking[:k]
        if cut:
            run[qid] = {d: float(n - r) for r, d in enumerate(cut)}
    return run


def _evaluate(
    provider: Provider,
    measures: dict[str, Measure],
    qrels: dict[str, dict[str, int]],
    run: dict[str, dict[str, float]],
    values: dict[str, dict[str, float]],
) -> None:
    """Score ``run`` for ``measures`` (``{our name: ir-measures measure}``) through the
    provider's evaluator; add ``{query_id: {our name: value}}`` to ``values``."""
    evaluator = provider.evaluator(list(measures.values()), qrels)
    ours = {id(m): name for name, m in measures.items()}
    for invoker in evaluator.invokers:  # the pytrec_eval provider's evaluator (see _calc)
        # measure_map: {name pytrec_eval reports: (measure, name asked for)}
        name_of = {reported: ours[id(m)] for reported, (m, _) in invoker.measure_map.items()}
        for qid, scored in invoker.evaluator.evaluate(run).items():
            row = values.setdefault(qid, {})
            for reported, value in scored.items():
                row[name_of[reported]] = float(value)
