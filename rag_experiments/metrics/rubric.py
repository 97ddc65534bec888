"""Rubric judges declared in YAML, no Python: a suite entry becomes a full judged metric.

A suite entry (``conf/metrics/rubrics.yaml`` ships two)::

    cites_source:
      _target_: rag_experiments.metrics.rubric.RubricJudge
      name: cites_source                    # the metric's column
      criteria: The answer names the document its facts come from.
      steps: [Find the facts the answer states., Check each names its source document.]
      scale: binary                         # or {1: "…", 2: "…", …, N: "…"}
      reads: [question, contexts, answer]   # + reference, metadata.<field>
      higher_is_better: true
      threshold: 0.5                        # normalised value ≥ threshold → verdict "pass"
      examples: null                        # few-shot examples (a file of `rag-exp align`)

One judge call per row asks the prompt built from the entry
(:mod:`~rag_experiments.metrics.prompts.rubric`, the G-Eval layout: Liu et al., EMNLP 2023) and
the judge returns ``{"rationale", "grade"}`` with a grade of the scale. Two columns::

    <name>     = (grade − low) / (high − low) ∈ [0, 1]     (binary: the grade itself)
    <name>_raw = grade ∈ {low, …, high}

The rationale is in the judge audit (``rationale`` lines, the MLflow trace assessments).
Each entry is its own metric: a class made for its content (:func:`rubric_class`) declares its
outputs (a key metric after the built-in ones, its label set — ``fail``/``pass`` for a binary
scale, the grades for 1–N —, an MLflow scorer and a ``judge-check`` probe), so the per-query
table, traces, ``compare``, the gate, ``judge.repeats``, PPI (``calibration.labels`` on
``<name>``) and ``agreement`` treat it as any built-in judged metric.

Edges (a value or a reason, never a silent 0):

- target failed → NaN ``target_error``; no answer recorded → NaN ``no_response``;
- blank answer → NaN ``empty_answer`` (no judge call);
- the rubric reads ``reference`` and the sample has none → NaN ``no_reference``;
- it reads ``metadata.<field>`` and the sample's metadata lacks it → NaN ``no_<field>``;
- it reads ``contexts`` and none was retrieved → judged with ``(no passage retrieved)`` shown
  (an answer that says the documents do not answer can still pass);
- judge failure → NaN with its reason.

Typos are refused when the config is composed: a key that is not a parameter by the suite
check (``critera`` → "did you mean criteria"), a bad scale, field or name by
:meth:`RubricJudge.declared_for`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import ChatModel
from rag_experiments.metrics.definitions import (
    JudgeProbe,
    LabelSet,
    MetricDeclaration,
    MetricDefinition,
)
from rag_experiments.metrics.judge import JudgedMetric
from rag_experiments.metrics.prompts import rubric as prompt
from rag_experiments.metrics.prompts.base import SYSTEM, format_contexts
from rag_experiments.records import MetricValue, RagResponse, Sample

G_EVAL = (
    "a user's rubric in the G-Eval layout (Liu et al., 'G-Eval: NLG Evaluation using GPT-4 "
    "with Better Human Alignment', EMNLP 2023), normalised as (grade - low) / (high - low)"
)
"""Source line of every rubric metric."""

RUBRIC_KEY = 150
"""Key-metric priority of a rubric's normalised column (after the built-in ones, 10–140)."""

NO_CONTEXT = "(no passage retrieved)"
"""What the prompt shows for an empty context list."""

_CONTENT_KEYS = ("name", "criteria", "steps", "scale", "reads", "higher_is_better", "threshold")

_CLASSES: dict[str, type[RubricJudge]] = {}


def _plain(value: Any) -> Any:
    """Mappings and sequences (a composed config's nodes too) → dicts and lists, recursively;
    text and scalars as they are."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value


def _content(config: Mapping[str, Any]) -> dict[str, Any]:
    """The rubric keys of ``config`` with the defaults filled in, as plain data."""
    defaults = {
        p.name: None if p.default is inspect.Parameter.empty else p.default
        for p in inspect.signature(RubricJudge.__init__).parameters.values()
    }  # the constructor's defaults: declared once
    return {k: _plain(config.get(k, defaults[k])) for k in _CONTENT_KEYS}


def rubric_class(config: Mapping[str, Any], where: str = "metrics.suite") -> type[RubricJudge]:
    """The :class:`RubricJudge` subclass of one rubric's content, made once per content and
    registered (its ``declaration`` joins every derived list).

    Args:
        config: The rubric keys (:data:`_CONTENT_KEYS`; missing ones take the defaults of
            :class:`RubricJudge`'s constructor).
        where: The config key, for messages.

    Raises:
        ConfigError: A bad value (see :func:`~rag_experiments.metrics.prompts.rubric.
            parse_rubric`), a threshold outside [0, 1].
    """
    content = _content(config)
    where = f"{where}.{content['name']}" if isinstance(content["name"], str) else where
    rubric = prompt.parse_rubric(
        content["name"],
        content["criteria"],
        content["steps"],
        content["scale"],
        content["reads"],
        where,
    )
    try:
        threshold = float(content["threshold"])
    except (TypeError, ValueError):
        threshold = -1.0
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"{where}.threshold: {content['threshold']!r} is not in [0, 1]")
    hib = content["higher_is_better"]
    if not isinstance(hib, bool):
        raise ConfigError(f"{where}.higher_is_better: write true or false, got {hib!r}")
    identity = json.dumps(
        [rubric.prompt.id, hib, threshold, sorted(rubric.levels.items())], default=str
    )
    made = _CLASSES.get(identity)
    if made is None:
        made = _make(rubric, hib, threshold)
        _CLASSES[identity] = made
    return made


def _label_set(rubric: prompt.Rubric, threshold: float) -> LabelSet:
    if rubric.binary:
        return LabelSet(
            ("fail", "pass"), rubric.name, lambda s: "pass" if s >= threshold else "fail", False
        )
    return LabelSet(
        tuple(str(g) for g in rubric.levels),
        f"{rubric.name}_raw",
        lambda s: str(int(round(s))),
        True,
    )


def _make(rubric: prompt.Rubric, higher_is_better: bool, threshold: float) -> type[RubricJudge]:
    the_prompt = rubric.prompt
    criteria = " ".join(rubric.criteria.split())
    short = criteria if len(criteria) <= 90 else criteria[:87] + "..."
    source = f"{G_EVAL}; prompt {the_prompt.id}"
    declaration = MetricDeclaration(
        outputs=(
            MetricDefinition(
                rubric.name,
                higher_is_better,
                0.0,
                1.0,
                f"rubric ({the_prompt.id}): {short}",
                source,
                key=RUBRIC_KEY,
                labels=_label_set(rubric, threshold),
            ),
            MetricDefinition(
                f"{rubric.name}_raw",
                higher_is_better,
                float(rubric.low),
                float(rubric.high),
                f"the judge's grade as given ({rubric.low}-{rubric.high}) of rubric {rubric.name}",
                source,
            ),
        ),
        scorer=True,
        probe=JudgeProbe(rubric.name, ("faithful", "hallucinated"), the_prompt.id, threshold),
    )
    preview = {
        "id": the_prompt.id,
        "system": SYSTEM,
        "user": the_prompt.template.replace("{{", "{").replace("}}", "}").split("\n"),
    }
    attrs = {
        "name": rubric.name,
        "declaration": declaration,
        "rubric": rubric,
        "threshold": threshold,
        "higher_is_better": higher_is_better,
        "preview": preview,
        "example_fields": tuple(r for r in rubric.reads if not r.startswith("metadata.")),
        "__module__": __name__,
        "__doc__": f"Rubric {rubric.name} ({the_prompt.id}): {criteria}",
    }
    return type(f"Rubric[{rubric.name}]", (RubricJudge,), attrs)


class RubricJudge(JudgedMetric):
    """A judged metric declared by its suite entry (see the module docstring).

    Constructing ``RubricJudge(name=…, criteria=…, …)`` returns an instance of the class made
    for that content (:func:`rubric_class`); that class can be built again with the judge alone
    (``judge-check`` and the MLflow scorers do).

    Args:
        judge: The judge chat model.
        name: Metric name (its columns: ``<name>``, ``<name>_raw``).
        criteria: What the answer is graded on.
        steps: Evaluation steps, in order (G-Eval); None = none.
        scale: ``binary`` or ``{grade: description}`` for grades 1..N (or 0..N).
        reads: Fields shown to the judge: ``question``, ``answer``, ``contexts``,
            ``reference``, ``metadata.<field>``.
        higher_is_better: Direction of the metric.
        threshold: Normalised value at or above which the verdict is positive (``pass``;
            judge-check, ``rag-exp align``).
        examples: Few-shot examples (:mod:`~rag_experiments.metrics.fewshot`).
        max_retries: Retries of an invalid judge output.
        max_tokens: Completion limit per judge call.
        prefix: Column-name prefix.

    Raises:
        ConfigError: A bad rubric value (the message names the key).
    """

    name = "rubric"
    rubric: ClassVar[prompt.Rubric]
    threshold: ClassVar[float]
    higher_is_better: ClassVar[bool]

    def __new__(cls, *args: Any, **kwargs: Any) -> RubricJudge:
        if cls is RubricJudge:
            cls = rubric_class(kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        judge: ChatModel | None = None,
        name: str | None = None,
        criteria: str | None = None,
        steps: Any = None,
        scale: Any = "binary",
        reads: Any = ("question", "answer"),
        higher_is_better: bool = True,
        threshold: float = 0.5,
        examples: Any = None,
        max_retries: int = 1,
        max_tokens: int = 256,
        prefix: str = "",
    ) -> None:
        if type(self) is RubricJudge:  # pragma: no cover - __new__ always picks the subclass
            raise ConfigError("RubricJudge needs name and criteria")
        super().__init__(judge, max_retries, max_tokens, prefix, examples)

    @classmethod
    def declared_for(cls, config: Mapping[str, Any]) -> type[RubricJudge]:
        """The class made for the rubric of ``config`` (a suite entry or a logged run's
        params), registered; see :func:`rubric_class`.

        Raises:
            ConfigError: A bad rubric value.
        """
        return rubric_class(config)

    def _score(
        self, sample: Sample, resp: RagResponse
    ) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        if resp.unanswered:
            return self._nan_all(resp.unanswered)
        answer = resp.response.strip()
        if not answer:
            return self._nan_all("empty_answer")
        rubric = self.rubric
        fields: dict[str, Any] = {"question": sample.user_input, "answer": answer}
        if "reference" in rubric.reads:
            if not sample.reference.strip():
                return self._nan_all("no_reference")
            fields["reference"] = sample.reference.strip()
        if "contexts" in rubric.reads:
            contexts = list(resp.retrieved_contexts)
            fields["contexts"] = format_contexts(contexts) if contexts else NO_CONTEXT
        for read in rubric.reads:
            if read.startswith("metadata."):
                key = read.partition(".")[2]
                value = sample.metadata.get(key)
                if value is None or not str(value).strip():
                    return self._nan_all(f"no_{key}")
                fields[f"metadata_{key}"] = value
        judgement, record = self._ask(
            rubric.prompt, fields, prompt.output_model(rubric.low, rubric.high)
        )
        if judgement.parsed is None:
            return self._nan_all(judgement.error or "judge_error")[0], record
        grade = int(judgement.parsed.grade)  # type: ignore[attr-defined]
        record.update(scores={rubric.name: grade}, feedback=judgement.parsed.rationale)  # type: ignore[attr-defined]
        return {
            rubric.name: MetricValue(rubric.normalise(grade)),
            f"{rubric.name}_raw": MetricValue(float(grade)),
        }, record
