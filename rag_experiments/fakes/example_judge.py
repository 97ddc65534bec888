"""A fake judge that reads few-shot examples: it copies the grade of the most similar example.

:class:`ExampleCopyingChat` is :class:`~rag_experiments.llm.fake.FakeChat` (same keys, same
script) with one rule added, to show that ``rag-exp align`` measures what examples change:

* a structured call whose prompt holds an examples block
  (:data:`~rag_experiments.metrics.fewshot.BLOCK_TITLE`, as a judged metric with ``examples``
  asks) is answered with the grade of the example most similar to the item graded: each is
  read as its ``Answer:`` line plus the first 300 characters of its passage ``[1]`` (what
  the grade is about: the answer and its evidence), and similarity is the Jaccard index of
  their sets of lower-cased words of four letters or more, ``|A ∩ B| / |A ∪ B|``, ties to
  the first example. The example's value ``v`` ∈ [0, 1] (its
  ``Human grade: … (v on a 0-1 scale)`` line) becomes the reply of the asked schema:
  ``FaithfulnessOutput`` one claim, supported by passage 1 when ``v ≥ 0.5`` else by none
  (faithfulness 1 or 0); ``RubricGrade`` the grade ``low + round(v · (high − low))`` of the
  schema's grades; ``AnswerGrades`` ``1 + round(4v)`` for each criterion; ``ContextVerdicts``
  ``yes``/``no`` for each context;
* every other call (no examples, another schema, an example without a value) is the script's,
  as FakeChat answers it (``judge=fake``: a constant judge).

So its errors follow a pattern examples can fix: with people's grades of answers like the
ones judged, it grades as they did. Deterministic. Use it as ``judge=fake
judge._target_=rag_experiments.fakes.example_judge.ExampleCopyingChat``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from rag_experiments.llm.base import Completion, Message, Usage
from rag_experiments.llm.fake import FakeChat, fit_list_lengths
from rag_experiments.llm.parsing import parse_structured
from rag_experiments.metrics.fewshot import BLOCK_TITLE, GRADE_MARK, TASK_MARK

_WORD = re.compile(r"[^\W\d_]{4,}")
_VALUE = re.compile(r"\(([0-9.]+) on a 0-1 scale\)")
_EXAMPLE = re.compile(r"\n\nExample \d+:\n")
_FIRST = re.compile(r"\[1\] (.{0,300})", re.DOTALL)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def jaccard(a: str, b: str) -> float:
    """``|A ∩ B| / |A ∪ B|`` of the lower-cased word sets of ``a`` and ``b`` (0 when both are
    empty)."""
    wa, wb = _words(a), _words(b)
    return len(wa & wb) / len(wa | wb) if wa | wb else 0.0


def _answer_line(text: str) -> str | None:
    found = [line[len("Answer: ") :] for line in text.split("\n") if line.startswith("Answer: ")]
    return found[-1] if found else None


def _graded(text: str) -> str | None:
    """The answer line and the first 300 characters of passage [1] of a prompt part."""
    answer = _answer_line(text)
    if answer is None:
        return None
    first = _FIRST.search(text)
    return f"{answer} {first.group(1) if first else ''}"


def copied_value(prompt: str) -> float | None:
    """The value of the example most similar to the prompt's answer (see the module
    docstring), or None when the prompt has no examples block, no answer, or the chosen
    example no value."""
    head, title, rest = prompt.partition(BLOCK_TITLE)
    if not title:
        return None
    block = rest.rpartition(TASK_MARK)[0] if TASK_MARK in rest else rest
    answer = _graded(head)
    if answer is None:
        return None
    best, best_score = None, -1.0
    for example in _EXAMPLE.split(block)[1:]:
        shown = _graded(example)
        if shown is None:
            continue
        score = jaccard(answer, shown)
        if score > best_score:
            best, best_score = example, score
    if best is None:
        return None
    grade = [line for line in best.split("\n") if line.startswith(GRADE_MARK)]
    match = _VALUE.search(grade[0]) if grade else None
    return float(match.group(1)) if match else None


def reply_for(schema: type[BaseModel], value: float) -> dict[str, Any] | None:
    """The reply of ``schema`` that gives the value ``value`` (module docstring), or None for
    a schema it does not know."""
    name = schema.__name__
    if name == "FaithfulnessOutput":
        supported = 1 if value >= 0.5 else 0
        return {"claims": [{"claim": "As the most similar example.", "context": supported}]}
    if name == "RubricGrade":
        grades = sorted(schema.model_json_schema()["properties"]["grade"]["enum"])
        low, high = grades[0], grades[-1]
        return {
            "rationale": "As the most similar example.",
            "grade": low + round(value * (high - low)),
        }
    if name == "AnswerGrades":
        g = 1 + round(4 * value)
        return {"accuracy": g, "completeness": g, "relevance": g, "feedback": "As the example."}
    if name == "ContextVerdicts":
        return fit_list_lengths({"verdicts": ["yes" if value >= 0.5 else "no"]}, schema)
    return None


class ExampleCopyingChat(FakeChat):
    """:class:`~rag_experiments.llm.fake.FakeChat` that copies the most similar few-shot
    example's grade (module docstring); same constructor."""

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        """Copy the most similar example's grade when the prompt has examples, else answer as
        FakeChat does."""
        prompt = messages[-1]["content"] if messages else ""
        value = copied_value(prompt) if schema is not None else None
        reply = reply_for(schema, value) if schema is not None and value is not None else None
        if reply is None:
            return super().complete(messages, schema, **options)
        with self._lock:
            self.calls += 1
        text = json.dumps(reply)
        return Completion(
            text=text,
            parsed=parse_structured(text, schema),
            usage=Usage(len(prompt.split()), len(text.split())),
            model=self.model,
        )

    def describe(self) -> dict[str, str]:
        """FakeChat's identity, the digest marked as this fake's."""
        out = super().describe()
        out["digest"] = f"{out['digest'][:10]}-copy"
        return out
