"""Definitions of the answer-level metrics, apart from any backend that computes them.

A definition is a canonical name, a range, a direction, a one-line description and the source
of its formula. A backend (the custom one in this package, DeepEval later) computes values for
these names; a second backend reports the same definitions under a prefix
(``deepeval.faithfulness``) so both can sit side by side in one run or one sweep.

The custom backend's formulas, edges and prompts are in each metric's module:
:mod:`~rag_experiments.metrics.faithfulness`, :mod:`~rag_experiments.metrics.answer_relevancy`,
:mod:`~rag_experiments.metrics.context_precision`, :mod:`~rag_experiments.metrics.context_recall`,
:mod:`~rag_experiments.metrics.answer_judge`,
:mod:`~rag_experiments.metrics.keyword_faithfulness`, :mod:`~rag_experiments.metrics.refusal`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag_experiments.errors import ConfigError
from rag_experiments.records import MetricSpec


@dataclass(frozen=True)
class MetricDefinition:
    """What a metric means, independent of how it is computed.

    Attributes:
        name: Canonical name (``faithfulness``).
        higher_is_better: Direction of improvement.
        low: Lowest possible value.
        high: Highest possible value.
        description: One line for the README and the MLflow run.
        source: Where the formula comes from.
    """

    name: str
    higher_is_better: bool
    low: float
    high: float
    description: str
    source: str

    def spec(self, prefix: str = "") -> MetricSpec:
        """The :class:`MetricSpec` of this definition, its name prefixed by ``prefix``."""
        return MetricSpec(
            prefix + self.name, self.higher_is_better, self.low, self.high, self.description
        )


_RAGAS = "RAGAS (Es et al., 2023; docs.ragas.io metrics)"
_JUDGE_RUBRIC = "the seed tool's LLM-judge rubric (1-5), normalised as (s - 1) / 4"

DEFINITIONS: dict[str, MetricDefinition] = {
    d.name: d
    for d in (
        MetricDefinition(
            "faithfulness",
            True,
            0.0,
            1.0,
            "claims of the response supported by a retrieved context / claims of the response",
            f"{_RAGAS}; DeepEval FaithfulnessMetric",
        ),
        MetricDefinition(
            "answer_relevancy",
            True,
            0.0,
            1.0,
            "mean cosine(question, questions generated from the response), 0 if noncommittal",
            _RAGAS,
        ),
        MetricDefinition(
            "context_precision",
            True,
            0.0,
            1.0,
            "average precision of the contexts judged useful for the reference answer",
            f"{_RAGAS} (LLMContextPrecisionWithReference)",
        ),
        MetricDefinition(
            "context_utilization",
            True,
            0.0,
            1.0,
            "average precision of the contexts judged useful for the response (no reference)",
            f"{_RAGAS} (ContextUtilization)",
        ),
        MetricDefinition(
            "context_recall",
            True,
            0.0,
            1.0,
            "claims of the reference attributable to a retrieved context / claims of the reference",
            f"{_RAGAS} (LLMContextRecall)",
        ),
        MetricDefinition(
            "context_relevancy",
            True,
            0.0,
            1.0,
            "statements of the retrieved contexts relevant to the question / all their statements",
            "DeepEval ContextualRelevancyMetric (no custom counterpart)",
        ),
        MetricDefinition(
            "answer_judge.accuracy",
            True,
            0.0,
            1.0,
            "judge's accuracy score against the reference, (s - 1) / 4",
            _JUDGE_RUBRIC,
        ),
        MetricDefinition(
            "answer_judge.completeness",
            True,
            0.0,
            1.0,
            "judge's completeness score against the reference, (s - 1) / 4",
            _JUDGE_RUBRIC,
        ),
        MetricDefinition(
            "answer_judge.relevance",
            True,
            0.0,
            1.0,
            "judge's relevance-to-the-question score, (s - 1) / 4",
            _JUDGE_RUBRIC,
        ),
        MetricDefinition(
            "answer_judge.accuracy_raw",
            True,
            1.0,
            5.0,
            "judge's accuracy score as given (1 = wrong, 5 = perfect)",
            _JUDGE_RUBRIC,
        ),
        MetricDefinition(
            "answer_judge.completeness_raw",
            True,
            1.0,
            5.0,
            "judge's completeness score as given (1-5)",
            _JUDGE_RUBRIC,
        ),
        MetricDefinition(
            "answer_judge.relevance_raw",
            True,
            1.0,
            5.0,
            "judge's relevance score as given (1-5)",
            _JUDGE_RUBRIC,
        ),
        MetricDefinition(
            "keyword_faithfulness",
            True,
            0.0,
            1.0,
            "share of the response's content words found in the contexts (a cheap proxy, no LLM)",
            "this project (a lexical proxy of faithfulness)",
        ),
        MetricDefinition(
            "refusal",
            False,
            0.0,
            1.0,
            "1 when the response refuses to answer (pattern match), else 0",
            "this project (documented refusal patterns)",
        ),
        MetricDefinition(
            "correct_refusal_rate",
            True,
            0.0,
            1.0,
            "share of unanswerable questions whose response is a refusal",
            "this project",
        ),
        MetricDefinition(
            "false_refusal_rate",
            False,
            0.0,
            1.0,
            "share of answerable questions whose response is a refusal",
            "this project",
        ),
    )
}
"""Every answer-level metric definition, by canonical name."""


def spec(name: str, prefix: str = "") -> MetricSpec:
    """The spec of the defined metric ``name``, prefixed by ``prefix``.

    Args:
        name: A key of :data:`DEFINITIONS`.
        prefix: Backend prefix (``""`` for the custom backend, ``"deepeval."`` …).

    Returns:
        Its :class:`MetricSpec`.

    Raises:
        ConfigError: ``name`` is not defined.
    """
    try:
        return DEFINITIONS[name].spec(prefix)
    except KeyError:
        raise ConfigError(
            f"unknown metric {name!r}; defined metrics: {sorted(DEFINITIONS)}"
        ) from None
