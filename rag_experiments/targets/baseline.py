"""The built-in baseline RAG system: chunker → retriever (dense, BM25 or hybrid) → optional
reranker → top-k → generator."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from rag_experiments.errors import RagExpError
from rag_experiments.index.naming import index_key
from rag_experiments.llm.context import fit_contexts
from rag_experiments.protocols import TargetBase
from rag_experiments.records import RagResponse, Sample
from rag_experiments.retrieval.base import rerank_result
from rag_experiments.targets.prompts import (
    ANSWER_PROMPT_VERSION,
    answer_messages,
    cited_system_prompt,
)

if TYPE_CHECKING:
    from rag_experiments.data.base import EvalDataset
    from rag_experiments.index.chroma import ChromaIndex
    from rag_experiments.llm.base import ChatModel
    from rag_experiments.protocols import Chunker, Embedder
    from rag_experiments.retrieval.base import RerankerBase, RetrieverBase

log = logging.getLogger(__name__)


class BaselineTarget(TargetBase):
    """Retrieve the ``top_k`` chunks for a question and, unless retrieval-only, generate an
    answer from them with the configured chat model.

    Args:
        chunker: Splits the corpus into chunks.
        embedder: Embeds chunks and questions for a retriever that ``uses_vectors`` (dense,
            hybrid); None for one that does not (BM25).
        retriever: Ranks chunks; ``top_k`` contexts go to the generator.
        index: The persistent ChromaDB index (collections keyed by corpus digest, chunker
            config and embedder id, so every sweep job with the same key reuses one build).
        generator: Chat model for answers; None (or ``generate=False``) = retrieval only.
        generate: Whether to generate answers.
        embed_title: Embed ``title + " " + text`` for documents with a title (BEIR/MTEB).
        system_prompt: The generator's system message.
        truncate_contexts: When the prompt would not fit the generator's context window
            (minus its ``max_tokens``), drop the lowest-ranked contexts, then cut the top one,
            until it fits, and flag the row (``metadata["contexts_truncated"] = True``, with
            ``contexts_dropped`` and ``context_chars_cut``). ``retrieved_contexts`` keep the
            full retrieval, so retrieval metrics are unaffected. False = such a row fails
            with ``context_overflow``.
        reranker: Re-scores the first ``reranker.candidates`` hits of each ranking before the
            ``top_k`` are taken (:func:`~rag_experiments.retrieval.base.rerank_result`); None =
            the retriever's order.
        cite: Ask the generator to cite the passages after each sentence as ``[k]``
            (:data:`~rag_experiments.targets.prompts.CITE_INSTRUCTION` appended to the system
            prompt), so ``metrics=citations`` scores the answers' citations.
    """

    assembled = True
    """Built by the harness from the config's chunker, embedder, retriever and llm."""

    def __init__(
        self,
        chunker: Chunker,
        embedder: Embedder | None,
        retriever: RetrieverBase,
        index: ChromaIndex,
        generator: ChatModel | None = None,
        generate: bool = True,
        embed_title: bool = True,
        system_prompt: str = "",
        truncate_contexts: bool = False,
        reranker: RerankerBase | None = None,
        cite: bool = False,
    ) -> None:
        self.chunker = chunker
        self.embedder = embedder
        self.retriever = retriever
        self.index = index
        self.generator = generator if generate else None
        self.embed_title = embed_title
        self.system_prompt = cited_system_prompt(system_prompt) if cite else system_prompt
        self.cite = bool(cite)
        self.truncate_contexts = truncate_contexts
        self.reranker = reranker
        self.collection: str | None = None

    @property
    def max_concurrency(self) -> int:
        """Questions worth answering at once: what the generator takes at once (1 for the
        embedded model; ``llm.max_concurrency`` for a server), 1 when retrieval only."""
        return int(self.generator.max_concurrency) if self.generator is not None else 1

    def check(self) -> None:
        """The embedder's check (when the retriever uses vectors), then the generator's (when
        answers are generated). (The reranker is checked by the job's preflight.)

        Raises:
            RagExpError: The embedder or the generator cannot be used.
        """
        if self.embedder is not None:
            self.embedder.check()
        if self.generator is not None:
            self.generator.check()

    def prepare(self, dataset: EvalDataset) -> None:
        """Chunk the corpus and build (or reuse) the retriever's indexes: the vector index when
        the retriever ``uses_vectors``, then its own (:meth:`RetrieverBase.prepare`, BM25).

        Raises:
            RagExpError: The corpus is empty (the baseline has nothing to retrieve from), or the
                retriever uses vectors and no embedder was given.
        """
        if not dataset.corpus:
            raise RagExpError(
                f"dataset {dataset.name!r} has no corpus documents; set dataset.corpus to a folder "
                "of .pdf/.docx/.md/.txt files or a corpus .jsonl"
            )
        chunks = [c for doc in dataset.corpus for c in self.chunker.split(doc)]
        log.info(
            "Corpus %s: %d documents -> %d chunks (%s)",
            dataset.name,
            len(dataset.corpus),
            len(chunks),
            self.chunker.config_id,
        )
        if self.retriever.top_k > len(chunks):
            log.warning(
                "retriever.top_k=%d but the corpus has only %d chunks: every question gets %s "
                "%d of them as context (lower retriever.top_k, or check the corpus and chunker)%s",
                self.retriever.top_k,
                len(chunks),
                "all" if self.retriever.ranks_every_chunk else "at most",
                len(chunks),
                ""
                if self.retriever.ranks_every_chunk
                else "; a question sharing no term with a chunk gets none (its row's "
                "metadata.retrieval_note says why)",
            )
        if self.retriever.uses_vectors:
            if self.embedder is None:
                raise RagExpError(
                    "the retriever ranks by vectors but the baseline has no embedder; build the "
                    "baseline with the config's embedder (rag_experiments.build.build_baseline)"
                )
            key = index_key(dataset.corpus_digest, self.chunker.config_id, self.embedder.id)
            self.collection = self.index.ensure(
                chunks,
                self.embedder,
                key,
                embed_title=self.embed_title,
                chunker_id=self.chunker.config_id,
            )
            self.retriever.bind(self.index, self.collection, self.embedder)
        self.retriever.prepare(chunks, f"{self.chunker.config_id}|{dataset.corpus_digest}")

    def answer(self, sample: Sample) -> RagResponse:
        """Retrieve and (optionally) generate. Errors come back as ``RagResponse.error``."""
        started = time.perf_counter()
        try:
            hits = self.retriever.retrieve(sample.user_input)
        except RagExpError as exc:
            return RagResponse(error="retrieval_error", error_message=str(exc))
        if self.reranker is not None:
            try:
                hits = rerank_result(hits, self.reranker, sample.user_input)
            except RagExpError as exc:
                return RagResponse(error=exc.reason or "rerank_error", error_message=str(exc))
        response = RagResponse(
            retrieved_contexts=list(hits.contexts),
            retrieved_ids=list(hits.chunk_ids),
            retrieved_doc_ids=list(hits.doc_ids),
            retrieved_sources=hits.provenance() or None,
        )
        if hits.note:
            response.metadata["retrieval_note"] = hits.note
        if self.generator is not None:
            contexts = list(hits.contexts)
            if self.truncate_contexts:
                contexts = self._fit(sample.user_input, contexts, response)
            messages = answer_messages(self.system_prompt, sample.user_input, contexts)
            try:
                completion = self.generator.complete(messages)
            except RagExpError as exc:
                response.error = exc.reason or "generation_failed"
                response.error_message = str(exc)
            else:
                response.response = completion.text.strip()
                response.metadata.update(
                    prompt_tokens=completion.usage.prompt_tokens,
                    completion_tokens=completion.usage.completion_tokens,
                    finish_reason=completion.finish_reason,
                    cached=completion.cached,
                    generation_ms=completion.latency_ms,
                )
        response.latency_ms = (time.perf_counter() - started) * 1000.0
        return response

    def _fit(self, question: str, contexts: list[str], response: RagResponse) -> list[str]:
        """Trim ``contexts`` to the generator's prompt budget; flag ``response`` if trimmed."""
        budget = self.generator.prompt_budget()
        if budget is None:
            return contexts
        kept, report = fit_contexts(
            contexts,
            lambda cs: answer_messages(self.system_prompt, question, cs),
            self.generator.count_prompt_tokens,
            budget,
        )
        if report.trimmed:
            response.metadata.update(
                contexts_truncated=True,
                contexts_dropped=report.dropped,
                context_chars_cut=report.chars_cut,
            )
        return kept

    def describe(self) -> dict[str, str]:
        """Tags: target kind, chunker, retriever, embedder and collection (vector retrievers),
        reranker and generator identity."""
        tags = {
            "target": "baseline",
            "chunker": self.chunker.config_id,
            **self.retriever.describe(),
            "prompt.answer": ANSWER_PROMPT_VERSION,
        }
        if self.embedder is not None:
            tags.update({"embedder": self.embedder.id, "index.collection": self.collection or ""})
        if self.reranker is not None:
            tags["reranker.candidates"] = str(self.reranker.candidates)
        if self.generator is not None:
            tags.update({f"llm.{k}": v for k, v in self.generator.describe().items()})
        return tags
