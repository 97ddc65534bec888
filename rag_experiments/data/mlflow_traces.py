"""One trace a RAG application logged to MLflow, read as a sample with its recorded answer
(:func:`trace_sample`): the trace shape of ``dataset=mlflow_traces``, whose loader
(:class:`~rag_experiments.tracking.trace_dataset.MlflowTracesDataset`) reads the store and lives
in ``tracking/``, and of the MLflow scorers (:mod:`rag_experiments.mlflow_scorers`).

Each trace becomes one :class:`~rag_experiments.records.Sample`:

- ``user_input``: the root span's inputs: a string, or the first string value under
  ``question``, ``query``, ``user_input``, ``input``, ``inputs``, ``prompt``, ``request``, or
  the last user message of ``messages`` (chat format);
- ``recorded.response``: the root span's outputs: a string, or the string under ``answer``,
  ``response``, ``output``, ``content``, ``text``, or ``choices[0].message.content``
  (chat completion); None (no response) when the root has no output;
- ``recorded.retrieved_contexts``: the ``page_content`` of the documents returned by the
  first ``RETRIEVER`` span (in span order), in their order; ``retrieved_ids`` from each
  document's ``metadata.chunk_id`` or ``id``, ``retrieved_doc_ids`` from ``metadata.doc_id``
  or ``metadata.doc_uri`` (only when every document has one);
- ``reference``: the trace's expectation ``expected_response``, when it has one;
- ``question_type`` and ``answerable``: trace tags ``question_type`` and ``answerable``
  (``"false"``), as our own runs' traces carry them;
- ``id``: the trace's client request id, else its trace id; ``metadata.trace_id`` always.

A trace whose question cannot be found is left out with reason ``no_question`` (listed in
``dropped_rows.json``), never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rag_experiments.data.base import DroppedRow
from rag_experiments.records import RecordedAnswer, Sample

QUESTION_TYPE_TAG = "question_type"
"""Trace tag holding the sample's question type, as our own runs' traces carry it: the same key
as ``tracking.record.TAGS.question_type`` (``data/`` does not import ``tracking/``; a test checks
they agree)."""
ANSWERABLE_TAG = "answerable"
"""Trace tag holding ``"false"`` for an unanswerable sample (``TAGS.answerable``)."""
QUESTION_KEYS = ("question", "query", "user_input", "input", "inputs", "prompt", "request")
"""Keys of the root span's inputs that hold the question, in order of preference."""
ANSWER_KEYS = ("answer", "response", "output", "content", "text")
"""Keys of the root span's outputs that hold the answer, in order of preference."""
REFERENCE_EXPECTATION = "expected_response"
"""Expectation name that holds a reference answer (MLflow's convention)."""


def trace_sample(trace: Any) -> Sample | DroppedRow:
    """One trace as a sample with its recorded answer, or the reason it cannot be one.

    Args:
        trace: A :class:`mlflow.entities.Trace`.

    Returns:
        The :class:`Sample` (see the module docstring), or a :class:`DroppedRow` with reason
        ``no_question`` or ``no_root_span``.
    """
    info = trace.info
    sample_id = info.client_request_id or info.trace_id
    root = next((s for s in trace.data.spans if s.parent_id is None), None)
    if root is None:
        return DroppedRow(sample_id, "no_root_span", "the trace has no root span")
    question = question_of(root.inputs)
    if not question:
        return DroppedRow(
            sample_id, "no_question", f"root span inputs hold no question: {root.inputs!r:.200}"
        )
    retriever = next((s for s in trace.data.spans if s.span_type == "RETRIEVER"), None)
    docs = _documents(retriever.outputs) if retriever is not None else []
    metas = [d.get("metadata") or {} for d in docs]
    chunk_ids = [m.get("chunk_id") or d.get("id") for m, d in zip(metas, docs, strict=True)]
    doc_ids = [m.get("doc_id") or m.get("doc_uri") for m in metas]
    reference = next(
        (
            str(a.value)
            for a in info.assessments
            if a.name == REFERENCE_EXPECTATION and getattr(a, "expectation", None) is not None
        ),
        "",
    )
    recorded = RecordedAnswer(
        response=answer_of(root.outputs),
        retrieved_contexts=[str(d.get("page_content") or "") for d in docs],
        retrieved_ids=[str(c) for c in chunk_ids] if docs and all(chunk_ids) else None,
        retrieved_doc_ids=[str(d) for d in doc_ids] if docs and all(doc_ids) else None,
        latency_ms=float(info.execution_duration) if info.execution_duration else None,
    )
    return Sample(
        id=str(sample_id),
        user_input=question,
        reference=reference,
        question_type=info.tags.get(QUESTION_TYPE_TAG) or None,
        answerable=info.tags.get(ANSWERABLE_TAG) != "false",
        metadata={"trace_id": info.trace_id},
        recorded=recorded,
    )


def question_of(inputs: Any) -> str | None:
    """The question in a root span's inputs (see the module docstring), or None."""
    if isinstance(inputs, str):
        return inputs.strip() or None
    if not isinstance(inputs, Mapping):
        return None
    for key in QUESTION_KEYS:
        value = inputs.get(key)
        if isinstance(value, str) and value.strip():
            return value
    messages = inputs.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, Mapping) and message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str) and content.strip():
                    return content
    return None


def answer_of(outputs: Any) -> str | None:
    """The answer in a root span's outputs (see the module docstring), or None."""
    if outputs is None or isinstance(outputs, str):
        return outputs
    if isinstance(outputs, Mapping):
        for key in ANSWER_KEYS:
            if isinstance(outputs.get(key), str):
                return outputs[key]
        choices = outputs.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            content = (choices[0].get("message") or {}).get("content")
            if isinstance(content, str):
                return content
    return None


def _documents(outputs: Any) -> list[dict[str, Any]]:
    """A RETRIEVER span's outputs as document dicts (``page_content``, ``metadata``, ``id``)."""
    if not isinstance(outputs, list):
        return []
    docs = []
    for item in outputs:
        if isinstance(item, Mapping) and "page_content" in item:
            docs.append(dict(item))
        elif isinstance(item, str):
            docs.append({"page_content": item, "metadata": {}})
    return docs
