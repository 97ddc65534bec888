"""The DeepEval backend: the answer metrics computed by DeepEval's own metric classes
(``metrics=deepeval``), reported under the ``deepeval.`` prefix beside the custom backend.

- :mod:`~rag_experiments.metrics.deepeval_backend.judge_llm`: :class:`JudgeLLM`, our chat model
  as a DeepEval model (structured output, our cache, timeouts, retries and audit);
- :mod:`~rag_experiments.metrics.deepeval_backend.base`: :class:`DeepEvalMetric`, one DeepEval
  metric called synchronously per row (rows concurrently), with a wall-clock timeout and
  per-row error capture;
- :mod:`~rag_experiments.metrics.deepeval_backend.metrics`: the five metric classes.

DeepEval is imported lazily (when the first metric is built, on the building thread), after
:func:`rag_experiments.offline.enforce_offline` has switched its telemetry off.
"""

from rag_experiments.metrics.deepeval_backend.base import DeepEvalMetric
from rag_experiments.metrics.deepeval_backend.metrics import (
    DeepEvalAnswerRelevancy,
    DeepEvalContextPrecision,
    DeepEvalContextRecall,
    DeepEvalContextRelevancy,
    DeepEvalFaithfulness,
)

__all__ = [
    "DeepEvalAnswerRelevancy",
    "DeepEvalContextPrecision",
    "DeepEvalContextRecall",
    "DeepEvalContextRelevancy",
    "DeepEvalFaithfulness",
    "DeepEvalMetric",
]
