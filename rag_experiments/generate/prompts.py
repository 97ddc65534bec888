"""Versioned prompts of the dataset generator, each with the pydantic model the answer must fit.

Every prompt is a pair: the messages and the output model. The output models bound their
string lengths, which grammar-constrained backends (the embedded llama.cpp model) enforce while
generating, so a small model cannot ramble past the token limit. Length *minimums* are not in
the models on purpose: a too-short question or answer is a filter reject with its own count
(:mod:`rag_experiments.generate.filters`), not a parse error.

Changing a prompt's wording changes what a resumed run would generate, so every change must
bump :data:`PROMPT_VERSION` (it is stored in the output's ``manifest.json`` and in every
sample's metadata, and a resume with another version is refused).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from rag_experiments.llm.base import Message
from rag_experiments.llm.parsing import StructuredOutput

PROMPT_VERSION = "gen-v1"
"""Version of every prompt in this module (bump on any wording change)."""

QUESTION_MAX_CHARS = 250
"""Upper bound on a generated question's length (characters)."""
ANSWER_MAX_CHARS = 600
"""Upper bound on a generated answer's length (characters)."""


class QAPair(StructuredOutput):
    """What the generator must return for an answerable question."""

    question: str = Field(max_length=QUESTION_MAX_CHARS)
    answer: str = Field(max_length=ANSWER_MAX_CHARS)


class UnanswerableQuestion(StructuredOutput):
    """What the generator must return for an unanswerable question."""

    question: str = Field(max_length=QUESTION_MAX_CHARS)


class AnswerCheck(StructuredOutput):
    """The judge's verdict: do the passages answer the question? (a JSON boolean)"""

    answered: bool


TYPE_GUIDES: dict[str, tuple[str, str]] = {
    "procedural": (
        "a question about the steps of a procedure: how something is done, in what order",
        "How",
    ),
    "compliance": (
        "a question about a rule or requirement: what must or must not be done",
        "What must",
    ),
    "role_responsibility": (
        "a question about who is responsible for something or does a task",
        "Who",
    ),
    "condition_trigger": (
        "a question about the condition or event that triggers an action",
        "When",
    ),
    "definition_concept": ("a question about what a term or concept means", "What is"),
    "exception_escalation": (
        "a question about an exception to a rule, or about to whom a problem is escalated",
        "What happens if",
    ),
    "timeline_sla": (
        "a question about a deadline, a time limit, a duration or a frequency",
        "How often",
    ),
    "multi_hop": ("a question that needs facts from BOTH passages to answer", "What"),
}
"""Per question type: (what the question asks about, the words it should open with). There
are no example pairs on purpose: a small model copies an example instead of reading the
passage (SmolLM2-135M did so for 23 of 24 chunks in a trial)."""

_QA_SYSTEM = (
    "You write one exam question and its answer about a passage of a document. The question "
    "must be answerable from the passage alone, must name its subject (never 'the text', 'the "
    "passage', 'the document' or 'this section'), and must not be a yes/no question. The answer "
    "is one or two complete sentences of at least 12 words that repeat the facts of the "
    'passage. Reply with JSON only: {"question": "...", "answer": "..."}.'
)

_UNANSWERABLE_SYSTEM = (
    "You write one question that a reader of a document would plausibly ask, on the same "
    "topic as a passage, but whose answer is NOT in the passage. It must name its subject "
    "(never 'the text' or 'the document') and must not be a yes/no question. Reply with JSON "
    'only: {"question": "..."}.'
)

_JUDGE_SYSTEM = (
    "You check whether passages answer a question. Reply with JSON only: "
    '{"answered": true} if the passages contain the answer to the question, '
    '{"answered": false} if they do not.'
)


def _passages(contexts: Sequence[str]) -> str:
    """Number passages ``[1] …`` (one per context) for a prompt."""
    return "\n\n".join(f"[{i}] {text}" for i, text in enumerate(contexts, start=1))


def qa_messages(question_type: str, contexts: Sequence[str]) -> list[Message]:
    """Messages asking for one question of ``question_type`` answered by ``contexts``.

    Args:
        question_type: A key of :data:`TYPE_GUIDES`.
        contexts: One passage, or two for ``multi_hop``.

    Returns:
        System and user messages; the reply must fit :class:`QAPair`.
    """
    what, opening = TYPE_GUIDES[question_type]
    several = len(contexts) > 1
    user = (
        f"Passage{'s' if several else ''}:\n{_passages(contexts)}\n\n"
        f"Write {what}, answered by {'both passages' if several else 'the passage'}. "
        f'Begin the question with "{opening}". Then write the answer: one or two sentences '
        f"with the facts from the passage{'s' if several else ''}."
    )
    return [{"role": "system", "content": _QA_SYSTEM}, {"role": "user", "content": user}]


def unanswerable_messages(question_type: str, context: str) -> list[Message]:
    """Messages asking for one question of ``question_type`` that ``context`` does not answer.

    Args:
        question_type: A key of :data:`TYPE_GUIDES`.
        context: A passage that sets the topic (the corpus's domain).

    Returns:
        System and user messages; the reply must fit :class:`UnanswerableQuestion`.
    """
    what, opening = TYPE_GUIDES[question_type]
    user = (
        f"Passage:\n{context}\n\n"
        f"Write {what}, on the topic of the passage, that the passage does NOT answer. "
        f'Begin the question with "{opening}".'
    )
    return [
        {"role": "system", "content": _UNANSWERABLE_SYSTEM},
        {"role": "user", "content": user},
    ]


def judge_messages(question: str, contexts: Sequence[str]) -> list[Message]:
    """Messages asking the judge whether ``contexts`` answer ``question``.

    Returns:
        System and user messages; the reply must fit :class:`AnswerCheck`.
    """
    user = f"Passages:\n{_passages(contexts)}\n\nQuestion: {question}\n\nDo the passages answer it?"
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]
