"""Map any JSON answer of a RAG endpoint onto a :class:`~rag_experiments.records.RagResponse`
with JMESPath expressions (https://jmespath.org).

Top-level expressions are evaluated on the whole JSON response:

- ``answer`` → the generated answer (a string);
- ``contexts`` → the retrieved contexts, best first: a list of strings, or of objects whose
  text is found by the sub-expression ``context_text`` (evaluated on each object) and,
  optionally, their chunk id by ``context_id`` and document id by ``context_doc_id``;
- ``context_ids`` → chunk ids, one per context (overrides ``context_id``);
- ``doc_ids`` → the ranked document ids (overrides ``context_doc_id``; may be deeper than
  ``contexts``, as the baseline's is).

An expression set to null is not used. An expression that finds nothing (JMESPath gives null:
a missing key, an index out of range) is an error for the fields listed in ``required``
(``mapping_empty``) and is otherwise left out. A value of the wrong shape is always an error
(``mapping_invalid``): an answer that is not a string, contexts that are not a list, a context
object without text, ids that are not a list of strings or numbers. Per-context ids are used
only when every context has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jmespath

from rag_experiments.common.jsonpath import compile_expression
from rag_experiments.common.jsonpath import peek as _peek
from rag_experiments.common.jsonpath import quoted_form as quoted_form  # re-exported
from rag_experiments.errors import ConfigError, TargetError

MAPPED_FIELDS: tuple[str, ...] = ("answer", "contexts", "context_ids", "doc_ids")
"""Top-level fields that can be listed in ``required``."""


class ResponseMappingError(TargetError):
    """The endpoint's JSON does not fit the mapping (``reason``: ``mapping_empty`` or
    ``mapping_invalid``)."""


@dataclass(frozen=True)
class MappedResponse:
    """What a mapping extracted from one JSON response.

    Attributes:
        answer: The answer (``""`` when unmapped or optional and absent).
        contexts: Context texts, best first.
        context_ids: Chunk ids (same order as ``contexts``), or None when unknown.
        doc_ids: Ranked document ids (deduplicated, first occurrence wins), or None when the
            endpoint gave none.
    """

    answer: str
    contexts: list[str]
    context_ids: list[str] | None
    doc_ids: list[str] | None


def _compile(expr: str | None, field: str) -> jmespath.parser.ParsedResult | None:
    return compile_expression(expr, f"target.response.{field}")


def _dedupe(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


class ResponseMapping:
    """JMESPath mapping of an endpoint's JSON onto answer, contexts and ids.

    Args:
        answer: Expression of the answer; None = the endpoint gives none.
        contexts: Expression of the context list; None = the endpoint gives none.
        context_text: Sub-expression of a context object's text.
        context_id: Sub-expression of a context object's chunk id (None = not mapped).
        context_doc_id: Sub-expression of a context object's document id (None = not mapped).
        context_ids: Expression of the chunk-id list (None = not mapped).
        doc_ids: Expression of the ranked document-id list (None = not mapped).
        required: Top-level fields (of :data:`MAPPED_FIELDS`) that must be found.

    Raises:
        ConfigError: An invalid expression, or an unknown or unmapped field in ``required``.
    """

    def __init__(
        self,
        answer: str | None = "answer",
        contexts: str | None = "contexts",
        context_text: str = "text",
        context_id: str | None = "id",
        context_doc_id: str | None = "doc_id",
        context_ids: str | None = "context_ids",
        doc_ids: str | None = "doc_ids",
        required: Sequence[str] = ("answer", "contexts"),
    ) -> None:
        self.exprs = {
            "answer": answer,
            "contexts": contexts,
            "context_text": context_text,
            "context_id": context_id,
            "context_doc_id": context_doc_id,
            "context_ids": context_ids,
            "doc_ids": doc_ids,
        }
        self._compiled = {k: _compile(v, k) for k, v in self.exprs.items()}
        if self._compiled["context_text"] is None:
            raise ConfigError("target.response.context_text must be set (e.g. 'text')")
        self.required = tuple(required)
        for name in self.required:
            if name not in MAPPED_FIELDS:
                raise ConfigError(
                    f"target.response.required: unknown field {name!r}; choose from "
                    f"{list(MAPPED_FIELDS)}"
                )
            if self._compiled[name] is None:
                raise ConfigError(
                    f"target.response.required lists {name!r} but target.response.{name} is "
                    "null; give it an expression or drop it from required"
                )

    def describe(self) -> dict[str, Any]:
        """The expressions and required fields (for tags)."""
        return {**self.exprs, "required": list(self.required)}

    def _find(self, field: str, payload: Any) -> Any:
        compiled = self._compiled[field]
        if compiled is None:
            return None
        value = compiled.search(payload)
        if value is None and field in self.required:
            raise ResponseMappingError(
                "mapping_empty",
                f"response has no {field} at {self.exprs[field]!r}; got {_peek(payload)}. Fix "
                f"target.response.{field} (a JMESPath expression)",
            )
        return value

    def _invalid(self, field: str, message: str) -> ResponseMappingError:
        return ResponseMappingError(
            "mapping_invalid",
            f"{field} at {self.exprs[field]!r}: {message}. Fix target.response.{field}",
        )

    def _id_list(self, field: str, value: Any) -> list[str] | None:
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, (str, int)) and not isinstance(v, bool) for v in value
        ):
            raise self._invalid(field, f"expected a list of strings, got {_peek(value)}")
        return [str(v) for v in value]

    def apply(self, payload: Any) -> MappedResponse:
        """Extract answer, contexts and ids from one decoded JSON response.

        Args:
            payload: The decoded JSON body.

        Returns:
            The :class:`MappedResponse`.

        Raises:
            ResponseMappingError: A required field was not found (``mapping_empty``) or a
                value has the wrong shape (``mapping_invalid``).
        """
        answer = self._find("answer", payload)
        if answer is None:
            answer = ""
        elif not isinstance(answer, str):
            raise self._invalid("answer", f"expected a string, got {_peek(answer)}")
        raw = self._find("contexts", payload)
        if raw is None:
            raw = []
        elif not isinstance(raw, list):
            raise self._invalid("contexts", f"expected a list, got {_peek(raw)}")
        texts: list[str] = []
        item_ids: list[str | None] = []
        item_docs: list[str | None] = []
        for rank, item in enumerate(raw, start=1):
            if isinstance(item, str):
                texts.append(item)
                item_ids.append(None)
                item_docs.append(None)
            elif isinstance(item, dict):
                text = self._compiled["context_text"].search(item)
                if not isinstance(text, str):
                    raise self._invalid(
                        "contexts",
                        f"context {rank} has no text at {self.exprs['context_text']!r} "
                        f"(target.response.context_text); it is {_peek(item)}",
                    )
                texts.append(text)
                item_ids.append(self._sub_id("context_id", item))
                item_docs.append(self._sub_id("context_doc_id", item))
            else:
                raise self._invalid(
                    "contexts", f"context {rank} is {_peek(item)}, expected a string or an object"
                )
        context_ids = self._id_list("context_ids", self._find("context_ids", payload))
        if context_ids is None and texts and all(i is not None for i in item_ids):
            context_ids = [str(i) for i in item_ids]
        doc_ids = self._id_list("doc_ids", self._find("doc_ids", payload))
        if doc_ids is None and texts and all(d is not None for d in item_docs):
            doc_ids = [str(d) for d in item_docs]
        return MappedResponse(
            answer=answer,
            contexts=texts,
            context_ids=context_ids,
            doc_ids=None if doc_ids is None else _dedupe(doc_ids),
        )

    def _sub_id(self, field: str, item: dict[str, Any]) -> str | None:
        compiled = self._compiled[field]
        if compiled is None:
            return None
        value = compiled.search(item)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
        return None
