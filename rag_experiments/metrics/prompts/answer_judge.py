"""Answer judge prompt (one call): accuracy, completeness and relevance on 1-5 against the
reference, with one sentence of feedback. The rubric is the seed tutorial's: a wrong answer
gets accuracy 1, and 5 only when perfect."""

from __future__ import annotations

from pydantic import Field

from rag_experiments.llm.parsing import StructuredOutput, strict_choice
from rag_experiments.metrics.prompts.base import JudgePrompt

FEEDBACK_CHARS = 300
"""Longest feedback accepted (characters)."""

Grade = strict_choice(1, 2, 3, 4, 5)
"""A 1-5 integer score (an enum in the JSON schema: a grammar-constrained model cannot write 6;
``true``, ``5.0`` or ``"5"`` is a parse error)."""

PROMPT = JudgePrompt(
    name="answer_judge",
    version="v1",
    template=(
        "Question: {question}\n"
        "Reference answer: {reference}\n"
        "Answer: {answer}\n\n"
        "Task: grade the Answer against the Reference answer, each score from 1 to 5.\n"
        "- accuracy: 1 = wrong or contradicts the reference; 3 = partly correct; 5 = fully "
        "correct with nothing wrong.\n"
        "- completeness: 1 = covers none of the reference; 5 = covers all of it.\n"
        "- relevance: 1 = does not address the question; 5 = addresses exactly the question.\n"
        'Give 5 only when perfect. "feedback": one short sentence saying why.\n'
        'JSON: {{"accuracy": <1-5>, "completeness": <1-5>, "relevance": <1-5>, "feedback": "..."}}'
    ),
)


class AnswerGrades(StructuredOutput):
    """What the judge returns: three 1-5 scores and feedback (strict types)."""

    accuracy: Grade
    completeness: Grade
    relevance: Grade
    feedback: str = Field(default="", max_length=FEEDBACK_CHARS)
