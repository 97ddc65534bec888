"""Refusals: whether a response declines to answer, and refusal rates (no LLM).

A response is a **refusal** when its first sentence, lower-cased with curly apostrophes
straightened, matches one of :data:`DEFAULT_REFUSAL_PATTERNS` ("I don't know", "cannot
answer", "the context does not mention …", "no information", …) or a pattern added with
``patterns``. The first sentence is the text up to the first sentence end of
:func:`rag_experiments.text.sentences.sentence_ends` (``.``, ``!``, ``?`` and the other
Unicode terminals such as ``。！？``), then cut at the first ``:``, ``;`` or line break, at
most 300 characters. Only the first sentence counts, so "The form is AR-1; I don't know who
signs it" is an answer, not a refusal. The rule is deterministic and free (no judge call); the
baseline's prompt asks the generator to reply exactly "I don't know." when the passages lack
the answer.

Columns (names and directions in :mod:`~rag_experiments.metrics.definitions`):

- ``refusal`` = 1 when the response is a refusal, else 0 (every answered row);
- ``correct_refusal_rate``: per row the same 1/0, defined only for unanswerable samples
  (NaN ``answerable`` otherwise), so its mean is refusals / unanswerable samples;
- ``false_refusal_rate``: the same, defined only for answerable samples (NaN ``unanswerable``
  otherwise): refusals / answerable samples.

Every column is NaN with ``target_error`` when the target failed, ``no_response`` when no answer
was recorded. An empty response is not a
refusal (it is an empty answer, which other metrics flag).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition
from rag_experiments.protocols import MetricBase
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.text.sentences import split_sentences

DEFAULT_REFUSAL_PATTERNS: tuple[str, ...] = (
    r"\bi (?:do not|don't|dont|did not|didn't) know\b",
    (
        r"\b(?:can ?not|can't|could not|couldn't|unable to|not able to) "
        r"(?:answer|find|determine|tell|say|provide|help)\b"
    ),
    r"\b(?:no|not enough|insufficient) (?:relevant )?information\b",
    (
        r"\b(?:context|contexts|passages?|documents?|sources?|texts?) (?:do|does|did) not "
        r"(?:say|mention|contain|specify|provide|cover|include|state|answer)\b"
    ),
    r"\bnot (?:mentioned|stated|specified|covered|provided|found|given|included|available) in\b",
    r"\bi (?:am not|'m not) sure\b",
    r"^(?:sorry|unknown|n/a)\b",
)
"""Regular expressions (searched in the lower-cased first sentence) that mark a refusal."""

_FIRST_CLAUSE = re.compile(r"^[^:;\n]{0,300}")


def first_sentence(text: str) -> str:
    """The lower-cased first sentence of ``text`` (see the module docstring)."""
    norm = text.strip().lower().replace("\u2019", "'").replace("\u2018", "'")
    sentences = split_sentences(norm)
    m = _FIRST_CLAUSE.match(sentences[0] if sentences else "")
    return m.group(0) if m else ""


def compile_patterns(patterns: Sequence[str] | None = None) -> list[re.Pattern[str]]:
    """The default refusal patterns plus ``patterns``, compiled.

    Raises:
        ConfigError: A pattern is not a valid regular expression.
    """
    out = []
    for p in (*DEFAULT_REFUSAL_PATTERNS, *(patterns or ())):
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise ConfigError(
                f"refusal pattern {p!r} is not a valid regular expression: {exc}"
            ) from exc
    return out


def is_refusal(text: str, patterns: Sequence[re.Pattern[str]] | None = None) -> bool:
    """Whether ``text`` is a refusal (rule in the module docstring).

    Args:
        text: The response.
        patterns: Compiled patterns (None = :data:`DEFAULT_REFUSAL_PATTERNS`).

    Returns:
        True when a pattern matches the first sentence; False for an empty text.
    """
    head = first_sentence(text)
    if not head:
        return False
    return any(p.search(head) for p in (patterns if patterns is not None else _DEFAULT))


_DEFAULT = compile_patterns()


class Refusal(MetricBase):
    """Refusal flag per row and refusal rates over unanswerable / answerable samples.

    Args:
        patterns: Extra refusal patterns (regular expressions, searched in the lower-cased
            first sentence), added to :data:`DEFAULT_REFUSAL_PATTERNS`.
        prefix: Prefix of every column name.

    Raises:
        ConfigError: An invalid pattern.
    """

    name = "refusal"
    columns = ("refusal", "correct_refusal_rate", "false_refusal_rate")
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "refusal",
                False,
                0.0,
                1.0,
                "1 when the response refuses to answer (pattern match), else 0",
                "this project (documented refusal patterns)",
            ),
            MetricDefinition(
                "correct_refusal_rate",
                True,
                0.0,
                1.0,
                "share of unanswerable questions whose response is a refusal",
                "this project",
                key=130,
            ),
            MetricDefinition(
                "false_refusal_rate",
                False,
                0.0,
                1.0,
                "share of answerable questions whose response is a refusal",
                "this project",
                key=140,
            ),
        )
    )

    def __init__(self, patterns: Sequence[str] | None = None, prefix: str = "") -> None:
        self.patterns = compile_patterns(patterns)
        self.prefix = prefix

    def specs(self) -> list[MetricSpec]:
        """``refusal``, ``correct_refusal_rate``, ``false_refusal_rate`` (all in [0, 1])."""
        return [self.declaration.output(c).spec(self.prefix) for c in self.columns]

    def evaluate(
        self, samples: Sequence[Sample], responses: Sequence[RagResponse]
    ) -> list[dict[str, MetricValue]]:
        """Per-row flags; see the module docstring."""
        out = []
        for sample, resp in zip(samples, responses, strict=True):
            if resp.error is not None or resp.no_response:
                reason = "target_error" if resp.error is not None else "no_response"
                row = {c: MetricValue.nan(reason) for c in self.columns}
            else:
                flag = MetricValue(1.0 if is_refusal(resp.response, self.patterns) else 0.0)
                row = {
                    "refusal": flag,
                    "correct_refusal_rate": MetricValue.nan("answerable")
                    if sample.answerable
                    else flag,
                    "false_refusal_rate": flag
                    if sample.answerable
                    else MetricValue.nan("unanswerable"),
                }
            out.append({self.prefix + k: v for k, v in row.items()})
        return out
