"""Validation and quality filters for generated question–answer pairs.

A filter is a plain function ``filter(pair) -> str | None``: it returns None to keep the pair,
or a short human-readable detail saying why it rejects it. The filter's *function name* is the
reject reason counted in the summary (``rejected/question_too_short``…). A pair is a mapping
with the keys ``question``, ``answer``, ``question_type``, ``answerable`` and ``contexts``
(the source passages; used by the two ``*_not_in_context`` filters).

Validation (the pair is well-formed):

- :func:`missing_keys` — every key present; question, type and (for answerable pairs) answer
  not blank;
- :func:`unknown_type` — the type is one of :data:`~rag_experiments.records.QUESTION_TYPES`;
- :func:`question_too_short` — the question has at least :data:`MIN_QUESTION_CHARS` characters;
- :func:`answer_too_short` — the answer has at least :data:`MIN_ANSWER_WORDS` words.

Quality (the pair is a good evaluation question):

- :func:`not_a_question` — a question mark, or an interrogative / imperative first word;
- :func:`too_few_content_words` — at least :data:`MIN_CONTENT_WORDS` words that are not stop
  words or generic ("What happens if", "What is a term or concept?" are rejected);
- :func:`document_reference` — no phrase that points at the document instead of naming the
  subject ("the text", "according to the passage", "this section" …), matched as whole words:
  "context" rejects, "contextual" does not;
- :func:`meta_question` — not about the document itself (its topic, title, author, summary);
- :func:`yes_no_question` — does not start with an auxiliary verb ("Is", "Does", "Can" …);
- :func:`answer_copies_question` — the answer is not a near-copy of the question (difflib
  ratio of the normalised texts >= :data:`COPY_RATIO`, or no answer word missing from the
  question);
- :func:`question_not_in_context` — at least :data:`MIN_GROUNDED_QUESTION_WORDS` content
  words of the question occur in the source passages (no vague "How is it done?");
- :func:`answer_not_in_context` — at least :data:`MIN_GROUNDED_SHARE` of the answer's content
  words occur in the source passages (a small model tends to copy the prompt's example or
  invent facts).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rag_experiments.records import QUESTION_TYPES
from rag_experiments.text.normalize import word_tokens

Pair = Mapping[str, Any]
Filter = Callable[[Pair], "str | None"]

MIN_QUESTION_CHARS = 15
"""Shortest accepted question, in characters (after stripping)."""
MIN_ANSWER_WORDS = 12
"""Shortest accepted answer, in whitespace-separated words."""
COPY_RATIO = 0.8
"""``difflib.SequenceMatcher`` ratio of normalised question and answer at or above which the
answer counts as a copy of the question."""
MIN_GROUNDED_SHARE = 0.6
"""Share of the answer's content words that must occur in the source passages."""
MIN_GROUNDED_QUESTION_WORDS = 2
"""Content words of a question that must occur in the source passages."""
MIN_CONTENT_WORDS = 2
"""Content words (not stop words, not generic words) a question must have."""

REQUIRED_KEYS: tuple[str, ...] = ("question", "answer", "question_type")

_WORD = re.compile(r"\w+")

_DOC_NOUNS = (
    r"text|texts|passage|passages|document|documents|excerpt|context(?!\s+of\b)|contexts|"
    r"section|paragraph|chunk|article|extract|snippet"
)
_DOCUMENT_REFERENCE = re.compile(
    r"\b(?:"
    rf"(?:the|this|these|that|given|provided|above|following)\s+(?:{_DOC_NOUNS})"
    r"|the\s+above"
    r"|according\s+to\s+(?:the|this)\b"
    r"|as\s+(?:mentioned|stated|described|discussed|noted|shown)\b"
    r"|mentioned\s+(?:above|earlier|before)"
    r"|the\s+author"
    r")\b",
    re.IGNORECASE,
)

_META_QUESTION = re.compile(
    r"\b(?:"
    r"what\s+(?:is|are)\s+(?:the\s+)?(?:main\s+|central\s+|key\s+)?"
    r"(?:topic|topics|theme|themes|subject|title|purpose|idea|ideas|point|points)\s+of\s+"
    r"(?:this|the)\s+(?:text|passage|document|section|chapter|article|guide|publication)"
    r"|what\s+is\s+(?:this|the)\s+(?:text|passage|document|section|chapter|article)\s+about"
    r"|summari[sz]e|summary\s+of"
    r"|who\s+(?:wrote|is\s+the\s+author|authored)"
    r"|(?:which|what)\s+(?:page|chapter|figure|table)\s+(?:number|is|does|contains)"
    r"|what\s+(?:question|questions)\s+(?:does|can|could|should)"
    r")\b",
    re.IGNORECASE,
)

_AUXILIARIES = frozenset(
    "is are was were am be do does did can could should would will shall may might must has "
    "have had isn't aren't wasn't weren't don't doesn't didn't can't cannot couldn't "
    "shouldn't wouldn't won't hasn't haven't hadn't".split()
)

_GENERIC_WORDS = frozenset(
    "happen happens happened done mean means meant term terms concept concepts thing things "
    "something answer answers question questions example examples".split()
)

_QUESTION_OPENERS = frozenset(
    "what which who whom whose when where why how describe explain list name identify outline "
    "give state".split()
)

_STOP_WORDS = frozenset(
    "a an the and or but of to in on at by for with from as is are was were be been being it "
    "its this that these those which who whom what when where why how there their they them "
    "he she his her we our you your i not no do does did has have had can could should would "
    "will shall may might must than then so such also any all each every other into about "
    "after before during if only own same too very just over under up out".split()
)


def normalize_for_match(text: str) -> str:
    """NFKC, case-folded word tokens (``\\w+``) joined by single spaces."""
    return " ".join(word_tokens(text))


def _question(pair: Pair) -> str:
    value = pair.get("question")
    return value.strip() if isinstance(value, str) else ""


def _answer(pair: Pair) -> str:
    value = pair.get("answer")
    return value.strip() if isinstance(value, str) else ""


# --- validation ------------------------------------------------------------------------------


def missing_keys(pair: Pair) -> str | None:
    """Reject a pair without every key of :data:`REQUIRED_KEYS`, or with a blank question or
    type, or (when ``answerable`` is not False) a blank answer."""
    absent = [key for key in REQUIRED_KEYS if key not in pair]
    blank = [
        key
        for key in REQUIRED_KEYS
        if key in pair
        and not (isinstance(pair[key], str) and pair[key].strip())
        and not (key == "answer" and pair.get("answerable") is False)
    ]
    if absent or blank:
        parts = [f"missing {', '.join(absent)}"] if absent else []
        parts += [f"blank {', '.join(blank)}"] if blank else []
        return "; ".join(parts)
    return None


def unknown_type(pair: Pair) -> str | None:
    """Reject a type outside :data:`~rag_experiments.records.QUESTION_TYPES`."""
    kind = pair.get("question_type")
    if kind not in QUESTION_TYPES:
        return f"type {kind!r} is not one of {', '.join(QUESTION_TYPES)}"
    return None


def question_too_short(pair: Pair) -> str | None:
    """Reject a question shorter than :data:`MIN_QUESTION_CHARS` characters."""
    length = len(_question(pair))
    if length < MIN_QUESTION_CHARS:
        return f"question has {length} characters (< {MIN_QUESTION_CHARS})"
    return None


def answer_too_short(pair: Pair) -> str | None:
    """Reject an answer with fewer than :data:`MIN_ANSWER_WORDS` words."""
    words = len(_answer(pair).split())
    if words < MIN_ANSWER_WORDS:
        return f"answer has {words} words (< {MIN_ANSWER_WORDS})"
    return None


# --- quality ---------------------------------------------------------------------------------


def not_a_question(pair: Pair) -> str | None:
    """Reject a "question" with no ``?`` that does not open with a question or request word
    (a heading copied as the question, a statement)."""
    question = _question(pair)
    words = _WORD.findall(question.lower())
    if "?" in question or (words and words[0] in _QUESTION_OPENERS):
        return None
    return "no question mark and no question word first"


def document_reference(pair: Pair) -> str | None:
    """Reject a question that refers to the document instead of naming its subject."""
    match = _DOCUMENT_REFERENCE.search(_question(pair))
    if match:
        return f"refers to the document: {match.group(0)!r}"
    return None


def meta_question(pair: Pair) -> str | None:
    """Reject a question about the document itself (topic, title, author, summary)."""
    match = _META_QUESTION.search(_question(pair))
    if match:
        return f"asks about the document itself: {match.group(0)!r}"
    return None


def yes_no_question(pair: Pair) -> str | None:
    """Reject a question that opens with an auxiliary verb (answerable with yes or no)."""
    first = _question(pair).split(maxsplit=1)
    word = first[0].lower().strip("\"'“‘(") if first else ""
    word = word.replace("’", "'")
    if word in _AUXILIARIES:
        return f"yes/no question (starts with {first[0]!r})"
    return None


def answer_copies_question(pair: Pair) -> str | None:
    """Reject an answer that is a near-copy of the question (see :data:`COPY_RATIO`), or adds
    no word the question does not already hold."""
    question = normalize_for_match(_question(pair))
    answer = normalize_for_match(_answer(pair))
    if not answer:
        return None
    ratio = difflib.SequenceMatcher(None, question, answer, autojunk=False).ratio()
    if ratio >= COPY_RATIO:
        return f"answer is a near-copy of the question (similarity {ratio:.2f})"
    if set(answer.split()) <= set(question.split()):
        return "every answer word is already in the question"
    return None


def too_few_content_words(pair: Pair) -> str | None:
    """Reject a question with fewer than :data:`MIN_CONTENT_WORDS` content words: words that
    are neither stop words nor generic (:data:`_GENERIC_WORDS`: "happens", "term", "concept"
    …). Catches cut-off or empty questions ("What happens if", "What is a term or concept?")
    also where there is no source passage to compare with (unanswerable questions)."""
    content = [
        w
        for w in normalize_for_match(_question(pair)).split()
        if w not in _STOP_WORDS and w not in _GENERIC_WORDS
    ]
    if len(content) < MIN_CONTENT_WORDS:
        return f"{len(content)} content word(s) (< {MIN_CONTENT_WORDS}): {' '.join(content)!r}"
    return None


def question_not_in_context(pair: Pair) -> str | None:
    """Reject a vague question: fewer than :data:`MIN_GROUNDED_QUESTION_WORDS` of its content
    words (normalised words minus :data:`_STOP_WORDS`) occur in the source passages ("How is
    it done?", "Who is responsible?"). A pair without contexts passes."""
    contexts = pair.get("contexts") or []
    if not contexts:
        return None
    source = set(normalize_for_match(" ".join(contexts)).split())
    content = {w for w in normalize_for_match(_question(pair)).split() if w not in _STOP_WORDS}
    found = len(content & source)
    if found < MIN_GROUNDED_QUESTION_WORDS:
        return (
            f"vague question: {found} of its content words are in the source passage "
            f"(< {MIN_GROUNDED_QUESTION_WORDS})"
        )
    return None


def answer_not_in_context(pair: Pair) -> str | None:
    """Reject an answer whose content words are mostly absent from the source passages.

    Content words are the answer's normalised words minus :data:`_STOP_WORDS`; the share found
    among the words of ``pair["contexts"]`` must be at least :data:`MIN_GROUNDED_SHARE`. A pair
    without contexts (or an answer without content words) passes.
    """
    contexts = pair.get("contexts") or []
    content = [w for w in normalize_for_match(_answer(pair)).split() if w not in _STOP_WORDS]
    if not contexts or not content:
        return None
    source = set(normalize_for_match(" ".join(contexts)).split())
    share = sum(w in source for w in content) / len(content)
    if share < MIN_GROUNDED_SHARE:
        return (
            f"only {share:.0%} of the answer's content words are in the source passage "
            f"(< {MIN_GROUNDED_SHARE:.0%})"
        )
    return None


VALIDATION_FILTERS: tuple[Filter, ...] = (
    missing_keys,
    unknown_type,
    question_too_short,
    answer_too_short,
)
QUALITY_FILTERS: tuple[Filter, ...] = (
    not_a_question,
    too_few_content_words,
    document_reference,
    meta_question,
    yes_no_question,
    answer_copies_question,
    question_not_in_context,
    answer_not_in_context,
)
QA_FILTERS: tuple[Filter, ...] = VALIDATION_FILTERS + QUALITY_FILTERS
"""Every filter an answerable pair must pass, in the order they run."""
UNANSWERABLE_FILTERS: tuple[Filter, ...] = (
    missing_keys,
    unknown_type,
    question_too_short,
    not_a_question,
    too_few_content_words,
    document_reference,
    meta_question,
    yes_no_question,
)
"""The filters that apply to a question without an answer."""

FILTER_NAMES: tuple[str, ...] = tuple(f.__name__ for f in QA_FILTERS)


def first_rejection(pair: Pair, filters: Sequence[Filter] = QA_FILTERS) -> tuple[str, str] | None:
    """Run ``filters`` in order and stop at the first that rejects.

    Args:
        pair: The candidate (see the module docstring for its keys).
        filters: The filters to run.

    Returns:
        ``(filter name, detail)`` of the first rejection, or None when every filter keeps it.
    """
    for check in filters:
        detail = check(pair)
        if detail is not None:
            return check.__name__, detail
    return None
