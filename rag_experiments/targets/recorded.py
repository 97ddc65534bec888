"""The answers a RAG system already gave, read from the dataset rows: :class:`RecordedTarget`.

Teams log their production or staging answers and want them scored without calling the system
again (what RAGAS ``evaluate()`` does on an EvaluationDataset with ``response`` and
``retrieved_contexts``, and DeepEval on test cases with ``actual_output`` and
``retrieval_context``). Each :class:`~rag_experiments.records.Sample` carries its answer in
``recorded`` (:class:`~rag_experiments.records.RecordedAnswer`; the peer loaders
``dataset=ragas`` / ``dataset=deepeval`` fill it, and our JSONL has the same object); this
target only copies it into a :class:`~rag_experiments.records.RagResponse`. No model, no index,
no network.

- A row with no recorded response (``recorded`` missing, or ``recorded.response`` null) is a
  :attr:`~rag_experiments.records.RagResponse.no_response` answer: answer metrics are NaN
  ``no_response``, retrieval metrics still score its contexts, and it is not a target failure
  (it does not count in ``n_failed`` nor against ``max_failure_rate``: the answer was simply
  not logged). A row without ``recorded`` is scored as one with no response and no context.
  An empty string is an answer (an empty one), as the other targets return it.
- Document ids: the recorded ``retrieved_doc_ids`` when present; else, with
  ``doc_ids_from_text`` and a corpus, each context is matched to the corpus document that
  contains it (:class:`~rag_experiments.targets.doc_matcher.CorpusDocMatcher`, as for HTTP
  targets); else None (doc-level metrics are NaN ``no_doc_ids``).
- ``citations``: the recorded structured citations (statement + chunk id / doc id / text),
  else None (``metrics=citations`` then reads the answer's inline ``[k]`` markers).
- ``latency_ms``: the recorded value, else 0.0 (the run's latency percentiles are then those of
  the recorded values, 0 for rows without one).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rag_experiments.protocols import TargetBase
from rag_experiments.records import RagResponse, RecordedAnswer, Sample
from rag_experiments.targets.doc_matcher import CorpusDocMatcher

if TYPE_CHECKING:
    from rag_experiments.data.base import EvalDataset

log = logging.getLogger(__name__)


class RecordedTarget(TargetBase):
    """Answer each sample with the answer recorded in its row (see the module docstring).

    Args:
        doc_ids_from_text: Match contexts to corpus documents by text when a row has no
            ``retrieved_doc_ids`` and the dataset has a corpus.
        doc_min_overlap: Share in (0, 1] of a context's words its document must hold (see
            :mod:`rag_experiments.targets.doc_matcher`).

    Raises:
        ConfigError: ``doc_min_overlap`` outside (0, 1] (when the matcher is built).
    """

    def __init__(self, doc_ids_from_text: bool = True, doc_min_overlap: float = 0.7) -> None:
        self.doc_ids_from_text = bool(doc_ids_from_text)
        self.doc_min_overlap = float(doc_min_overlap)
        self.matcher: CorpusDocMatcher | None = None

    max_concurrency = 1
    """Answers are copied from the dataset: nothing to wait for, one at a time."""

    def check(self) -> None:
        """Nothing to check: no model, no index, no endpoint."""

    def prepare(self, dataset: EvalDataset) -> None:
        """Build the corpus matcher when doc ids may be needed; count rows without an answer."""
        self.matcher = None
        if self.doc_ids_from_text and dataset.corpus:
            self.matcher = CorpusDocMatcher(dataset.corpus, self.doc_min_overlap)
        missing = sum(
            1 for s in dataset.samples if s.recorded is None or s.recorded.response is None
        )
        if missing:
            log.warning(
                "recorded target: %d of %d rows have no recorded response; their answer "
                "metrics are NaN no_response",
                missing,
                len(dataset.samples),
            )

    def answer(self, sample: Sample) -> RagResponse:
        """The recorded answer as a :class:`RagResponse` (never an error)."""
        rec = sample.recorded or RecordedAnswer()  # nothing recorded: no response, no context
        doc_ids = rec.retrieved_doc_ids
        if doc_ids is None:
            doc_ids = self._doc_ids(rec.retrieved_contexts)
        return RagResponse(
            response=rec.response or "",
            retrieved_contexts=list(rec.retrieved_contexts),
            retrieved_ids=None if rec.retrieved_ids is None else list(rec.retrieved_ids),
            retrieved_doc_ids=None if doc_ids is None else list(doc_ids),
            latency_ms=rec.latency_ms or 0.0,
            no_response=rec.response is None,
            citations=(None if rec.citations is None else [c.to_citation() for c in rec.citations]),
        )

    def _doc_ids(self, contexts: list[str]) -> list[str] | None:
        return None if self.matcher is None else self.matcher.rank(contexts)

    def describe(self) -> dict[str, str]:
        """Tags: target kind and where document ids come from."""
        match = (
            f"recorded, else text_match(min_overlap={self.doc_min_overlap:g})"
            if self.doc_ids_from_text
            else "recorded"
        )
        return {"target": "recorded", "recorded.doc_ids": match}
