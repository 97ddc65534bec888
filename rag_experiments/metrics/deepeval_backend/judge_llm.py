"""Our chat model as a DeepEval model: :class:`JudgeLLM`.

DeepEval's metrics call ``model.generate(prompt, schema=SomeModel)`` and, for a model that is
not one of DeepEval's own, fall back to parsing free text (``trimAndLoadJson``) whenever that
call raises :class:`TypeError`. :class:`JudgeLLM` always honours ``schema``: it asks our judge
through :func:`~rag_experiments.metrics.judge.ask_judge` (the judge's response cache, usage
meter, timeouts and transport retries, plus ``max_retries`` re-asks of an output that does not
parse) and returns the validated pydantic instance, so DeepEval never string-parses. It never
raises :class:`TypeError` (that would trigger the fallback); a failed judgement raises
:class:`~rag_experiments.errors.LLMError` with the failure's reason, which the metric turns
into a NaN with that reason.

The judge is asked with a bounded copy of DeepEval's schema
(:func:`~.schemas.bounded_schema`): lists of at most ``max_items``, strings of at most
``max_chars``, verdicts that are exactly DeepEval's words, strict types, and a ``verdicts``
list of exactly the length DeepEval will align it with when that is known —
:attr:`JudgeLLM.expected_verdicts`, set by the metric (one verdict per retrieval context) or by
the adapter itself from the previous reply (one verdict per claim or statement it just
extracted). The reply is returned as DeepEval's own class.

Every judgement is recorded (:attr:`JudgeLLM.judgements`) for ``judge_audit.jsonl``. One
instance serves one metric on one row: a row abandoned after its wall-clock timeout keeps its
own instance, which :meth:`JudgeLLM.cancel` stops before its next call.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from deepeval.models import DeepEvalBaseLLM
from pydantic import BaseModel

from rag_experiments.errors import LLMError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.deepeval_backend.schemas import bounded_schema, to_deepeval
from rag_experiments.metrics.judge import Judgement, ask_judge, judge_usage


class JudgeLLM(DeepEvalBaseLLM):
    """A :class:`~rag_experiments.llm.base.ChatModel` behind DeepEval's model interface.

    Args:
        chat: The judge chat model (the ``judge`` node's model, role ``judge``, as the
            composition root builds it).
        prompt_prefix: Prefix of the audit prompt ids (``deepeval.faithfulness``); the schema's
            class name is appended (``deepeval.faithfulness.Claims``).
        max_retries: Re-asks of an output that does not match the schema.
        max_tokens: Completion limit per call.
        max_items: Most items of any list in a reply (claims, truths, statements, verdicts).
        max_chars: Most characters of any free string in a reply.
        expected_verdicts: Length the next ``verdicts`` list must have (None = unknown).
    """

    EXTRACTED_LISTS = ("claims", "statements")
    """Fields of a reply whose length fixes the length of the next ``verdicts`` list."""

    def __init__(
        self,
        chat: ChatModel,
        prompt_prefix: str = "deepeval",
        max_retries: int = 1,
        max_tokens: int = 1024,
        max_items: int = 8,
        max_chars: int = 160,
        expected_verdicts: int | None = None,
    ) -> None:
        self.chat = chat
        self.prompt_prefix = prompt_prefix
        self.max_retries = int(max_retries)
        self.max_tokens = int(max_tokens)
        self.max_items = int(max_items)
        self.max_chars = int(max_chars)
        self.expected_verdicts = expected_verdicts
        self.judgements: list[Judgement] = []
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        super().__init__(model_name=str(chat.describe().get("model", "judge")))

    def load_model(self, *args: Any, **kwargs: Any) -> ChatModel:
        """The wrapped chat model (already built)."""
        return self.chat

    def get_model_name(self, *args: Any, **kwargs: Any) -> str:
        """``<provider>:<model>`` of the judge (DeepEval shows it in its logs)."""
        desc = self.chat.describe()
        return f"{desc.get('provider', 'local')}:{desc.get('model', 'judge')}"

    def cancel(self) -> None:
        """Refuse every later call (the row was abandoned after its timeout); a call already
        running finishes in its own time (the chat model's own timeout bounds it)."""
        self._cancelled.set()

    def generate(self, prompt: str, schema: type[BaseModel] | None = None, **_: Any) -> Any:
        """Ask the judge ``prompt``.

        Args:
            prompt: DeepEval's prompt (sent as one user message).
            schema: DeepEval's output model; with it the validated instance is returned.

        Returns:
            The ``schema`` instance, or the reply text without a schema.

        Raises:
            LLMError: The judgement failed (reason ``timeout``, ``parse_error``,
                ``truncated`` …) or the row was cancelled (reason ``timeout``).
        """
        if self._cancelled.is_set():
            raise LLMError("DeepEval metric row abandoned after its timeout", reason="timeout")
        messages = [{"role": "user", "content": prompt}]
        name = schema.__name__ if schema is not None else "text"
        try:
            if schema is None:
                completion = self.chat.complete(messages, max_tokens=self.max_tokens)
                record = Judgement(
                    f"{self.prompt_prefix}.{name}",
                    calls=1,
                    prompt_tokens=completion.usage.prompt_tokens,
                    completion_tokens=completion.usage.completion_tokens,
                    latency_ms=completion.latency_ms,
                    raw=[completion.text],
                )
                self._record(record)
                return completion.text
            asked = bounded_schema(
                schema,
                max_items=self.max_items,
                max_chars=self.max_chars,
                n_verdicts=self.expected_verdicts,
            )
            judgement = ask_judge(
                self.chat,
                messages,
                asked,
                prompt_id=f"{self.prompt_prefix}.{name}",
                max_retries=self.max_retries,
                options={"max_tokens": self.max_tokens},
            )
        except TypeError as exc:  # never let DeepEval fall back to string parsing
            raise LLMError(f"judge call failed: {exc}", reason="judge_error") from exc
        self._record(judgement)
        if judgement.parsed is None:
            raise LLMError(
                judgement.error_message or "judge failed", reason=judgement.error or "judge_error"
            )
        parsed = to_deepeval(schema, judgement.parsed)
        for field in self.EXTRACTED_LISTS:
            if isinstance(getattr(parsed, field, None), list):
                self.expected_verdicts = len(getattr(parsed, field))
        return parsed

    async def a_generate(
        self, prompt: str, schema: type[BaseModel] | None = None, **kwargs: Any
    ) -> Any:
        """:meth:`generate` in a worker thread (the backend runs metrics with
        ``async_mode=False``, so DeepEval does not call this)."""
        return await asyncio.to_thread(self.generate, prompt, schema)

    def _record(self, judgement: Judgement) -> None:
        with self._lock:
            self.judgements.append(judgement)

    def usage(self) -> dict[str, int]:
        """``judge_calls``, ``judge_prompt_tokens``, ``judge_completion_tokens`` so far."""
        with self._lock:
            return judge_usage(list(self.judgements))
