"""The claim layer shared by every claim metric: claims extracted once per text, each
(claim set, text) check made once per run, and the result reused by every metric that needs it.

Claim metrics (faithfulness-style, RAGChecker's diagnostics, RAGAS FactualCorrectness) all
read the same four label tables of a row (RAGChecker's names, ``ragchecker/container.py``):

* ``answer2response`` — each **response** claim: entailed by the **reference**? (precision);
* ``response2answer`` — each **reference** claim: entailed by the **response**? (recall);
* ``retrieved2response`` — each response claim × each retrieved chunk: entailed?;
* ``retrieved2answer`` — each reference claim × each retrieved chunk: entailed?.

They come from two kinds of operation, both memoised by :class:`ClaimLayer`:

* **extraction** of one text's claims (the response's, the reference's): one judge call
  (prompt :data:`~rag_experiments.metrics.prompts.claim_check.EXTRACT`), by a
  :class:`ClaimExtractor`;
* **checking** one claim set against texts, by a :class:`ClaimChecker`. The judge-backed
  :class:`JudgeClaimChecker` checks a claim set against all retrieved chunks in **one** call
  (verdicts per chunk: for each claim the numbers of the chunks that entail it), or with
  ``batch=False`` one call per chunk (for judges that mix up long numbered lists). A verifier
  backend (an NLI model scoring (premise, hypothesis) pairs) plugs in through
  :class:`VerifierClaimChecker`: any object with ``score(pairs) -> probabilities``.

**Cost.** Without the cache every metric extracts and checks for itself; with it a row costs
its distinct operations: 2 extractions + 2 single-text checks + 2 chunk checks = 6 judge calls
for the whole RAGChecker family (11 values), however many metrics read them. Metrics built on
the same judge share one layer (:meth:`ClaimLayer.shared`); concurrent requests for the same
operation wait for the first (one call, never two). The first metric to ask pays the calls
in its audit record (``judge_calls``); the others record 0 and ``cached: true``.

Repeats (``judge.repeats > 1``) are not separated by this memo: each repeat reuses repeat 0's
labels (use ``claim_cache: false`` on the entries to judge each repeat anew).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.claims import claim_key
from rag_experiments.metrics.judge import InvalidVerdictError, Judgement, ask_judge
from rag_experiments.metrics.prompts import claim_check as prompts
from rag_experiments.metrics.prompts.base import format_contexts
from rag_experiments.text.normalize import word_tokens
from rag_experiments.text.sentences import split_sentences


@dataclass
class Usage:
    """Judge usage of one layer operation, as the caller that paid for it sees it.

    Attributes:
        calls: Judge calls made (0 when served by the memo).
        prompt_tokens: Prompt tokens of those calls.
        completion_tokens: Completion tokens of those calls.
        judgements: Audit dicts of the judgements made (raw replies, errors).
    """

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    judgements: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: Usage) -> None:
        """Add ``other``'s counters and judgements to this one."""
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.judgements.extend(other.judgements)

    @classmethod
    def of(cls, judgements: Sequence[Judgement]) -> Usage:
        """The usage of ``judgements``."""
        return cls(
            sum(j.calls for j in judgements),
            sum(j.prompt_tokens for j in judgements),
            sum(j.completion_tokens for j in judgements),
            [j.to_dict() for j in judgements],
        )


@dataclass(frozen=True)
class Extracted:
    """One text's claims.

    Attributes:
        claims: Distinct claims (normalised text, :func:`~rag_experiments.metrics.claims.
            claim_key`), first-seen order; ``()`` for none.
        error: The judge's failure reason (``parse_error``, ``timeout`` …), else None.
    """

    claims: tuple[str, ...]
    error: str | None = None


@dataclass(frozen=True)
class Checked:
    """One claim set checked against texts.

    Attributes:
        entailed: ``entailed[i][j]``: claim ``i`` is entailed by text ``j``; shape
            ``(n_claims, n_texts)``.
        error: The failure reason, else None (then ``entailed`` is empty).
    """

    entailed: tuple[tuple[bool, ...], ...]
    error: str | None = None


@runtime_checkable
class ClaimChecker(Protocol):
    """Checks claims against texts (premises).

    Attributes:
        batch: True when one :meth:`check` call over several texts is cheaper than one per
            text (the layer then checks all retrieved chunks at once).
    """

    batch: bool

    def check(
        self, claims: Sequence[str], texts: Sequence[str], question: str = ""
    ) -> tuple[Checked, Usage]:
        """Whether each claim is entailed by each text.

        Args:
            claims: The claims (hypotheses), at least one.
            texts: The premises, at least one.
            question: The question the texts answer (context for a judge; may be ignored).

        Returns:
            ``(Checked, Usage)``: an ``(len(claims), len(texts))`` table, or an error reason.
        """
        ...


class PairScorer(Protocol):
    """A verifier backend: entailment probabilities of (premise, hypothesis) pairs."""

    def score(self, pairs: Sequence[tuple[str, str]]) -> Sequence[float]:
        """One probability in [0, 1] per pair, in order."""
        ...


class VerifierClaimChecker:
    """A :class:`ClaimChecker` over a verifier backend: every (text, claim) pair scored in one
    batched ``score`` call; entailed when the probability ≥ ``threshold``.

    Args:
        verifier: Anything with ``score(pairs of (premise, hypothesis)) -> probabilities``.
        threshold: Probability at or above which a claim counts as entailed.
    """

    batch = True

    def __init__(self, verifier: PairScorer, threshold: float = 0.5) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"verifier threshold must be in [0, 1], got {threshold}")
        self.verifier = verifier
        self.threshold = float(threshold)

    def check(
        self, claims: Sequence[str], texts: Sequence[str], question: str = ""
    ) -> tuple[Checked, Usage]:
        """See :meth:`ClaimChecker.check` (``question`` is not used; no judge calls)."""
        pairs = [(t, c) for c in claims for t in texts]
        probs = list(self.verifier.score(pairs))
        n = len(texts)
        table = tuple(
            tuple(probs[i * n + j] >= self.threshold for j in range(n)) for i in range(len(claims))
        )
        return Checked(table), Usage()


class JudgeClaimChecker:
    """A :class:`ClaimChecker` asking the judge (prompt
    :data:`~rag_experiments.metrics.prompts.claim_check.CHECK`): for each claim, the numbers
    of the passages that entail it.

    Args:
        judge: The judge chat model.
        batch: All texts in one call (True) or one call per text.
        max_retries: Retries of an invalid output.
        max_tokens: Completion limit per call.
    """

    def __init__(
        self, judge: ChatModel, batch: bool = True, max_retries: int = 1, max_tokens: int = 256
    ) -> None:
        self.judge = judge
        self.batch = bool(batch)
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)

    def check(
        self, claims: Sequence[str], texts: Sequence[str], question: str = ""
    ) -> tuple[Checked, Usage]:
        """See :meth:`ClaimChecker.check`: one judge call per text group (all texts with
        ``batch``, else each text alone)."""
        groups = [list(texts)] if self.batch else [[t] for t in texts]
        columns: list[list[list[bool]]] = []
        judgements = []
        for group in groups:
            schema = prompts.support_model(len(claims), len(group))
            judgement = ask_judge(
                self.judge,
                prompts.CHECK.messages(
                    passages=format_contexts(group),
                    claims=prompts.numbered(list(claims)),
                    n=str(len(group)),
                    n_claims=str(len(claims)),
                ),
                schema,
                prompt_id=prompts.CHECK.id,
                check=_unique_numbers,
                max_retries=self.max_retries,
                options={"max_tokens": self.max_tokens},
            )
            judgements.append(judgement)
            if judgement.parsed is None:
                return Checked((), judgement.error or "judge_error"), Usage.of(judgements)
            lists = judgement.parsed.entailed_by  # type: ignore[attr-defined]
            columns.append([[j + 1 in set(row) for j in range(len(group))] for row in lists])
        table = tuple(tuple(v for part in columns for v in part[i]) for i in range(len(claims)))
        return Checked(table), Usage.of(judgements)


def _unique_numbers(parsed: Any) -> None:
    """Reject a claim's passage list naming one passage twice (a looping judge)."""
    for row in parsed.entailed_by:
        if len(set(row)) != len(row):
            raise InvalidVerdictError(f"a passage is named twice in {row}", reason="parse_error")


class ClaimExtractor(Protocol):
    """Splits a text into claims."""

    def extract(self, text: str, question: str = "") -> tuple[Extracted, Usage]:
        """The text's distinct claims (``()`` for none) and what it cost."""
        ...


class JudgeClaimExtractor:
    """A :class:`ClaimExtractor` asking the judge (prompt
    :data:`~rag_experiments.metrics.prompts.claim_check.EXTRACT`), one call per text.

    Args:
        judge: The judge chat model.
        max_retries: Retries of an invalid output.
        max_tokens: Completion limit per call.
    """

    def __init__(self, judge: ChatModel, max_retries: int = 1, max_tokens: int = 320) -> None:
        self.judge = judge
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)

    def extract(self, text: str, question: str = "") -> tuple[Extracted, Usage]:
        """See :meth:`ClaimExtractor.extract`; claims repeated (same normalised text) or blank
        are kept once / dropped."""
        judgement = ask_judge(
            self.judge,
            prompts.EXTRACT.messages(
                text=text.strip(), question=question, max_claims=str(prompts.MAX_CLAIMS)
            ),
            prompts.ClaimList,
            prompt_id=prompts.EXTRACT.id,
            max_retries=self.max_retries,
            options={"max_tokens": self.max_tokens},
        )
        if judgement.parsed is None:
            return Extracted((), judgement.error or "judge_error"), Usage.of([judgement])
        seen: dict[str, str] = {}
        for claim in judgement.parsed.claims:  # type: ignore[attr-defined]
            claim = claim.strip()[: prompts.CLAIM_CHARS]
            if claim:
                seen.setdefault(claim_key(claim), claim)
        return Extracted(tuple(seen.values())), Usage.of([judgement])


class _Memo:
    """Thread-safe memo: the first caller of a key computes, concurrent callers wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: dict[Hashable, Future[Any]] = {}

    def get(self, key: Hashable, compute: Callable[[], tuple[Any, Usage]]) -> tuple[Any, Usage]:
        """``compute()``'s value for ``key``: with its usage for the caller that computed it,
        with an empty usage for every later caller."""
        with self._lock:
            future = self._done.get(key)
            owner = future is None
            if owner:
                future = self._done[key] = Future()
        assert future is not None
        if not owner:
            return future.result(), Usage()
        try:
            value, usage = compute()
        except BaseException as exc:
            with self._lock:  # let a later caller try again
                self._done.pop(key, None)
            future.set_exception(exc)
            raise
        future.set_result(value)
        return value, usage


class ClaimLayer:
    """Extraction and checks of claims, memoised for a run (module docstring).

    Args:
        extractor: Splits texts into claims.
        checker: Checks claim sets against texts.
        cache: Memoise (False: every request asks again; for measuring what the cache saves).
    """

    _shared: weakref.WeakKeyDictionary[Any, dict[Hashable, ClaimLayer]] = (
        weakref.WeakKeyDictionary()
    )
    _shared_lock = threading.Lock()

    def __init__(
        self, extractor: ClaimExtractor, checker: ClaimChecker, cache: bool = True
    ) -> None:
        self.extractor = extractor
        self.checker = checker
        self.cache = bool(cache)
        self._extracted = _Memo()
        self._checked = _Memo()

    @classmethod
    def shared(
        cls,
        judge: ChatModel,
        batch: bool = True,
        max_retries: int = 1,
        verifier: PairScorer | None = None,
        threshold: float = 0.5,
    ) -> ClaimLayer:
        """The one layer of ``judge`` (built at the first request, then reused by every metric
        on that judge and settings for as long as the judge lives). With ``verifier``, the
        judge extracts and the verifier checks (:class:`VerifierClaimChecker` at
        ``threshold``); layers with and without a verifier are kept apart."""
        with cls._shared_lock:
            layers = cls._shared.setdefault(judge, {})
            key = (bool(batch), int(max_retries), id(verifier) if verifier else None, threshold)
            if key not in layers:
                checker: ClaimChecker = (
                    VerifierClaimChecker(verifier, threshold)
                    if verifier is not None
                    else JudgeClaimChecker(judge, batch=batch, max_retries=max_retries)
                )
                layers[key] = cls(JudgeClaimExtractor(judge, max_retries), checker)
            return layers[key]

    def claims(self, text: str, question: str = "") -> tuple[Extracted, Usage]:
        """The claims of ``text`` (extracted once per text and question)."""
        compute = lambda: self.extractor.extract(text, question)  # noqa: E731
        if not self.cache:
            return compute()
        return self._extracted.get((text.strip(), question), compute)

    def check(
        self, claims: Sequence[str], texts: Sequence[str], question: str = ""
    ) -> tuple[Checked, Usage]:
        """``claims`` × ``texts`` entailment (module docstring); ``()`` rows for no claims and
        empty rows for no texts, without a call. A checker with ``batch`` gets all texts in one
        request, else one request per text (each memoised alone)."""
        claims, texts = tuple(claims), tuple(texts)
        if not claims or not texts:
            return Checked(tuple(() for _ in claims)), Usage()
        if self.checker.batch:
            return self._one(claims, texts, question)
        usage, columns = Usage(), []
        for text in texts:
            checked, used = self._one(claims, (text,), question)
            usage.add(used)
            if checked.error is not None:
                return checked, usage
            columns.append(checked.entailed)
        table = tuple(tuple(col[i][0] for col in columns) for i in range(len(claims)))
        return Checked(table), usage

    def _one(
        self, claims: tuple[str, ...], texts: tuple[str, ...], question: str
    ) -> tuple[Checked, Usage]:
        compute = lambda: self.checker.check(claims, texts, question)  # noqa: E731
        if not self.cache:
            return compute()
        return self._checked.get((claims, texts, question), compute)


def _content_words(text: str) -> set[str]:
    """The normalised word tokens of ``text`` of 3 or more characters."""
    return {w for w in word_tokens(text) if len(w) >= 3}


class SentenceClaimExtractor:
    """An offline :class:`ClaimExtractor`: each sentence of the text
    (:func:`~rag_experiments.text.sentences.split_sentences`) is a claim. No model call: for
    dry runs and demonstrations of the diagnostics, not a judge."""

    def extract(self, text: str, question: str = "") -> tuple[Extracted, Usage]:
        """See :meth:`ClaimExtractor.extract`."""
        seen: dict[str, str] = {}
        for sentence in split_sentences(text.strip()):
            if sentence.strip():
                seen.setdefault(claim_key(sentence), sentence.strip())
        return Extracted(tuple(seen.values())[: prompts.MAX_CLAIMS]), Usage()


class LexicalClaimChecker:
    """An offline :class:`ClaimChecker`: a claim is entailed by a text when at least
    ``min_overlap`` of its content words (normalised tokens of ≥ 3 characters) occur in the text.
    No model call; a word-overlap stand-in for a judge, for dry runs and demonstrations.

    Args:
        min_overlap: Share in (0, 1] of the claim's content words the text must hold.
    """

    batch = True

    def __init__(self, min_overlap: float = 0.8) -> None:
        if not 0.0 < min_overlap <= 1.0:
            raise ConfigError(f"lexical checker: min_overlap must be in (0, 1], got {min_overlap}")
        self.min_overlap = float(min_overlap)

    def check(
        self, claims: Sequence[str], texts: Sequence[str], question: str = ""
    ) -> tuple[Checked, Usage]:
        """See :meth:`ClaimChecker.check`."""
        words = [_content_words(t) for t in texts]
        table = []
        for claim in claims:
            need = _content_words(claim)
            table.append(
                tuple(bool(need) and len(need & w) / len(need) >= self.min_overlap for w in words)
            )
        return Checked(tuple(table)), Usage()
