"""Traces a RAG application logged to MLflow, read as recorded answers: ``dataset=mlflow_traces``.

Teams that already trace their RAG app with MLflow (``mlflow.start_span`` / ``@mlflow.trace``
with a ``RETRIEVER`` span, or an autologger) evaluate those traces directly, with
``target=recorded``::

    rag-exp run dataset=mlflow_traces dataset.experiment=my-app target=recorded \\
        dataset.filter_string="attributes.status = 'OK'" dataset.max_results=200

The loader reads the store (it lives in ``tracking/``, the one package that imports MLflow);
each trace (:func:`mlflow.search_traces`) becomes one sample by
:func:`~rag_experiments.data.mlflow_traces.trace_sample`, whose docstring says where each field
comes from. A trace whose question cannot be found is left out with reason ``no_question``
(listed in ``dropped_rows.json``), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException

from rag_experiments.common.uri import resolve_tracking_uri
from rag_experiments.data.base import DroppedRow, EvalDataset
from rag_experiments.data.jsonl import load_corpus
from rag_experiments.data.mlflow_traces import trace_sample
from rag_experiments.errors import DatasetError
from rag_experiments.records import Sample

PAGE_SIZE = 500
"""Traces per search call."""


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


__all__ = ["PAGE_SIZE", "MlflowTracesDataset"]
