"""A deterministic fake chat model: a first-class component for tests and dry runs.

It makes no model call. Without a schema it answers with the first sentence of the first
numbered context in the last user message (or ``"I don't know."`` when there is none); with a
schema it returns ``responses[schema.__name__]`` (a dict or a JSON string) from its script.
Every call is counted in :attr:`calls`.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from typing import Any

from pydantic import BaseModel

from rag_experiments.errors import LLMError
from rag_experiments.llm.base import Completion, Message, Usage
from rag_experiments.llm.parsing import parse_structured

_CONTEXT = re.compile(r"\[1\]\s*(.+?)(?:(?<=[.!?])\s|\n|$)", re.DOTALL)


class FakeChat:
    """Deterministic chat model.

    Args:
        responses: Scripted structured outputs keyed by the schema's class name.
        text: A fixed reply for unstructured calls (None = first sentence of context [1]).
        delay_s: Sleep per call (to exercise timeouts).
        model: Model id reported in :meth:`describe`.
    """

    provider = "fake"
    cacheable = False
    """The response cache skips this model: it costs nothing, and tests count its calls."""

    def __init__(
        self,
        responses: dict[str, Any] | None = None,
        text: str | None = None,
        delay_s: float = 0.0,
        model: str = "fake-chat",
    ) -> None:
        self.responses = dict(responses or {})
        self.text = text
        self.delay_s = delay_s
        self.model = model
        self.calls = 0
        self._lock = threading.Lock()

    def complete(
        self, messages: list[Message], schema: type[BaseModel] | None = None, **options: Any
    ) -> Completion:
        """Answer deterministically; see the module docstring.

        Raises:
            LLMError: ``schema`` given but no scripted response for it.
        """
        with self._lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        prompt = messages[-1]["content"] if messages else ""
        if schema is None:
            if self.text is not None:
                text = self.text
            else:
                m = _CONTEXT.search(prompt)
                text = m.group(1).strip() if m else "I don't know."
            return Completion(text=text, usage=Usage(len(prompt.split()), len(text.split())),
                              model=self.model)
        scripted = self.responses.get(schema.__name__)
        if scripted is None:
            raise LLMError(f"FakeChat has no scripted response for {schema.__name__}",
                           reason="parse_error")
        text = scripted if isinstance(scripted, str) else json.dumps(scripted)
        return Completion(text=text, parsed=parse_structured(text, schema),
                          usage=Usage(len(prompt.split()), len(text.split())), model=self.model)

    def describe(self) -> dict[str, str]:
        """Provider, model id and ``digest``: a hash of the script (responses and text)."""
        script = json.dumps({"responses": self.responses, "text": self.text}, sort_keys=True,
                            default=str)
        digest = hashlib.sha256(script.encode("utf-8")).hexdigest()[:16]
        return {"provider": self.provider, "model": self.model, "digest": digest}
