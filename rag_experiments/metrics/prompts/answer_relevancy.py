"""Answer relevancy prompt (one call): questions the response answers, and whether the
response is noncommittal."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, create_model

from rag_experiments.common.memo import memo
from rag_experiments.llm.parsing import StructuredOutput
from rag_experiments.metrics.prompts.base import JudgePrompt

QUESTION_CHARS = 200
"""Longest generated question accepted (characters)."""

MAX_QUESTIONS = 10
"""Most questions one call may generate."""

Question = Annotated[str, Field(min_length=1, max_length=QUESTION_CHARS)]
"""One generated question."""

PROMPT = JudgePrompt(
    name="answer_relevancy",
    version="v1",
    template=(
        "Answer: {answer}\n\n"
        'Task: write {n} different questions that this Answer answers. Set "noncommittal" to '
        "true if the Answer is evasive, vague or says it does not know, else false.\n"
        'JSON: {{"questions": ["...", ...], "noncommittal": false}}'
    ),
)


class GeneratedQuestions(StructuredOutput):
    """What the judge returns (strict types: ``noncommittal`` is a JSON boolean)."""

    questions: list[Question] = Field(min_length=1, max_length=MAX_QUESTIONS)
    noncommittal: bool


@memo(maxsize=16)
def output_model(n_questions: int) -> type[GeneratedQuestions]:
    """:class:`GeneratedQuestions` with exactly ``n_questions`` non-empty questions."""
    return create_model(
        "GeneratedQuestions",
        __base__=GeneratedQuestions,
        questions=(
            list[Question],
            Field(min_length=n_questions, max_length=n_questions),
        ),
    )
