"""A deterministic fake chat model: a first-class component for tests and dry runs.

It makes no model call. Without a schema it answers with the first sentence of the first
numbered context in the last user message (or ``"I don't know."`` when there is none); with a
schema it returns ``responses[schema.__name__]`` (a dict or a JSON string) from its script;
with ``fit_lengths`` (as ``judge=fake`` has it), each list the schema wants of an exact length
(one verdict per context judged) cycled or cut to it (:func:`fit_list_lengths`). Every call is
counted in :attr:`calls`.

**Extractive mode** (``extractive=True``, ``llm=fake llm.extractive=true``): a schema without a
scripted response that has ``question`` and ``answer`` fields (the dataset generator's
``QAPair``) is answered from the passages of the prompt, so a dry run of ``rag-exp generate``
or of the review app yields pairs that pass the generator's filters on any document. The
passages are the numbered ``[1] …``, ``[2] …`` blocks (or the text after ``Passage:``); the
prompt's last paragraph is the instruction and is ignored. The answer is one sentence of at
least 12 words per passage, picked by a hash of the prompt; the question names three long
words of it ("What does the guidance say about retention, records and archive?"). A schema
with only a ``question`` field (``UnanswerableQuestion``) gets a question that joins the
passage's words to a topic it does not cover ("Which budget pays for … on overseas
secondments?"); the judge still decides. Deterministic: the same prompt gives the same reply.

**Noisy rows** (``noisy_marker``, ``noisy_responses``; to show judge noise, ``judge.repeats``):
a structured call whose messages contain ``noisy_marker`` and whose schema has an entry in
``noisy_responses`` flips a coin seeded by the call's ``seed`` option (0 when absent):
``random.Random(seed).random() < 0.5`` answers with ``noisy_responses[schema]``, otherwise
with the usual script. Every other call is unchanged, so the rows whose text holds the marker
are the known noisy subset and the coin of each repeat's seed can be computed by hand.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
import time
from typing import Any

from annotated_types import MaxLen, MinLen
from pydantic import BaseModel

from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.base import ChatModelBase, Completion, Message, Usage
from rag_experiments.llm.parsing import parse_structured
from rag_experiments.text.sentences import split_sentences

_FIRST_PASSAGE = re.compile(r"\[1\][^\S\n]*([^\n]*)")
_NUMBERED = re.compile(r"(?:^|\n\n)\[\d+\]\s*")
_LONG_WORD = re.compile(r"[^\W\d_][\w-]{3,}")
_MIN_ANSWER_WORDS = 12
_SKIP_WORDS = frozenset(
    "that this with from have will must shall which their there these those been into when "
    "where what each also such than then they them only other more most some after before "
    "under over within about should would could does".split()
)


class FakeChat(ChatModelBase):
    """Deterministic chat model.

    Args:
        responses: Scripted structured outputs keyed by the schema's class name.
        text: A fixed reply for unstructured calls (None = first sentence of context [1]).
        delay_s: Sleep per call (to exercise timeouts).
        jitter_s: Extra sleep per call in ``[0, jitter_s)``, fixed by a hash of the messages
            (so concurrent calls finish out of order, the same way on every run).
        max_concurrency: Calls it takes at once (declared for the schedulers; it is
            thread-safe at any number).
        model: Model id reported in :meth:`describe`.
        extractive: Answer unscripted question schemas from the prompt's passages (see the
            module docstring) instead of raising.
        fit_lengths: Cut or cycle each scripted list to the exact length the schema declares
            (:func:`fit_list_lengths`; ``judge=fake`` sets it, so it gives one verdict per
            context at any ``top_k``); False = the script verbatim (a test's wrong judge).
        noisy_marker: Text marking the noisy rows (see the module docstring); None = none.
        noisy_responses: The other side of the noisy rows' coin, keyed like ``responses``.
    """

    provider = "fake"
    cacheable = False
    """The response cache skips this model: it costs nothing, and tests count its calls."""
    scripted = True
    """Its answers come from its script (the review page's dry run makes it extractive)."""

    def __init__(
        self,
        responses: dict[str, Any] | None = None,
        text: str | None = None,
        delay_s: float = 0.0,
        model: str = "fake-chat",
        extractive: bool = False,
        jitter_s: float = 0.0,
        max_concurrency: int = 4,
        fit_lengths: bool = False,
        noisy_marker: str | None = None,
        noisy_responses: dict[str, Any] | None = None,
    ) -> None:
        if int(max_concurrency) < 1 or delay_s < 0 or jitter_s < 0:
            raise ConfigError(
                f"fake model: max_concurrency must be >= 1 and delays >= 0, got "
                f"{max_concurrency}, {delay_s}, {jitter_s}"
            )
        self.responses = dict(responses or {})
        self.text = text
        self.delay_s = delay_s
        self.jitter_s = jitter_s
        self.max_concurrency = int(max_concurrency)
        self.model = model
        self.extractive = extractive
        self.fit_lengths = bool(fit_lengths)
        self.noisy_marker = noisy_marker or None
        self.noisy_responses = dict(noisy_responses or {})
        self.calls = 0
        self._lock = threading.Lock()

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        """Answer deterministically; see the module docstring.

        Raises:
            LLMError: ``schema`` given but no scripted response for it (and, in extractive
                mode, no ``question`` field).
        """
        with self._lock:
            self.calls += 1
        if self.delay_s or self.jitter_s:
            time.sleep(self.delay_s + self.jitter_s * _unit_hash(messages))
        prompt = messages[-1]["content"] if messages else ""
        if schema is None:
            if self.text is not None:
                text = self.text
            else:
                m = _FIRST_PASSAGE.search(prompt)
                first = split_sentences(m.group(1)) if m else []
                text = first[0] if first else "I don't know."
            return Completion(
                text=text, usage=Usage(len(prompt.split()), len(text.split())), model=self.model
            )
        scripted = self.responses.get(schema.__name__)
        if (
            self._noisy(messages, schema)
            and random.Random(int(options.get("seed", 0))).random() < 0.5
        ):
            scripted = self.noisy_responses[schema.__name__]
        if scripted is None and self.extractive and "question" in schema.model_fields:
            scripted = _extractive_reply(prompt, "answer" in schema.model_fields)
        if scripted is None:
            raise LLMError(
                f"FakeChat has no scripted response for {schema.__name__}", reason="parse_error"
            )
        if self.fit_lengths and isinstance(scripted, dict):
            scripted = fit_list_lengths(scripted, schema)
        text = scripted if isinstance(scripted, str) else json.dumps(scripted)
        return Completion(
            text=text,
            parsed=parse_structured(text, schema),
            usage=Usage(len(prompt.split()), len(text.split())),
            model=self.model,
        )

    def _noisy(self, messages: list[Message], schema: type[BaseModel]) -> bool:
        """Whether this call is a noisy row's (its messages hold :attr:`noisy_marker` and the
        schema has a noisy response)."""
        if self.noisy_marker is None or schema.__name__ not in self.noisy_responses:
            return False
        return any(self.noisy_marker in str(m.get("content", "")) for m in messages)

    def describe(self) -> dict[str, str]:
        """Provider, model id and ``digest``: a hash of the script (responses and text)."""
        script_data: dict[str, Any] = {"responses": self.responses, "text": self.text}
        if self.noisy_marker is not None:  # only then, so other fakes' digests stay as they were
            script_data["noisy"] = [self.noisy_marker, self.noisy_responses]
        if self.extractive:  # only then, so the digest of a scripted fake stays as it was
            script_data["extractive"] = True
        if self.fit_lengths:  # likewise
            script_data["fit_lengths"] = True
        script = json.dumps(script_data, sort_keys=True, default=str)
        digest = hashlib.sha256(script.encode("utf-8")).hexdigest()[:16]
        return {"provider": self.provider, "model": self.model, "digest": digest}


def fit_list_lengths(scripted: dict[str, Any], schema: type[BaseModel]) -> dict[str, Any]:
    """The scripted reply with each list field cut or cycled to the exact length ``schema``
    declares for it (``Field(min_length=n, max_length=n)``, e.g. one verdict per context
    judged: ``["yes", "no"]`` for 3 contexts → ``["yes", "no", "yes"]``); other fields as
    scripted.

    Args:
        scripted: A scripted structured reply (field → value).
        schema: The output model asked for.

    Returns:
        A new dict (``scripted`` itself is not changed).
    """
    out = dict(scripted)
    for name, info in schema.model_fields.items():
        value = out.get(name)
        if not isinstance(value, list) or not value:
            continue
        lows = {m.min_length for m in info.metadata if isinstance(m, MinLen)}
        highs = {m.max_length for m in info.metadata if isinstance(m, MaxLen)}
        if len(lows) != 1 or lows != highs:
            continue
        n = lows.pop()
        out[name] = [value[i % len(value)] for i in range(n)]
    return out


def _unit_hash(messages: list[Message]) -> float:
    """A number in [0, 1) fixed by the messages (SHA-256 of their JSON)."""
    blob = json.dumps(messages, sort_keys=True).encode("utf-8")
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") / 2**64


def _passages(prompt: str) -> list[str]:
    """The passages of a generator prompt: the numbered ``[n]`` blocks, or the text after
    ``Passage:``; the last paragraph (the instruction) is dropped."""
    body = prompt.rsplit("\n\n", 1)[0] if "\n\n" in prompt else prompt
    body = re.sub(r"^\s*Passages?:\s*", "", body)
    return [part.strip() for part in _NUMBERED.split(body) if part.strip()]


def _answer_sentence(passage: str, pick: int) -> str:
    """A sentence of at least 12 words of ``passage`` (the ``pick``-th modulo their number),
    or the passage's first 30 words when no sentence is that long."""
    sentences = [" ".join(s.split()) for line in passage.split("\n") for s in split_sentences(line)]
    long_enough = [s for s in sentences if len(s.split()) >= _MIN_ANSWER_WORDS]
    if long_enough:
        return long_enough[pick % len(long_enough)]
    return " ".join(passage.split()[:30])


def _extractive_reply(prompt: str, with_answer: bool) -> dict[str, str]:
    """The extractive-mode reply for a generator prompt (see the module docstring)."""
    pick = int(hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:8], 16)
    passages = _passages(prompt) or [prompt]
    answer = " ".join(_answer_sentence(p, pick) for p in passages[:2])[:600].strip()
    words = list(
        dict.fromkeys(w for w in _LONG_WORD.findall(answer) if w.lower() not in _SKIP_WORDS)
    )
    start = pick % max(1, len(words) - 2)
    named = words[start : start + 3] or ["it"]
    subject = ", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]
    if not with_answer:
        return {"question": f"Which budget pays for {subject} on overseas secondments?"}
    return {"question": f"What does the guidance say about {subject}?", "answer": answer}
