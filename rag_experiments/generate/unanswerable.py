"""The check that keeps an "unanswerable" question only when the corpus really does not answer it.

For each question, the ``top_k`` chunks of the whole corpus most similar to it (cosine of the
L2-normalised embeddings, ties in chunk order) are shown to the judge
(:func:`~rag_experiments.generate.prompts.judge_messages`, output
:class:`~rag_experiments.generate.prompts.AnswerCheck`). The question is rejected as
``answered_by_corpus`` when the judge says they answer it, and as ``judge_unparseable`` when the
judge's reply cannot be read (it cannot be confirmed unanswerable). Other judge failures are
errors, tried again on the next run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_experiments.errors import LLMError
from rag_experiments.generate.prompts import AnswerCheck, judge_messages
from rag_experiments.llm.base import ChatModel
from rag_experiments.llm.batch import ChatRequest, complete_many
from rag_experiments.llm.parsing import LLMParseError
from rag_experiments.protocols import Embedder
from rag_experiments.records import Chunk


@dataclass
class CorpusVerdict:
    """The check of one question.

    Attributes:
        checked: The chunks the judge saw, best first.
        reason: None (kept), ``answered_by_corpus`` or ``judge_unparseable``.
        error: A judge failure reason (``judge_<reason>``), or None.
        detail: Human-readable detail of ``reason`` or ``error``.
    """

    checked: list[Chunk] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    detail: str = ""


class AnswerabilityCheck:
    """Retrieval over the corpus plus the judge.

    Args:
        judge: The judge chat model.
        embedder: The embedder the chunk vectors were made with.
        chunks: Every chunk of the corpus.
        vectors: Their L2-normalised embeddings, shape ``(len(chunks), dim)``.
        top_k: Chunks shown to the judge per question.
        max_concurrency: Judge calls in flight.
    """

    def __init__(
        self,
        judge: ChatModel,
        embedder: Embedder,
        chunks: Sequence[Chunk],
        vectors: np.ndarray,
        top_k: int = 3,
        max_concurrency: int = 4,
    ) -> None:
        self.judge = judge
        self.embedder = embedder
        self.chunks = list(chunks)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.top_k = top_k
        self.max_concurrency = max_concurrency

    def retrieve(self, question: str) -> list[Chunk]:
        """The ``top_k`` chunks most similar to ``question``, best first."""
        if not self.chunks:
            return []
        query = np.asarray(self.embedder.embed_query(question), dtype=np.float32)
        similarities = self.vectors @ query
        top = np.argsort(-similarities, kind="stable")[: self.top_k]
        return [self.chunks[int(i)] for i in top]

    def check(self, questions: Sequence[str]) -> list[CorpusVerdict]:
        """Check each question (judge calls in parallel); verdicts in question order."""
        found = [self.retrieve(q) for q in questions]
        requests = [
            ChatRequest(judge_messages(q, [c.text for c in chunks]), AnswerCheck)
            for q, chunks in zip(questions, found, strict=True)
        ]
        replies = complete_many(
            self.judge, requests, max_concurrency=self.max_concurrency, progress=False
        )
        verdicts = []
        for chunks, reply in zip(found, replies, strict=True):
            verdict = CorpusVerdict(checked=chunks)
            if isinstance(reply, LLMParseError):
                verdict.reason, verdict.detail = "judge_unparseable", str(reply)
            elif isinstance(reply, LLMError):
                verdict.error, verdict.detail = f"judge_{reply.reason}", str(reply)
            elif isinstance(reply.parsed, AnswerCheck) and reply.parsed.answered:
                verdict.reason = "answered_by_corpus"
                verdict.detail = f"the judge says {', '.join(c.id for c in chunks)} answer it"
            verdicts.append(verdict)
        return verdicts
