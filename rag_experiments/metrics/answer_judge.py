"""Answer judge: accuracy, completeness and relevance of the response on 1–5, against the
reference, with feedback text.

One judge call per row (prompt :mod:`~rag_experiments.metrics.prompts.answer_judge`, the seed
tutorial's rubric: a wrong answer gets accuracy 1; 5 only when perfect). Each score s is logged
raw and normalised::

    answer_judge.<criterion>_raw = s ∈ {1, …, 5}
    answer_judge.<criterion>     = (s − 1) / 4 ∈ [0, 1]

for criterion ∈ {accuracy, completeness, relevance}; higher is better. The feedback sentence
goes to ``judge_audit.jsonl``. A score outside 1..5 is a parse error (retried), not a value.

Edges:

- target failed → every column NaN ``target_error``; no answer recorded → ``no_response``;
- reference ``""`` (or blank) → NaN ``no_reference`` (the rubric compares with a reference);
- empty or whitespace response → raw 1 / normalised 0.0 with reason ``empty_answer``, no judge
  call (an empty answer is wrong, incomplete and off the question);
- judge failure → NaN with its reason.

Unanswerable samples are graded like the others: their reference says the documents do not
answer, so a refusal can score well and an invented answer badly.
"""

from __future__ import annotations

from typing import Any

from rag_experiments.metrics.definitions import (
    JUDGE_RUBRIC,
    MetricDeclaration,
    MetricDefinition,
    rubric_grade,
)
from rag_experiments.metrics.judge import JudgedMetric
from rag_experiments.metrics.prompts import answer_judge as prompt
from rag_experiments.records import MetricValue, RagResponse, Sample

CRITERIA = ("accuracy", "completeness", "relevance")
"""The graded criteria, in column order."""


def normalise(score: float) -> float:
    """Map a 1–5 score to [0, 1]: ``(s − 1) / 4``."""
    return (score - 1.0) / 4.0


class AnswerJudge(JudgedMetric):
    """Rubric grades (1–5, and normalised) of the response against the reference.

    Args:
        judge: The judge chat model.
        max_retries: Retries of an invalid judge output.
        max_tokens: Completion limit per judge call.
        prefix: Column-name prefix.
        examples: Graded few-shot examples for the prompt (:mod:`~rag_experiments.metrics.
            fewshot`; ``rag-exp align`` writes them).
    """

    name = "answer_judge"
    example_fields = ("question", "reference", "answer")
    columns = tuple(f"answer_judge.{c}" for c in CRITERIA) + tuple(
        f"answer_judge.{c}_raw" for c in CRITERIA
    )
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "answer_judge.accuracy",
                True,
                0.0,
                1.0,
                "judge's accuracy score against the reference, (s - 1) / 4",
                JUDGE_RUBRIC,
                key=110,
                labels=rubric_grade("answer_judge.accuracy_raw"),
            ),
            MetricDefinition(
                "answer_judge.completeness",
                True,
                0.0,
                1.0,
                "judge's completeness score against the reference, (s - 1) / 4",
                JUDGE_RUBRIC,
                labels=rubric_grade("answer_judge.completeness_raw"),
            ),
            MetricDefinition(
                "answer_judge.relevance",
                True,
                0.0,
                1.0,
                "judge's relevance-to-the-question score, (s - 1) / 4",
                JUDGE_RUBRIC,
                labels=rubric_grade("answer_judge.relevance_raw"),
            ),
            MetricDefinition(
                "answer_judge.accuracy_raw",
                True,
                1.0,
                5.0,
                "judge's accuracy score as given (1 = wrong, 5 = perfect)",
                JUDGE_RUBRIC,
            ),
            MetricDefinition(
                "answer_judge.completeness_raw",
                True,
                1.0,
                5.0,
                "judge's completeness score as given (1-5)",
                JUDGE_RUBRIC,
            ),
            MetricDefinition(
                "answer_judge.relevance_raw",
                True,
                1.0,
                5.0,
                "judge's relevance score as given (1-5)",
                JUDGE_RUBRIC,
            ),
        )
    )

    def __init__(
        self,
        judge: Any = None,
        max_retries: int = 1,
        max_tokens: int = 128,
        prefix: str = "",
        examples: Any = None,
    ) -> None:
        super().__init__(judge, max_retries, max_tokens, prefix, examples)

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        reference = sample.reference.strip()
        if not reference:
            return self._nan_all("no_reference")
        answer = resp.response.strip()
        if not answer:
            lowest = self._values({c: 1 for c in CRITERIA}, "empty_answer")
            return lowest, {"skipped": "empty_answer"}
        fields = {"question": sample.user_input, "reference": reference, "answer": answer}
        judgement, record = self._ask(prompt.PROMPT, fields, prompt.AnswerGrades)
        if judgement.parsed is None:
            return self._nan_all(judgement.error or "judge_error")[0], record
        grades = judgement.parsed
        scores = {c: int(getattr(grades, c)) for c in CRITERIA}
        record.update(scores=scores, feedback=grades.feedback)  # type: ignore[attr-defined]
        return self._values(scores, None), record

    @staticmethod
    def _values(scores: dict[str, int], reason: str | None) -> dict[str, MetricValue]:
        out: dict[str, MetricValue] = {}
        for c in CRITERIA:
            out[f"answer_judge.{c}"] = MetricValue(normalise(scores[c]), reason)
        for c in CRITERIA:
            out[f"answer_judge.{c}_raw"] = MetricValue(float(scores[c]), reason)
        return out
