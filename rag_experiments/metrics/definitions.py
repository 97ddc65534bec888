"""Metric declarations: what a metric means, declared once on its class, and the registry
that derives every list of metrics from those declarations.

A metric class carries a :class:`MetricDeclaration` (class attribute ``declaration``): its
outputs (:class:`MetricDefinition`: canonical name, range, direction, one-line description,
source of the formula), which of them are *key metrics* and in which order (``key``), how
people grade them (``labels``, :class:`LabelSet`), whether it is offered as an MLflow scorer
(``scorer``) and how ``rag-exp judge-check`` probes it on labeled pairs (``probe``,
:class:`JudgeProbe`). What it needs to be built is ``requires`` and how it is scored (per row
by the judge scheduler or over the whole run) is ``per_row``, both on
:class:`~rag_experiments.protocols.MetricBase`.

Every subclass of :class:`~rag_experiments.protocols.MetricBase` registers itself when its
module is imported (``__init_subclass__``), so a user's metric in an overlay folder joins the
registry as soon as its ``_target_`` is imported (the composition root imports every suite
entry's ``_target_`` before any work). The built-in metrics are found by importing every module
of this package (no hand list). From the registry come :data:`DEFINITIONS` (answer-level
definitions), :data:`~rag_experiments.metrics.keys.KEY_METRICS`, the agreement label sets
(:data:`~rag_experiments.qualify.agreement.LABEL_SETS`), the MLflow scorers
(:func:`~rag_experiments.mlflow_scorers.rag_scorers`) and the judge-check probes
(:data:`~rag_experiments.qualify.check.PROBES`); each is a live view, so a metric registered
later is in it.

A backend computes values for these names; a second backend reports the same definitions under
a prefix (``deepeval.faithfulness``) so both can sit side by side in one run or one sweep.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rag_experiments.errors import ConfigError
from rag_experiments.protocols import metric_classes
from rag_experiments.records import MetricSpec


@dataclass(frozen=True)
class LabelSet:
    """How people grade one metric column (``rag-exp grade-sheet`` / ``agreement``).

    Attributes:
        labels: Allowed labels, worst to best.
        source: The per-query column holding the judge's value.
        to_label: Judge value → label.
        ordinal: Labels are ordered (the quadratic-weighted kappa is reported too).
    """

    labels: tuple[str, ...]
    source: str
    to_label: Callable[[float], str]
    ordinal: bool


def three_way(low: str, mid: str, high: str) -> LabelSet:
    """Three ordered labels of a [0, 1] score: ``s ≥ 0.8`` → ``high``, ``0.4 ≤ s < 0.8`` →
    ``mid``, else ``low`` (the column graded is the metric's own; :meth:`MetricDefinition.
    labels_for` fills it in)."""
    return LabelSet(
        (low, mid, high), "", lambda s: high if s >= 0.8 else (mid if s >= 0.4 else low), True
    )


def rubric_grade(source: str) -> LabelSet:
    """Labels ``1`` … ``5`` of a 1–5 rubric grade read from the column ``source``
    (the judge's raw grade, rounded)."""
    return LabelSet(("1", "2", "3", "4", "5"), source, lambda s: str(int(round(s))), True)


@dataclass(frozen=True)
class MetricDefinition:
    """What one output column of a metric means, independent of how it is computed.

    Attributes:
        name: Canonical name (``faithfulness``).
        higher_is_better: Direction of improvement.
        low: Lowest possible value.
        high: Highest possible value.
        description: One line for the README and the MLflow run.
        source: Where the formula comes from.
        key: Priority of a key metric (smaller = shown first; the first key metric a run has
            is the quality axis of the sweep report's Pareto front); None = not a key metric.
        labels: How people grade it (agreement sheets); None = not graded.
        answer_level: True for an answer-level metric (it is in :data:`DEFINITIONS` and a
            backend prefix may precede it); False for a retrieval column (``nDCG@10``), declared
            only to rank it among the key metrics.
    """

    name: str
    higher_is_better: bool
    low: float
    high: float
    description: str
    source: str
    key: int | None = None
    labels: LabelSet | None = None
    answer_level: bool = True

    def spec(self, prefix: str = "") -> MetricSpec:
        """The :class:`MetricSpec` of this definition, its name prefixed by ``prefix``, with
        the definition's key priority: a backend's column (``deepeval.faithfulness``) is a key
        metric when the definition is, logged and shown by the same rule as ours."""
        return MetricSpec(
            prefix + self.name,
            self.higher_is_better,
            self.low,
            self.high,
            self.description,
            key=self.key,
        )

    def label_set(self) -> LabelSet | None:
        """:attr:`labels` with its source column filled in (the definition's own name when
        the label set names none), or None."""
        if self.labels is None:
            return None
        if self.labels.source:
            return self.labels
        return LabelSet(self.labels.labels, self.name, self.labels.to_label, self.labels.ordinal)


@dataclass(frozen=True)
class JudgeProbe:
    """How ``rag-exp judge-check`` measures a judge through this metric on labeled pairs: each
    pair's answer with its contexts is scored, and the verdict (score ≥ threshold) is compared
    with the pair's label (faithful or hallucinated).

    Attributes:
        column: The output column read.
        labels: Names of the positive and negative verdict.
        prompt: Id (with version) of the prompt the metric asks; part of a qualification's
            identity.
        threshold: Score at or above which the verdict is positive; None = the judge-check's
            ``threshold`` setting.
    """

    column: str
    labels: tuple[str, str]
    prompt: str
    threshold: float | None = None


@dataclass(frozen=True)
class MetricDeclaration:
    """Everything the harness needs to know about a metric class, declared once on it.

    Attributes:
        outputs: Definitions of its output columns (unprefixed). A metric whose columns depend
            on its settings (retrieval cutoffs) declares the ones that rank as key metrics.
        scorer: Offered as an MLflow GenAI scorer (:func:`~rag_experiments.mlflow_scorers.
            rag_scorers`); the class must be a judged per-row metric.
        probe: How ``judge-check`` probes it, or None.
    """

    outputs: tuple[MetricDefinition, ...]
    scorer: bool = False
    probe: JudgeProbe | None = None

    def output(self, name: str) -> MetricDefinition:
        """The definition of output ``name``.

        Raises:
            ConfigError: The declaration has no such output.
        """
        for d in self.outputs:
            if d.name == name:
                return d
        raise ConfigError(
            f"metric declares no output {name!r}; it declares {[d.name for d in self.outputs]}"
        )


_builtins_loaded = False
_builtins_lock = threading.RLock()


def _load_builtins() -> None:
    """Import every module and subpackage of :mod:`rag_experiments.metrics` once, so their
    metric classes register (subpackages import what their ``__init__`` exports). Thread-safe:
    a second caller waits for the first load; the flag is set only after every import
    succeeded, so a failed import raises again on the next use instead of leaving a partial
    registry."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    with _builtins_lock:
        if _builtins_loaded:
            return
        package = importlib.import_module(__name__.rpartition(".")[0])
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
        _builtins_loaded = True


SUITE_TARGET = re.compile(r"^metrics\.suite\.[^.]+\._target_$")
"""Run params naming a metric class (``metrics.suite.<entry>._target_``, as the run logs its
config)."""


def register_run_metrics(params: Mapping[str, str]) -> list[str]:
    """Import the metric classes a logged run names in its params, so a user's metric
    (declared in their own module) is in the registry of a command that reads the run
    (``compare``, ``report``, ``agreement``) as it was in the run's own process.

    Args:
        params: A run's params (``run.data.params``).

    Returns:
        The class paths that could not be imported (their module is not on this process's
        path; the command then goes on without their declarations, as before).
    """
    from hydra.utils import get_class  # as composition imports a suite's _target_

    from rag_experiments.protocols import MetricBase

    missing = []
    for key, target in params.items():
        if SUITE_TARGET.match(key):
            try:
                cls = get_class(str(target))
            except (ImportError, ValueError):
                missing.append(str(target))
                continue
            if isinstance(cls, type) and issubclass(cls, MetricBase):
                try:  # a metric declared by its config (a YAML rubric) declares itself again
                    cls.declared_for(entry_config(params, key.removesuffix("_target_")))
                except ConfigError:
                    missing.append(str(target))
    return missing


def entry_config(params: Mapping[str, str], prefix: str) -> dict[str, Any]:
    """A suite entry's keys back from a logged run's flat params: the params under ``prefix``
    (``metrics.suite.<entry>.``), nested again at their dots, values as MLflow wrote them
    turned back into data (``None``, ``True``/``False``, numbers, JSON lists and mappings);
    ``name`` and ``criteria`` stay text.

    Args:
        params: A run's params.
        prefix: The entry's prefix, dot included.
    """
    out: dict[str, Any] = {}
    for full, raw in params.items():
        if not full.startswith(prefix):
            continue
        key = full[len(prefix) :]
        value: Any = raw
        if key in ("name", "criteria"):
            value = raw
        elif raw == "None":
            value = None
        elif raw in ("True", "False"):
            value = raw == "True"
        elif raw.startswith(("[", "{")):
            try:
                value = json.loads(raw)
            except ValueError:
                value = raw
        else:
            for kind in (int, float):
                try:
                    value = kind(raw)
                    break
                except ValueError:
                    continue
        node = out
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def declared_metrics() -> list[type[Any]]:
    """Every registered metric class that declares itself (``declaration`` set on the class
    itself), the built-in ones first loaded; ordered by their most important key metric, then
    by registration.

    Returns:
        Metric classes; each has a :class:`MetricDeclaration` as ``declaration``.
    """
    _load_builtins()
    found = [
        c for c in metric_classes() if isinstance(c.__dict__.get("declaration"), MetricDeclaration)
    ]

    def rank(cls: type[Any]) -> float:
        keys = [d.key for d in cls.declaration.outputs if d.key is not None]
        return min(keys) if keys else float("inf")

    return sorted(found, key=rank)


def declared_outputs() -> list[MetricDefinition]:
    """Every declared output definition, each name once (the first declaration wins), in
    :func:`declared_metrics` order."""
    out: dict[str, MetricDefinition] = {}
    for cls in declared_metrics():
        for d in cls.declaration.outputs:
            out.setdefault(d.name, d)
    return list(out.values())


K = TypeVar("K")
V = TypeVar("V")


class LiveMapping(Mapping[K, V]):
    """A read-only mapping recomputed from the registry at every use (so a metric registered
    after import is in it). ``build`` returns the current content as a dict."""

    def __init__(self, build: Callable[[], dict[K, V]]) -> None:
        self._build = build

    def __getitem__(self, key: K) -> V:
        return self._build()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())

    def __repr__(self) -> str:
        return repr(self._build())


class LiveSequence(Sequence[V]):
    """A read-only sequence recomputed from the registry at every use (see
    :class:`LiveMapping`)."""

    def __init__(self, build: Callable[[], tuple[V, ...]]) -> None:
        self._build = build

    def __getitem__(self, index: Any) -> Any:
        return self._build()[index]

    def __len__(self) -> int:
        return len(self._build())

    def __iter__(self) -> Iterator[V]:
        return iter(self._build())

    def __contains__(self, item: object) -> bool:
        return item in self._build()

    def __repr__(self) -> str:
        return repr(self._build())


DEFINITIONS: Mapping[str, MetricDefinition] = LiveMapping(
    lambda: {d.name: d for d in declared_outputs() if d.answer_level}
)
"""Every answer-level metric definition, by canonical name (from the declared metrics)."""


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
    defined = dict(DEFINITIONS)
    try:
        return defined[name].spec(prefix)
    except KeyError:
        raise ConfigError(f"unknown metric {name!r}; defined metrics: {sorted(defined)}") from None


RAGAS = "RAGAS (Es et al., 2023; docs.ragas.io metrics)"
"""Source line of the RAGAS formulas."""
JUDGE_RUBRIC = "the seed tool's LLM-judge rubric (1-5), normalised as (s - 1) / 4"
"""Source line of the answer-judge rubric."""
