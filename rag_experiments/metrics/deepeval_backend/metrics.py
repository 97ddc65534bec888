"""The DeepEval metrics of ``metrics=deepeval``, each DeepEval's own class called synchronously
(see :class:`~rag_experiments.metrics.deepeval_backend.base.DeepEvalMetric`). Formulas and
edges are DeepEval 4.x's (``deepeval/metrics/<name>/<name>.py``, ``_calculate_score``, with
``deepeval.metrics.utils.qag.score_qag_verdicts``); a verdict is "yes" / "no", or "yes" / "no" /
"borderline" for faithfulness and answer relevancy, as DeepEval's judge prompts ask (DeepEval
2.9 said "idk" where 4.x says "borderline"; both count the same).
"""

from __future__ import annotations

from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.deepeval_backend.base import DeepEvalMetric, VerdictMismatchError
from rag_experiments.metrics.definitions import MetricDeclaration, MetricDefinition


def _count_mismatch(what: str, n_items: int, n_verdicts: int) -> None:
    if n_items != n_verdicts:
        raise VerdictMismatchError(
            f"the judge gave {n_verdicts} verdicts for {n_items} {what}; DeepEval would use "
            "them misaligned"
        )


class DeepEvalFaithfulness(DeepEvalMetric):
    """``deepeval.faithfulness`` (DeepEval ``FaithfulnessMetric``)::

        score = |{claims whose verdict is not "no"}| / |claims|      (1.0 when no claim)

    Three judge calls (truths of the contexts, claims of the response, one verdict per claim
    against the truths), four with ``include_reason``. "borderline" (the contexts neither
    support nor contradict the claim; "idk" in DeepEval 2.9) counts as faithful unless
    ``penalize_ambiguous_claims``, which is passed to DeepEval (it then counts only "yes").

    Args:
        truths_extraction_limit: At most this many truths taken from the contexts (None = all).
        penalize_ambiguous_claims: Count "borderline" verdicts as unfaithful.
        judge: The judge chat model (``build.build`` injects it; the parameter is named so).
        **kwargs: The other arguments of :class:`DeepEvalMetric`.

    Raises:
        ConfigError: ``truths_extraction_limit`` < 1.
    """

    definition = "faithfulness"
    deepeval_class = "deepeval.metrics:FaithfulnessMetric"
    guards = ("no_claims", "empty_context")
    needs_response = True
    state_attrs = ("truths", "claims", "verdicts")

    def __init__(
        self,
        judge: ChatModel | None = None,
        truths_extraction_limit: int | None = None,
        penalize_ambiguous_claims: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(judge, **kwargs)
        if truths_extraction_limit is not None and int(truths_extraction_limit) < 1:
            raise ConfigError(
                "deepeval faithfulness truths_extraction_limit must be ≥ 1 or "
                f"null, got {truths_extraction_limit}"
            )
        self.truths_extraction_limit = (
            None if truths_extraction_limit is None else int(truths_extraction_limit)
        )
        self.penalize_ambiguous_claims = bool(penalize_ambiguous_claims)

    def _metric_kwargs(self) -> dict[str, Any]:
        return {
            "truths_extraction_limit": self.truths_extraction_limit,
            "penalize_ambiguous_claims": self.penalize_ambiguous_claims,
        }

    def _check(self, metric: Any, case: Any) -> None:
        if metric.verdicts or metric.claims:
            _count_mismatch("claims", len(metric.claims), len(metric.verdicts))


class DeepEvalAnswerRelevancy(DeepEvalMetric):
    """``deepeval.answer_relevancy`` (DeepEval ``AnswerRelevancyMetric``)::

        score = |{statements whose verdict is not "no"}| / |statements|   (1.0 when none)

    ("borderline" counts as relevant, as "idk" did in DeepEval 2.9.)

    Two judge calls (statements of the response; one verdict per statement: is it relevant to
    the question), three with ``include_reason``. Not the custom backend's definition (cosine
    of generated questions, RAGAS): the values are not comparable one for one.
    """

    definition = "answer_relevancy"
    deepeval_class = "deepeval.metrics:AnswerRelevancyMetric"
    guards = ("empty_answer",)
    needs_response = True
    state_attrs = ("statements", "verdicts")

    def _check(self, metric: Any, case: Any) -> None:
        if metric.verdicts or metric.statements:
            _count_mismatch("statements", len(metric.statements), len(metric.verdicts))


class DeepEvalContextPrecision(DeepEvalMetric):
    """``deepeval.context_precision`` (DeepEval ``ContextualPrecisionMetric``)::

        score = Σ_k P@k · rel_k / |relevant contexts|    (0 when none is relevant)

    with rel_k = 1 when the judge says context k is useful for the expected output ("yes").
    One judge call (one verdict per context), two with ``include_reason``. The same formula as
    the custom backend's ``context_precision``. Needs a reference (NaN ``no_reference`` without).
    """

    definition = "context_precision"
    deepeval_class = "deepeval.metrics:ContextualPrecisionMetric"
    guards = ("no_reference", "empty_context")
    needs_reference = True
    state_attrs = ("verdicts",)
    verdict_item = "context"

    def _expected_verdicts(self, case: Any) -> int | None:
        return len(case.retrieval_context)

    def _check(self, metric: Any, case: Any) -> None:
        _count_mismatch("contexts", len(case.retrieval_context), len(metric.verdicts))


class DeepEvalContextRecall(DeepEvalMetric):
    """``deepeval.context_recall`` (DeepEval ``ContextualRecallMetric``)::

        score = |{sentences of the expected output attributed to a context ("yes")}|
                / |sentences|                              (0 when the judge lists none)

    One judge call, two with ``include_reason``. Needs a reference.
    """

    definition = "context_recall"
    deepeval_class = "deepeval.metrics:ContextualRecallMetric"
    guards = ("no_reference", "empty_context")
    needs_reference = True
    state_attrs = ("verdicts",)
    verdict_item = "reference sentence"


class DeepEvalContextRelevancy(DeepEvalMetric):
    """``deepeval.context_relevancy`` (DeepEval ``ContextualRelevancyMetric``, an extra with no
    custom counterpart)::

        score = |{statements of the contexts relevant to the question ("yes")}|
                / |statements of all contexts|             (0 when there is none)

    One judge call per context (statements and their verdicts), one more with
    ``include_reason``. With no context: 0.0 flagged ``empty_context``, no call.
    """

    definition = "context_relevancy"
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                "context_relevancy",
                True,
                0.0,
                1.0,
                "statements of the retrieved contexts relevant to the question / all their "
                "statements",
                "DeepEval ContextualRelevancyMetric (no custom counterpart)",
            ),
        )
    )
    """The one definition with no custom counterpart (the other DeepEval metrics report the
    custom metrics' definitions under the prefix)."""
    deepeval_class = "deepeval.metrics:ContextualRelevancyMetric"
    guards = ("empty_context",)
    state_attrs = ("verdicts_list",)
