"""Map any JSON answer of a RAG endpoint onto a :class:`~rag_experiments.records.RagResponse`
with JMESPath expressions (https://jmespath.org).

Top-level expressions are evaluated on the whole JSON response:

- ``answer`` → the generated answer (a string);
- ``contexts`` → the retrieved contexts, best first: a list of strings, or of objects whose
  text is found by the sub-expression ``context_text`` (evaluated on each object) and,
  optionally, their chunk id by ``context_id`` and document id by ``context_doc_id``;
- ``context_ids`` → chunk ids, one per context (overrides ``context_id``);
- ``doc_ids`` → the ranked document ids (overrides ``context_doc_id``; may be deeper than
  ``contexts``, as the baseline's is);
- ``citations`` → the answer's structured citations (:class:`~rag_experiments.records.
  Citation`; not mapped by default): a list of objects, in each of which the sub-expressions
  ``citation_statement`` (the cited statement's text: a sentence of the answer or a part of
  it), ``citation_chunk_id``, ``citation_doc_id`` and ``citation_text`` (the cited passage)
  are evaluated. An id sub-expression may give one id or a list of ids: one citation per
  chunk id (else per doc id), each with the object's doc id (one, or one per chunk id) and
  text. An object needs a statement and at least one source (an id or a text), else the row
  is ``mapping_invalid``. An empty list is an answer that cites nothing; not mapped (or not
  found) = None, and ``metrics=citations`` reads the answer's inline ``[k]`` markers instead.

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
from rag_experiments.records import Citation

MAPPED_FIELDS: tuple[str, ...] = ("answer", "contexts", "context_ids", "doc_ids", "citations")
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
        citations: Structured citations, or None when not mapped or not found.
    """

    answer: str
    contexts: list[str]
    context_ids: list[str] | None
    doc_ids: list[str] | None
    citations: list[Citation] | None = None


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
        citations: Expression of the citation list (None = not mapped).
        citation_statement: Sub-expression of a citation object's statement text.
        citation_chunk_id: Sub-expression of its chunk id(s) (None = not mapped).
        citation_doc_id: Sub-expression of its document id(s) (None = not mapped).
        citation_text: Sub-expression of its cited passage text (None = not mapped).
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
        citations: str | None = None,
        citation_statement: str = "statement",
        citation_chunk_id: str | None = "chunk_id",
        citation_doc_id: str | None = "doc_id",
        citation_text: str | None = "text",
    ) -> None:
        self.exprs = {
            "answer": answer,
            "contexts": contexts,
            "context_text": context_text,
            "context_id": context_id,
            "context_doc_id": context_doc_id,
            "context_ids": context_ids,
            "doc_ids": doc_ids,
            "citations": citations,
            "citation_statement": citation_statement,
            "citation_chunk_id": citation_chunk_id,
            "citation_doc_id": citation_doc_id,
            "citation_text": citation_text,
        }
        self._compiled = {k: _compile(v, k) for k, v in self.exprs.items()}
        for sub in ("context_text", "citation_statement"):
            if self._compiled[sub] is None:
                raise ConfigError(f"target.response.{sub} must be set (e.g. {sub.split('_')[1]!r})")
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
            citations=self._citations(self._find("citations", payload)),
        )

    def _citations(self, raw: Any) -> list[Citation] | None:
        """Structured citations from the value found at ``citations`` (rules in the module
        docstring)."""
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise self._invalid("citations", f"expected a list, got {_peek(raw)}")
        out: list[Citation] = []
        for n, item in enumerate(raw, start=1):
            if not isinstance(item, dict):
                raise self._invalid(
                    "citations", f"citation {n} is {_peek(item)}, expected an object"
                )
            statement = self._compiled["citation_statement"].search(item)
            if not isinstance(statement, str) or not statement.strip():
                raise self._invalid(
                    "citations",
                    f"citation {n} has no statement text at {self.exprs['citation_statement']!r} "
                    f"(target.response.citation_statement); it is {_peek(item)}",
                )
            text = self._sub_value("citation_text", item)
            if text is not None and not isinstance(text, str):
                raise self._invalid(
                    "citations", f"citation {n} text is {_peek(text)}, not a string"
                )
            chunk_ids = self._sub_ids("citation_chunk_id", item, n)
            doc_ids = self._sub_ids("citation_doc_id", item, n)
            if not (chunk_ids or doc_ids or text is not None):
                raise self._invalid(
                    "citations",
                    f"citation {n} names no source (citation_chunk_id, citation_doc_id or "
                    f"citation_text); it is {_peek(item)}",
                )
            k = len(chunk_ids) or len(doc_ids) or 1
            if chunk_ids and len(doc_ids) not in (0, 1, k):
                raise self._invalid(
                    "citations",
                    f"citation {n} has {len(chunk_ids)} chunk ids but {len(doc_ids)} doc ids; "
                    "give one doc id, or one per chunk id",
                )
            for i in range(k):
                out.append(
                    Citation(
                        statement,
                        chunk_id=chunk_ids[i] if chunk_ids else None,
                        doc_id=doc_ids[i if len(doc_ids) == k else 0] if doc_ids else None,
                        text=text,
                    )
                )
        return out

    def _sub_value(self, field: str, item: dict[str, Any]) -> Any:
        compiled = self._compiled[field]
        return None if compiled is None else compiled.search(item)

    def _sub_ids(self, field: str, item: dict[str, Any], n: int) -> list[str]:
        """One id or a list of ids found by a citation sub-expression ([] when none)."""
        value = self._sub_value(field, item)
        if value is None:
            return []
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
            raise self._invalid(
                "citations",
                f"citation {n} {field.split('_', 1)[1]} at {self.exprs[field]!r} is "
                f"{_peek(value)}, expected an id or a list of ids",
            )
        return [str(v) for v in values]

    def _sub_id(self, field: str, item: dict[str, Any]) -> str | None:
        compiled = self._compiled[field]
        if compiled is None:
            return None
        value = compiled.search(item)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
        return None
