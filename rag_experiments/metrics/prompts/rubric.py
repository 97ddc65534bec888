"""Rubric prompts built from a suite entry (no Python): criteria, optional evaluation steps,
a scale with one description per level, and the fields the judge reads.

The layout follows G-Eval (Liu, Iter, Xu, Wang, Xu, Zhu, "G-Eval: NLG Evaluation using GPT-4
with Better Human Alignment", EMNLP 2023): the task's criteria, then evaluation steps (written
by the user here, where G-Eval has the model write them once), then the item and a score on
the declared scale; the judge writes its rationale *before* its grade (``{"rationale", "grade"}``,
the chain of thought G-Eval asks for). G-Eval's probability-weighted score (the expectation
over the score tokens' probabilities) is not used: local servers do not all return token
probabilities, so the grade is the one the judge writes.

The prompt is versioned by content: its id is ``rubric.<name>-<first 8 hex of sha256 of the
template>`` (:attr:`Rubric.prompt`), so a changed criterion, step, level or field is another
prompt id in the judge audit and the judge-check identity, and another response-cache key
(the cache hashes the messages).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field, create_model

from rag_experiments.common.memo import memo
from rag_experiments.errors import ConfigError
from rag_experiments.llm.parsing import StructuredOutput, strict_choice
from rag_experiments.metrics.prompts.base import JudgePrompt

RATIONALE_CHARS = 400
"""Longest rationale accepted (characters)."""

FIELDS = ("question", "answer", "contexts", "reference")
"""Fields a rubric may read besides ``metadata.<field>`` (a dataset metadata field)."""

BINARY = {0: "no: the answer does not meet the criteria", 1: "yes: the answer meets the criteria"}
"""The levels of ``scale: binary``."""

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

_TITLES = {"question": "Question", "reference": "Reference answer", "answer": "Answer"}


def _close(key: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(choices)}"


def parse_scale(scale: Any, where: str) -> dict[int, str]:
    """The levels of a rubric's ``scale``.

    Args:
        scale: ``"binary"`` (levels 0 and 1, :data:`BINARY`) or a mapping of consecutive
            integer grades starting at 0 or 1 to their descriptions (at least two levels,
            ``{1: "…", 2: "…", 3: "…"}``).
        where: The config key, for messages.

    Returns:
        ``{grade: description}`` in grade order.

    Raises:
        ConfigError: Another string, a non-integer grade, a gap, a start other than 0 or 1,
            fewer than two levels, or a blank description.
    """
    if isinstance(scale, str):
        if scale.strip().lower() == "binary":
            return dict(BINARY)
        raise ConfigError(
            f"{where}: {scale!r} is not a scale: write binary, or one description per grade "
            "({1: '…', 2: '…', …})"
        )
    if not isinstance(scale, Mapping) or len(scale) < 2:
        raise ConfigError(f"{where}: give binary or at least two grades with a description each")
    levels: dict[int, str] = {}
    for grade, text in scale.items():
        try:
            g = int(str(grade))
        except ValueError:
            raise ConfigError(f"{where}.{grade}: a grade is an integer (0/1 or 1..N)") from None
        if not str(text or "").strip():
            raise ConfigError(f"{where}.{grade}: give the level a description")
        levels[g] = " ".join(str(text).split())
    grades = sorted(levels)
    if grades[0] not in (0, 1) or grades != list(range(grades[0], grades[0] + len(grades))):
        raise ConfigError(f"{where}: grades must be consecutive integers from 0 or 1, got {grades}")
    return {g: levels[g] for g in grades}


def parse_reads(reads: Any, where: str) -> tuple[str, ...]:
    """The fields a rubric reads: names of :data:`FIELDS` or ``metadata.<field>``, ``answer``
    always among them.

    Raises:
        ConfigError: An unknown name (with the closest one) or no ``answer``.
    """
    if isinstance(reads, str):
        reads = [reads]
    if not isinstance(reads, Sequence) or not reads:
        raise ConfigError(f"{where}: list the fields the judge reads, e.g. [question, answer]")
    out = []
    for name in map(str, reads):
        if name.startswith("metadata.") and _NAME.match(name.partition(".")[2]):
            out.append(name)
        elif name in FIELDS:
            out.append(name)
        else:
            raise ConfigError(
                f"{where}: {name!r} is not a field a rubric reads: {_close(name, FIELDS)} "
                "(or metadata.<field> for a dataset metadata field)"
            )
    if "answer" not in out:
        raise ConfigError(f"{where}: a rubric grades the answer: add answer to its fields")
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Rubric:
    """A rubric's content, checked (:func:`parse_scale`, :func:`parse_reads`).

    Attributes:
        name: Metric and column name (letters, digits, ``_``).
        criteria: What the answer is graded on.
        steps: Evaluation steps (G-Eval), in order; may be empty.
        levels: ``{grade: description}``.
        reads: Fields the judge reads (:data:`FIELDS`, ``metadata.<field>``).
    """

    name: str
    criteria: str
    steps: tuple[str, ...]
    levels: dict[int, str]
    reads: tuple[str, ...]

    @property
    def low(self) -> int:
        """Lowest grade (0 or 1)."""
        return min(self.levels)

    @property
    def high(self) -> int:
        """Highest grade."""
        return max(self.levels)

    @property
    def binary(self) -> bool:
        """The scale is 0/1."""
        return (self.low, self.high) == (0, 1)

    def normalise(self, grade: int) -> float:
        """``(grade − low) / (high − low)`` ∈ [0, 1]."""
        return (grade - self.low) / (self.high - self.low)

    @property
    def template(self) -> str:
        """The user message template (``str.format`` fields: the names of :attr:`reads`,
        ``metadata.x`` as ``metadata_x``); the rubric's own text is brace-escaped."""

        def esc(text: str) -> str:
            return text.replace("{", "{{").replace("}", "}}")

        parts = []
        if "contexts" in self.reads:
            parts.append("Context passages:\n\n{contexts}\n\n")
        item = []
        for name in (*[r for r in self.reads if r != "answer"], "answer"):  # the answer last
            if name == "contexts":
                continue
            if name.startswith("metadata."):
                field = name.partition(".")[2]
                item.append(f"{esc(field.replace('_', ' ').capitalize())}: {{metadata_{field}}}")
            else:
                item.append(f"{_TITLES[name]}: {{{name}}}")
        parts.append("\n".join(item) + "\n\n")
        parts.append(f"Criteria: {esc(' '.join(self.criteria.split()))}\n")
        if self.steps:
            steps = "\n".join(f"{i}. {esc(s)}" for i, s in enumerate(self.steps, start=1))
            parts.append(f"Evaluation steps:\n{steps}\n")
        scale = "\n".join(f"- {g}: {esc(d)}" for g, d in self.levels.items())
        parts.append(f"Grades:\n{scale}\n\n")
        parts.append(
            "Task: grade the Answer on the Criteria"
            + (", following the evaluation steps" if self.steps else "")
            + f', with one of the grades {self.low} to {self.high}. First write "rationale": '
            "one or two short sentences saying why, then the grade.\n"
            f'JSON: {{{{"rationale": "...", "grade": <{self.low}-{self.high}>}}}}'
        )
        return "".join(parts)

    @property
    def prompt(self) -> JudgePrompt:
        """The versioned prompt: name ``rubric.<name>``, version the template's hash."""
        digest = hashlib.sha256(self.template.encode("utf-8")).hexdigest()[:8]
        return JudgePrompt(name=f"rubric.{self.name}", version=digest, template=self.template)


def parse_rubric(
    name: Any, criteria: Any, steps: Any, scale: Any, reads: Any, where: str
) -> Rubric:
    """A checked :class:`Rubric` from a suite entry's values.

    Raises:
        ConfigError: A bad name, blank criteria, steps that are not a list of text, a bad
            scale or fields; the message names the key and the fix.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{where}.name: {name!r} is not a metric name (letters, digits and _, from a letter)"
        )
    if not isinstance(criteria, str) or not criteria.strip():
        raise ConfigError(f"{where}.criteria: say what the answer is graded on")
    if steps is None:
        steps = []
    if isinstance(steps, str) or not isinstance(steps, Sequence):
        raise ConfigError(f"{where}.steps: a list of evaluation steps, one text each")
    return Rubric(
        name=name,
        criteria=criteria.strip(),
        steps=tuple(" ".join(str(s).split()) for s in steps if str(s).strip()),
        levels=parse_scale(scale, f"{where}.scale"),
        reads=parse_reads(reads, f"{where}.reads"),
    )


class RubricGrade(StructuredOutput):
    """What the judge returns: its rationale, then one grade of the scale (strict types)."""

    rationale: str = Field(default="", max_length=RATIONALE_CHARS)
    grade: int


@memo(maxsize=64)
def output_model(low: int, high: int) -> type[RubricGrade]:
    """:class:`RubricGrade` with ``grade`` one of ``low..high`` (an enum in the JSON schema; a
    grammar-constrained model cannot write another; from any other model another grade is a
    parse error). The class keeps its name, so a scripted fake keyed ``RubricGrade`` answers
    every rubric."""
    return create_model(
        "RubricGrade",
        __base__=RubricGrade,
        grade=(strict_choice(*range(low, high + 1)), ...),
    )
