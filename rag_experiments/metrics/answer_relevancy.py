"""Answer relevancy: how well the response addresses the question, from questions it answers.

``answer_relevancy`` ∈ [0, 1], higher is better (RAGAS ``ResponseRelevancy``). One judge call
(prompt :mod:`~rag_experiments.metrics.prompts.answer_relevancy`) writes N questions (default 3)
that the response answers and says whether the response is noncommittal; then, with E the
configured embedder (vectors L2-normalised)::

    answer_relevancy = (1 - noncommittal) · (1/N) Σ_i max(0, cos(E(user_input), E(q_i)))

Cosines are clipped at 0 so the score stays in [0, 1]. The question and the generated questions
are all embedded with ``embed_query`` (they are the same kind of text). The output model asks
for exactly N questions; another count is a parse error, retried.

Edges:

- target failed → NaN ``target_error``; no answer recorded → NaN ``no_response``;
- empty or whitespace response → 0.0 with reason ``empty_answer``, no judge call;
- the response is a refusal (:func:`~rag_experiments.metrics.refusal.is_refusal`) → 0.0
  flagged ``refusal``, no judge call: a refusal is noncommittal by definition, which scores 0;
- the judge marks it noncommittal → 0.0 flagged ``noncommittal``;
- judge failure → NaN with its reason.

Unanswerable samples are scored like the others (a correct refusal scores 0 here by the
definition above; refusals are judged by ``correct_refusal_rate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.definitions import RAGAS, MetricDeclaration, MetricDefinition
from rag_experiments.metrics.judge import JudgedMetric
from rag_experiments.metrics.prompts import answer_relevancy as prompt
from rag_experiments.metrics.refusal import compile_patterns, is_refusal
from rag_experiments.records import MetricValue, RagResponse, Sample


def clipped_cosine(a: np.ndarray, b: np.ndarray) -> float:
    """``max(0, a·b / (|a| |b|))``; 0.0 when either vector is zero."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return max(0.0, float(np.dot(a, b)) / (na * nb))


class AnswerRelevancy(JudgedMetric):
    """Mean clipped cosine between the question and questions generated from the response.

    Args:
        judge: The judge chat model.
        embedder: The configured embedder (``build.build`` injects the baseline's).
        n_questions: N, questions generated per response (1..10).
        max_retries: Retries of an invalid judge output.
        max_tokens: Completion limit per judge call.
        refusal_patterns: Extra refusal patterns (see :mod:`~rag_experiments.metrics.refusal`).
        prefix: Column-name prefix.
        examples: Graded few-shot examples for the prompt (:mod:`~rag_experiments.metrics.
            fewshot`; ``rag-exp align`` writes them).

    Raises:
        ConfigError: ``n_questions`` outside 1..10.
    """

    name = "answer_relevancy"
    example_fields = ("answer",)
    requires: ClassVar[frozenset[str]] = frozenset({"judge", "embedder"})
    columns = ("answer_relevancy",)
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "answer_relevancy",
                True,
                0.0,
                1.0,
                "mean cosine(question, questions generated from the response), 0 if noncommittal",
                RAGAS,
                key=80,
            ),
        ),
        scorer=True,
    )

    def __init__(
        self,
        judge: Any = None,
        embedder: Any = None,
        n_questions: int = 3,
        max_retries: int = 1,
        max_tokens: int = 192,
        refusal_patterns: Sequence[str] | None = None,
        prefix: str = "",
        examples: Any = None,
    ) -> None:
        super().__init__(judge, max_retries, max_tokens, prefix, examples)
        if not 1 <= int(n_questions) <= prompt.MAX_QUESTIONS:
            raise ConfigError(
                f"answer_relevancy.n_questions must be in 1..{prompt.MAX_QUESTIONS}, "
                f"got {n_questions}"
            )
        self.embedder = embedder
        self.n_questions = int(n_questions)
        self.refusal_patterns = compile_patterns(refusal_patterns)

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        answer = resp.response.strip()
        if not answer:
            value = MetricValue(0.0, "empty_answer")
            return {"answer_relevancy": value}, {"skipped": "empty_answer"}
        if is_refusal(answer, self.refusal_patterns):
            return {"answer_relevancy": MetricValue(0.0, "refusal")}, {"skipped": "refusal"}
        if self.embedder is None:
            raise ConfigError(
                "answer_relevancy needs an embedder: run it through `rag-exp run` (which passes "
                "the configured embedder) or pass embedder=<Embedder>"
            )
        fields = {"answer": answer, "n": self.n_questions}
        judgement, record = self._ask(prompt.PROMPT, fields, prompt.output_model(self.n_questions))
        if judgement.parsed is None:
            return {"answer_relevancy": MetricValue.nan(judgement.error or "judge_error")}, record
        parsed = judgement.parsed
        questions = list(parsed.questions)  # type: ignore[attr-defined]
        noncommittal = bool(parsed.noncommittal)  # type: ignore[attr-defined]
        q_vec = np.asarray(self.embedder.embed_query(sample.user_input), dtype=np.float64)
        cosines = [
            clipped_cosine(q_vec, np.asarray(self.embedder.embed_query(q), dtype=np.float64))
            for q in questions
        ]
        record["questions"] = [
            {"question": q, "cosine": round(c, 6)} for q, c in zip(questions, cosines, strict=True)
        ]
        record["noncommittal"] = noncommittal
        if noncommittal:
            return {"answer_relevancy": MetricValue(0.0, "noncommittal")}, record
        return {"answer_relevancy": MetricValue(float(np.mean(cosines)))}, record
