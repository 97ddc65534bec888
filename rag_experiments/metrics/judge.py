"""Asking the LLM judge: one place for retries on invalid output, call and token counting, and
the audit record of every judgement; and the base class of the custom backend's judged metrics
(the judge's config role is in :mod:`~rag_experiments.llm.roles`).

A judgement is one question to the judge. It costs one call, plus one more per retry: when the
output does not parse, or parses but does not fit the question (a verdict count that differs
from the context count, a context number out of range — :class:`InvalidVerdictError`), the
judge is asked again, up to ``max_retries`` times, with its own reply and what was wrong with
it appended to the conversation (so the retry is a different prompt: a response cache cannot
serve the same bad answer again). Any other judge failure (output cut by the token limit,
timeout, context overflow, …) is not retried here (the model layer retries what is
retryable) and ends the judgement with the error's ``reason``, which becomes the metric's NaN
reason for that row. A judgement never yields a misaligned or partial verdict list.

Add a metric: subclass :class:`JudgedMetric`, declare its outputs on the class
(``declaration``, a :class:`~rag_experiments.metrics.definitions.MetricDeclaration`), write its
prompt and output model (:class:`~rag_experiments.metrics.prompts.base.JudgePrompt`), implement
``_score`` (one row → values + audit) and add one entry to a ``conf/metrics`` suite. Nothing
else lists metrics: the class registers itself when its module is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.llm.base import ChatModel, Message
from rag_experiments.llm.parsing import LLMParseError, StructuredOutput, parse_structured
from rag_experiments.llm.reasoning import shorten
from rag_experiments.metrics.audit import RATIONALE_KEY, USAGE_KEYS
from rag_experiments.metrics.fewshot import ExampleSet, insert_block, load_examples
from rag_experiments.metrics.prompts.base import JudgePrompt
from rag_experiments.metrics.scheduler import JudgedRowMetric
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample

log = logging.getLogger(__name__)

RETRIED_REASONS = frozenset({"parse_error"})
"""Judge failures that are retried with feedback (``max_retries`` times). Not ``truncated``:
the same token limit would cut the retry too (raise the metric's ``max_tokens``)."""


class InvalidVerdictError(LLMParseError):
    """The judge's output parsed but does not fit the question (for example 3 verdicts for 4
    contexts, or a context number that does not exist). Reason ``parse_error``."""


@dataclass
class Judgement:
    """One question to the judge and its outcome.

    Attributes:
        prompt: Prompt id (``faithfulness-v1``).
        calls: Model calls made (1 + retries).
        prompt_tokens: Prompt tokens over all calls (as the model reports them).
        completion_tokens: Completion tokens over all calls.
        latency_ms: Wall time of all calls in milliseconds (of the answered ones; 0 when cached).
        raw: The raw text of every reply, in order.
        parsed: The validated output, or None when the judgement failed.
        error: The failure's reason (``parse_error``, ``truncated``, ``timeout`` …) or None.
        error_message: Its detail.
        picked: Which JSON object of a reply holding several was graded (``"picked candidate
            2 of 2"``, see :func:`~rag_experiments.llm.parsing.parse_structured`), else None.
        reasoning: A reasoning judge's thoughts behind its last reply, shortened
            (:func:`~rag_experiments.llm.reasoning.shorten`); ``""`` without any.
        reasoning_tokens: Of ``completion_tokens``, those spent reasoning.
    """

    prompt: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    raw: list[str] = field(default_factory=list)
    parsed: BaseModel | None = None
    error: str | None = None
    error_message: str | None = None
    picked: str | None = None
    reasoning: str = ""
    reasoning_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready audit record (the interpreted verdicts are in the metric's record)."""
        return {
            "prompt": self.prompt,
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_ms": round(self.latency_ms, 1),
            "raw": self.raw,
            "error": self.error,
            "error_message": self.error_message,
            **({"picked": self.picked} if self.picked else {}),
            **({"reasoning": self.reasoning} if self.reasoning else {}),
            **({"reasoning_tokens": self.reasoning_tokens} if self.reasoning_tokens else {}),
        }


def judge_usage(judgements: Sequence[Judgement]) -> dict[str, int]:
    """The audit's usage counters (:data:`~rag_experiments.metrics.audit.USAGE_KEYS`) summed
    over ``judgements``: ``judge_calls``, ``judge_prompt_tokens``, ``judge_completion_tokens``."""
    return {
        "judge_calls": sum(j.calls for j in judgements),
        "judge_prompt_tokens": sum(j.prompt_tokens for j in judgements),
        "judge_completion_tokens": sum(j.completion_tokens for j in judgements),
    }


def ask_judge(
    judge: ChatModel,
    messages: list[Message],
    schema: type[BaseModel],
    *,
    prompt_id: str,
    check: Callable[[Any], None] | None = None,
    max_retries: int = 1,
    options: Mapping[str, Any] | None = None,
) -> Judgement:
    """Ask ``judge`` for output of ``schema`` and validate it, retrying invalid output.

    Args:
        judge: The chat model.
        messages: The prompt's messages.
        schema: Pydantic model the output must match (handed to the model, which constrains or
            requests JSON of that shape).
        prompt_id: Id of the prompt, for the audit record.
        check: Extra validation of the parsed output; raises :class:`InvalidVerdictError`
            when it does not fit the question.
        max_retries: Further attempts after an invalid output (reason ``parse_error``).
        options: Per-call model options (``max_tokens`` …).

    Returns:
        The :class:`Judgement`; ``parsed`` is set on success, ``error`` otherwise.

    Raises:
        RagExpError: A non-LLM error from the model (for example a model that cannot load).
    """
    record = Judgement(prompt_id)
    opts = dict(options or {})
    convo = list(messages)
    for attempt in range(max_retries + 1):
        record.calls += 1
        raw: str | None = None
        try:
            completion = judge.complete(convo, schema=schema, **opts)
            raw = completion.text
            record.raw.append(raw)
            record.prompt_tokens += completion.usage.prompt_tokens
            record.completion_tokens += completion.usage.completion_tokens
            record.reasoning_tokens += completion.usage.reasoning_tokens
            record.reasoning = shorten(completion.reasoning) if completion.reasoning else ""
            record.latency_ms += completion.latency_ms
            parsed = completion.parsed
            if parsed is None:
                parsed = parse_structured(raw, schema, finish_reason=completion.finish_reason)
            if check is not None:
                check(parsed)
        except LLMError as exc:
            if raw is None:
                raw = exc.raw
                if raw is not None:
                    record.raw.append(raw)
                if exc.usage is not None:  # a failed call's tokens count too
                    record.prompt_tokens += exc.usage.prompt_tokens
                    record.completion_tokens += exc.usage.completion_tokens
                    record.reasoning_tokens += exc.usage.reasoning_tokens
            record.error, record.error_message = exc.reason, str(exc)
            if exc.reason not in RETRIED_REASONS or attempt == max_retries:
                return record
            convo = [
                *messages,
                {"role": "assistant", "content": raw or ""},
                {
                    "role": "user",
                    "content": f"That reply was invalid: {exc}. Reply again "
                    "with valid JSON only, exactly as asked.",
                },
            ]
            continue
        record.parsed, record.error, record.error_message = parsed, None, None
        record.picked = parsed.pick_note if isinstance(parsed, StructuredOutput) else None
        return record
    return record  # pragma: no cover - the loop always returns


class JudgedMetric(JudgedRowMetric):
    """Base of the custom backend's LLM-judged metrics: the judge call and the audit record of
    one row (rows are scheduled by :mod:`~rag_experiments.metrics.scheduler`).

    A subclass sets :attr:`name` and ``declaration`` (its outputs, see
    :mod:`~rag_experiments.metrics.definitions`) and implements :meth:`_score`.

    Args:
        judge: The judge chat model (``build.build`` injects it; a metric built without one can
            declare its specs but raises :class:`ConfigError` when evaluating).
        max_retries: Retries of a judgement whose output is invalid.
        max_tokens: Completion limit per judge call (keeps small models from rambling).
        prefix: Prefix of every column name (a second backend uses ``deepeval.``).
        examples: Graded few-shot examples put into every prompt of the metric (a file
            written by ``rag-exp align``, a list, or None; :mod:`~rag_experiments.metrics.
            fewshot`); the prompt id gets their version.

    Raises:
        ConfigError: ``max_retries`` < 0 or ``max_tokens`` < 1, or unreadable examples.
    """

    name = "judged"
    columns: tuple[str, ...] = ()
    """Output columns, in order; default the names of the class's ``declaration`` outputs."""
    example_fields: tuple[str, ...] = ("question", "contexts", "answer")
    """Fields of a few-shot example shown in the prompt (those the metric's prompt reads)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("columns") and cls.__dict__.get("declaration") is not None:
            cls.columns = tuple(d.name for d in cls.declaration.outputs)

    def __init__(
        self,
        judge: ChatModel | None = None,
        max_retries: int = 1,
        max_tokens: int = 256,
        prefix: str = "",
        examples: Any = None,
    ) -> None:
        if type(self).declaration is None:  # specs() and the registry read it
            cls = f"{type(self).__module__}.{type(self).__qualname__}"
            raise ConfigError(
                f"{cls} declares no outputs: set declaration = MetricDeclaration(outputs="
                "(MetricDefinition(...),)) on the class (docs: design/extending.md, 'Adding a "
                "judged metric')"
            )
        if int(max_retries) < 0:
            raise ConfigError(f"{self.name}.max_retries must be ≥ 0, got {max_retries}")
        if int(max_tokens) < 1:
            raise ConfigError(f"{self.name}.max_tokens must be ≥ 1, got {max_tokens}")
        self.judge = judge
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        self.prefix = prefix
        self.examples: ExampleSet | None = load_examples(
            examples, f"metrics.suite.{self.name}.examples"
        )

    def specs(self) -> list[MetricSpec]:
        """The specs of :attr:`columns`, prefixed."""
        return [self.declaration.output(c).spec(self.prefix) for c in self.columns]

    def score_row(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Score one row (see the subclass for the formula and the edges).

        Returns:
            ``({column: MetricValue}, audit record)`` with every (prefixed) column; the record
            holds the claims/verdicts, the raw judge text and the usage counters.

        Raises:
            ConfigError: No judge was given.
        """
        values, record = self._score(sample, resp)
        for key in USAGE_KEYS:
            record.setdefault(key, 0)
        record[RATIONALE_KEY] = verdict_lines(record)
        return {self.prefix + k: v for k, v in values.items()}, record

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Values of one row (keys = :attr:`columns`, unprefixed) and its audit record."""
        raise NotImplementedError

    def _nan_all(self, reason: str) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Every column NaN with ``reason``, no judge call."""
        return {c: MetricValue.nan(reason) for c in self.columns}, {"skipped": reason}

    def _ask(
        self,
        prompt: JudgePrompt,
        fields: Mapping[str, Any],
        schema: type[BaseModel],
        check: Callable[[Any], None] | None = None,
        max_tokens: int | None = None,
    ) -> tuple[Judgement, dict[str, Any]]:
        """Ask the judge ``prompt`` filled with ``fields`` (completion limit ``max_tokens``,
        default the metric's); return the judgement and the start of the row's audit record
        (its usage and the judgement itself)."""
        if self.judge is None:
            raise ConfigError(
                f"metric {self.name} needs a judge model: run it through `rag-exp run` (which "
                "builds the `judge` config) or pass judge=<ChatModel>"
            )
        messages = prompt.messages(**{k: str(v) for k, v in fields.items()})
        prompt_id = prompt.id
        if self.examples is not None:  # few-shot: before the task, after the contexts
            block = self.examples.block(self.example_fields)
            messages[-1] = {**messages[-1], "content": insert_block(messages[-1]["content"], block)}
            prompt_id = f"{prompt.id}+{self.examples.version}"
        judgement = ask_judge(
            self.judge,
            messages,
            schema,
            prompt_id=prompt_id,
            check=check,
            max_retries=self.max_retries,
            options={"max_tokens": max_tokens or self.max_tokens},
        )
        if judgement.error is not None:  # a reply cut while thinking: the hint said it once
            log.log(
                logging.DEBUG if judgement.error == "reasoning_truncated" else logging.WARNING,
                "%s: judge failed (%s): %s",
                self.name,
                judgement.error,
                judgement.error_message,
            )
        record = {**judge_usage([judgement]), "judgement": judgement.to_dict()}
        return judgement, record


def verdict_lines(record: Mapping[str, Any]) -> list[str]:
    """The explanation lines of a custom metric's audit record
    (:data:`~rag_experiments.metrics.audit.RATIONALE_KEY`): one line per claim
    (``✓ claim (context k)`` / ``✗ claim (no context)``), per context verdict, per generated
    question, then the noncommittal flag, the rubric scores and the judge's feedback; the
    judge's error message when the judgement failed; ``[]`` when no judge was asked. A
    reasoning judge's thoughts (shortened) come last, as ``judge reasoning: …``."""
    judgement = record.get("judgement") or {}
    if judgement.get("error_message"):
        return [str(judgement["error_message"])]
    lines = _verdict_lines(record)
    if judgement.get("reasoning"):
        lines.append(f"judge reasoning: {judgement['reasoning']}")
    return lines


def _verdict_lines(record: Mapping[str, Any]) -> list[str]:
    """The lines of :func:`verdict_lines` but the judge's reasoning."""
    lines = []
    for claim in record.get("claims") or []:
        ok = claim.get("supported", claim.get("attributed"))
        where = f"context {claim.get('context')}" if claim.get("context") else "no context"
        lines.append(f"{'✓' if ok else '✗'} {claim.get('claim')} ({where})")
    for verdict in record.get("verdicts") or []:
        useful = "relevant" if verdict.get("relevant") else "not relevant"
        lines.append(f"context {verdict.get('rank')}: {useful}")
    for q in record.get("questions") or []:
        lines.append(f"generated question: {q.get('question')} (cosine {q.get('cosine')})")
    if record.get("noncommittal"):
        lines.append("the answer is noncommittal")
    if record.get("scores"):
        lines.append("scores: " + ", ".join(f"{k} {v}" for k, v in record["scores"].items()))
    if record.get("feedback"):
        lines.append(str(record["feedback"]))
    return lines


def has_context(contexts: Sequence[str]) -> bool:
    """Whether at least one retrieved context holds non-blank text (``[]`` and ``[""]`` do
    not)."""
    return any(c.strip() for c in contexts)
