"""Our judged metrics as MLflow GenAI scorers, for ``mlflow.genai.evaluate(data=…, scorers=[…])``.

Each factory returns an MLflow :class:`~mlflow.genai.scorers.Scorer` (made with ``@scorer``)
that scores one row with our own metric class and our judge prompt, so its value is the value
``rag-exp run`` computes for the same question, answer and contexts::

    import mlflow
    from rag_experiments.mlflow_scorers import faithfulness_scorer, context_recall_scorer

    data = [{
        "inputs": {"question": "Who approves a vendor's data processing agreement?"},
        "outputs": {"response": "The Data Protection Lead approves it.",
                    "retrieved_contexts": ["... approved by the Data Protection Lead ..."]},
        "expectations": {"expected_response": "The Data Protection Lead."},
    }]
    mlflow.genai.evaluate(data=data, scorers=[faithfulness_scorer(judge="ollama"),
                                              context_recall_scorer(judge="ollama")])

Where a scorer finds its fields (MLflow passes ``inputs``, ``outputs``, ``expectations`` and
``trace``):

- the question: ``inputs`` (a string, or ``question`` / ``query`` / ``user_input`` / …, as
  ``dataset=mlflow_traces`` reads a root span: :mod:`rag_experiments.data.mlflow_traces`);
- the answer: ``outputs`` (a string, or ``response`` / ``answer`` / …);
- the contexts: the documents of the trace's first ``RETRIEVER`` span when the trace has one
  (traces of an app, or of ``rag-exp run``), else ``outputs["retrieved_contexts"]``;
- the reference: ``expectations["expected_response"]`` (context recall needs it);
- unanswerable questions: trace tag ``answerable = "false"`` (our runs' traces set it).

``judge`` is one of our chat models (:class:`~rag_experiments.llm.base.ChatModel`), a judge
config option of ``conf/judge/`` (``"fake"``, ``"ollama"``, ``"openai"``, ``"embedded"``,
optionally with overrides: ``"ollama judge.model=qwen2.5:7b"``), or a config mapping with a
``_target_``. A scorer returns one :class:`mlflow.entities.Feedback` per column of the
metric (``context_precision`` also yields ``context_utilization``); a NaN value comes back as
a feedback with no value and an error whose code is the NaN reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlflow.entities import Feedback
from mlflow.genai.scorers import Scorer, scorer

from rag_experiments.data.mlflow_traces import REFERENCE_EXPECTATION, answer_of, question_of
from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.answer_relevancy import AnswerRelevancy
from rag_experiments.metrics.audit import RATIONALE_KEY
from rag_experiments.metrics.context_precision import ContextPrecision
from rag_experiments.metrics.context_recall import ContextRecall
from rag_experiments.metrics.definitions import declared_metrics
from rag_experiments.metrics.faithfulness import Faithfulness
from rag_experiments.metrics.judge import JudgedMetric
from rag_experiments.records import ColumnSource, RagResponse, Sample
from rag_experiments.tracking.trace_entities import feedback


def resolve_judge(judge: Any) -> Any:
    """Our chat model for ``judge`` (see the module docstring for the accepted forms).

    Raises:
        ConfigError: An unknown option or override, or a value of another type.
    """
    from rag_experiments.build import build_chat_model
    from rag_experiments.llm.roles import judge_model_node

    if isinstance(judge, str):
        from rag_experiments.config.compose import compose_config

        option, *overrides = judge.split()
        cfg = compose_config("config", [f"judge={option}", *overrides])
        return build_chat_model(judge_model_node(cfg.judge))
    if isinstance(judge, Mapping):
        if "_target_" not in judge:
            raise ConfigError(f"a judge config mapping needs a _target_, got keys {list(judge)}")
        return build_chat_model(judge_model_node(judge))
    if isinstance(judge, ChatModel):
        return judge
    raise ConfigError(
        f"judge must be a chat model, a conf/judge option name ('fake', 'ollama' …) or a "
        f"config mapping with _target_, got {type(judge).__name__}"
    )


def resolve_embedder(embedder: Any) -> Any:
    """Our embedder for ``embedder``: an embedder object or a ``conf/embedder`` option name
    (``"hash"``, ``"minilm"``, optionally with overrides).

    Raises:
        ConfigError: An unknown option or override.
    """
    if not isinstance(embedder, str):
        return embedder
    from rag_experiments.build import build_embedder
    from rag_experiments.config.compose import compose_config

    option, *overrides = embedder.split()
    return build_embedder(compose_config("config", [f"embedder={option}", *overrides]))


def row_of(
    inputs: Any, outputs: Any, expectations: Mapping[str, Any] | None, trace: Any
) -> tuple[Sample, RagResponse]:
    """The sample and response a scorer call describes (see the module docstring).

    Raises:
        ConfigError: No question can be found in ``inputs``.
    """
    question = question_of(inputs)
    if not question:
        raise ConfigError(
            f"scorer inputs hold no question: {inputs!r:.200}; pass a string or {{'question': ...}}"
        )
    contexts: list[str] | None = None
    if trace is not None:
        span = next((s for s in trace.data.spans if s.span_type == "RETRIEVER"), None)
        if span is not None and isinstance(span.outputs, list):
            contexts = [
                str(d.get("page_content", "")) if isinstance(d, Mapping) else str(d)
                for d in span.outputs
            ]
    if contexts is None and isinstance(outputs, Mapping):
        contexts = [str(c) for c in outputs.get("retrieved_contexts") or []]
    answer = answer_of(outputs)
    reference = (expectations or {}).get(REFERENCE_EXPECTATION) or ""
    answerable = trace is None or trace.info.tags.get("answerable") != "false"
    sample = Sample(id="row", user_input=question, reference=str(reference), answerable=answerable)
    response = RagResponse(
        response=answer or "", retrieved_contexts=contexts or [], no_response=answer is None
    )
    return sample, response


def metric_scorer(metric: JudgedMetric, name: str | None = None) -> Scorer:
    """Wrap one of our judged metrics as an MLflow scorer.

    Args:
        metric: A metric with its judge (and embedder) set.
        name: Scorer name; default the metric's name.

    Returns:
        A scorer returning one feedback per column of ``metric`` (name = column, value in
        [0, 1] or None with the NaN reason as error, rationale = the judge's verdicts, source
        = ``LLM_JUDGE`` with the judge's model id).
    """
    model = str(metric.judge.describe().get("model", "judge")) if metric.judge else "judge"
    source = ColumnSource(model, str(metric.name), RATIONALE_KEY)

    def score(inputs: Any, outputs: Any, expectations: Any, trace: Any) -> list[Feedback]:
        sample, response = row_of(inputs, outputs, expectations, trace)
        values, record = metric.score_row(sample, response)
        return [feedback(column, value, source, record) for column, value in values.items()]

    return scorer(score, name=name or str(metric.name))


def faithfulness_scorer(judge: Any, **options: Any) -> Scorer:
    """Faithfulness (supported claims / claims, :class:`~rag_experiments.metrics.faithfulness.
    Faithfulness`) as an MLflow scorer; ``options`` go to the metric (``max_retries`` …)."""
    return metric_scorer(Faithfulness(resolve_judge(judge), **options))


def context_recall_scorer(judge: Any, **options: Any) -> Scorer:
    """Context recall (reference claims found in the contexts, :class:`~rag_experiments.
    metrics.context_recall.ContextRecall`) as an MLflow scorer; needs ``expected_response``."""
    return metric_scorer(ContextRecall(resolve_judge(judge), **options))


def context_precision_scorer(judge: Any, **options: Any) -> Scorer:
    """Context precision / utilization (average precision of useful contexts,
    :class:`~rag_experiments.metrics.context_precision.ContextPrecision`) as an MLflow
    scorer."""
    return metric_scorer(ContextPrecision(resolve_judge(judge), **options))


def answer_relevancy_scorer(judge: Any, embedder: Any, **options: Any) -> Scorer:
    """Answer relevancy (mean cosine of the question and questions generated from the answer,
    :class:`~rag_experiments.metrics.answer_relevancy.AnswerRelevancy`) as an MLflow scorer;
    ``embedder`` is an embedder or a ``conf/embedder`` option (``"hash"``, ``"minilm"``)."""
    metric = AnswerRelevancy(resolve_judge(judge), resolve_embedder(embedder), **options)
    return metric_scorer(metric)


def scorer_metrics() -> list[type[JudgedMetric]]:
    """The metric classes offered as scorers: every declared metric whose declaration says
    ``scorer=True`` (:func:`~rag_experiments.metrics.definitions.declared_metrics`; built in:
    faithfulness, answer relevancy, context precision, context recall; a user's metric joins
    once its module is imported), in key-metric order."""
    return [c for c in declared_metrics() if c.declaration.scorer]


def rag_scorers(judge: Any, embedder: Any = None) -> list[Scorer]:
    """Every declared scorer metric (:func:`scorer_metrics`) as a scorer, sharing one judge.

    Args:
        judge: The judge (see the module docstring for the accepted forms).
        embedder: An embedder or ``conf/embedder`` option, for the metrics that require one
            (``answer_relevancy``); with None those are left out.

    Returns:
        One scorer per metric, named as the metric.
    """
    shared = {"judge": resolve_judge(judge)}
    if embedder is not None:
        shared["embedder"] = resolve_embedder(embedder)
    return [
        metric_scorer(cls(**{part: shared[part] for part in cls.requires}))
        for cls in scorer_metrics()
        if cls.requires <= set(shared)
    ]
