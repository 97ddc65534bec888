"""Traces a RAG application logged to MLflow, read as recorded answers: ``dataset=mlflow_traces``.

Teams that already trace their RAG app with MLflow (``mlflow.start_span`` / ``@mlflow.trace``
with a ``RETRIEVER`` span, or an autologger) evaluate those traces directly, with
``target=recorded``::

    rag-exp run dataset=mlflow_traces dataset.experiment=my-app target=recorded \\
        dataset.filter_string="attributes.status = 'OK'" dataset.max_results=200

Each trace (:func:`mlflow.search_traces`) becomes one :class:`~rag_experiments.records.Sample`:

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
from dataclasses import dataclass
from typing import Any

from rag_experiments.data.base import DroppedRow, EvalDataset
from rag_experiments.data.jsonl import load_corpus
from rag_experiments.errors import DatasetError
from rag_experiments.records import RecordedAnswer, Sample

QUESTION_KEYS = ("question", "query", "user_input", "input", "inputs", "prompt", "request")
"""Keys of the root span's inputs that hold the question, in order of preference."""
ANSWER_KEYS = ("answer", "response", "output", "content", "text")
"""Keys of the root span's outputs that hold the answer, in order of preference."""
PAGE_SIZE = 500
"""Traces per search call."""
REFERENCE_EXPECTATION = "expected_response"
"""Expectation name that holds a reference answer (MLflow's convention)."""


@dataclass
class MlflowTracesDataset:
    """Traces of an MLflow experiment as samples with recorded answers (module docstring).

    Args:
        experiment: Experiment name or id holding the traces.
        tracking_uri: Tracking store of the traces (the config passes ``tracking.uri``).
        filter_string: MLflow trace filter (``attributes.status = 'OK'``,
            ``tags.env = 'prod'``); None = every trace.
        max_results: Read at most this many traces (newest first); None = all.
        corpus: Corpus of the traced app (documents folder or BEIR ``corpus.jsonl``), for
            doc-level metrics by text matching; None = none.
        name: Dataset name; default ``traces-<experiment>``.
    """

    experiment: str
    tracking_uri: str | None = None
    filter_string: str | None = None
    max_results: int | None = None
    corpus: str | None = None
    name: str | None = None

    def load(self) -> EvalDataset:
        """Read the traces.

        Returns:
            One sample per usable trace (oldest first), the corpus, the experiment as source
            and the traces left out with their reason.

        Raises:
            DatasetError: The experiment does not exist, the store cannot be read or holds
                no matching trace, or ``max_results`` < 1.
        """
        import mlflow
        from mlflow.exceptions import MlflowException

        from rag_experiments.common.uri import resolve_tracking_uri

        if self.max_results is not None and int(self.max_results) < 1:
            raise DatasetError(f"dataset.max_results must be >= 1 or null, got {self.max_results}")
        uri = resolve_tracking_uri(self.tracking_uri) if self.tracking_uri else None
        client = mlflow.MlflowClient(tracking_uri=uri)
        try:
            exp = client.get_experiment_by_name(self.experiment)
            if exp is None and str(self.experiment).isdigit():
                exp = client.get_experiment(str(self.experiment))
        except MlflowException as exc:
            raise DatasetError(
                f"cannot read experiment {self.experiment!r} at {client.tracking_uri}: "
                f"{exc.message}. Check dataset.experiment and tracking.uri"
            ) from exc
        if exp is None:
            raise DatasetError(
                f"no MLflow experiment named or numbered {self.experiment!r} at "
                f"{client.tracking_uri}; set dataset.experiment to the experiment of the traces "
                "(and tracking.uri / dataset.tracking_uri to their store)"
            )
        try:
            traces = _search(client, exp.experiment_id, self.filter_string, self.max_results)
        except MlflowException as exc:
            raise DatasetError(
                f"cannot search the traces of experiment {exp.name!r} at {client.tracking_uri}: "
                f"{exc.message}. Check dataset.filter_string"
            ) from exc
        traces = sorted(traces, key=lambda t: (t.info.request_time, t.info.trace_id))
        samples: list[Sample] = []
        dropped: list[DroppedRow] = []
        for trace in traces:
            sample = trace_sample(trace)
            if isinstance(sample, DroppedRow):
                dropped.append(sample)
            else:
                samples.append(sample)
        if not samples:
            raise DatasetError(
                f"experiment {exp.name!r} at {client.tracking_uri} has no usable trace "
                f"(found {len(traces)}, filter {self.filter_string!r}"
                + (f"; left out: {dropped[0].reason}: {dropped[0].detail}" if dropped else "")
                + "). Log traces with a root span whose inputs hold the question"
            )
        corpus, skipped = load_corpus(self.corpus)
        return EvalDataset(
            name=self.name or f"traces-{exp.name}",
            samples=samples,
            corpus=corpus,
            source=f"mlflow-traces:{client.tracking_uri}#{exp.experiment_id}",
            skipped=skipped,
            dropped=dropped,
        )


def _search(
    client: Any, experiment_id: str, filter_string: str | None, max_results: int | None
) -> list[Any]:
    """Every matching trace (newest first, at most ``max_results``), page by page."""
    traces: list[Any] = []
    token = None
    while max_results is None or len(traces) < int(max_results):
        want = PAGE_SIZE if max_results is None else min(PAGE_SIZE, int(max_results) - len(traces))
        page = client.search_traces(
            locations=[experiment_id],
            filter_string=filter_string,
            max_results=want,
            order_by=["timestamp_ms DESC"],
            page_token=token,
        )
        traces.extend(page)
        token = page.token
        if not token or not page:
            break
    return traces


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
        question_type=info.tags.get("question_type") or None,
        answerable=info.tags.get("answerable") != "false",
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
