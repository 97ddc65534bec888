"""The gate's rules as written and as read: the verdict names and exit codes, :class:`Rule` and
:class:`GateSettings`, the strict (pydantic) parsing of a gate config (:func:`parse_settings`),
and the checks a rule can fail before any statistics: a metric the run does not compute, a
bound outside the metric's range, an alias name the store cannot hold or that is reserved."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rag_experiments.config.stats_defaults import ALPHA, MIN_PAIRS, N_RESAMPLES, SEED
from rag_experiments.errors import ConfigError

PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"
EXIT_CODES = {PASS: 0, FAIL: 1, UNDECIDED: 2}
"""Process exit code of each gate result."""

LAST = "last"
"""Run reference meaning the newest finished run of an experiment (for CI scripts, which do not
know the id of the run they just made)."""

RESERVED_ALIASES = frozenset({LAST})
"""Names ``rag-exp promote --alias`` refuses: they mean something else where a run is named."""


@dataclass(frozen=True)
class Rule:
    """The rules of one metric.

    Attributes:
        metric: Canonical metric name (``nDCG@10``).
        min: Floor on the candidate's mean, or None.
        max: Ceiling on the candidate's mean, or None.
        max_drop: Largest worsening against the baseline (metric units, ≥ 0), or None.
        by_type: Apply the rules per question type too.
    """

    metric: str
    min: float | None = None
    max: float | None = None
    max_drop: float | None = None
    by_type: bool = False


@dataclass(frozen=True)
class GateSettings:
    """What the gate checks and how.

    Attributes:
        rules: One :class:`Rule` per metric.
        alpha: Family-wise error rate of the ``max_drop`` tests (Holm), in (0, 1).
        min_pairs: Fewest paired rows (rows with values) a rule decides on.
        seed: Seed of the bootstrap and permutation test.
        n_resamples: Resamples of each bootstrap and test.
    """

    rules: tuple[Rule, ...]
    alpha: float = ALPHA
    min_pairs: int = MIN_PAIRS
    seed: int = SEED
    n_resamples: int = N_RESAMPLES

    @property
    def needs_baseline(self) -> bool:
        """Whether a rule compares against a baseline (``max_drop``)."""
        return any(r.max_drop is not None for r in self.rules)


class _RuleSpec(BaseModel):
    """One metric's rules as written (strict: a bool is no number, a string no bool)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    min: float | None = None
    max: float | None = None
    max_drop: float | None = Field(default=None, ge=0.0)
    by_type: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> _RuleSpec:
        if self.min is None and self.max is None and self.max_drop is None:
            raise ValueError("sets none of min, max, max_drop; give e.g. {max_drop: 0.02}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(
                f"min {self.min:g} > max {self.max:g}: no mean can pass; swap or fix them"
            )
        return self


class _GateSpec(BaseModel):
    """A gate config as written: the keys of :class:`~rag_experiments.config.schema.GateConf`
    (``baseline``, ``junit``, ``markdown`` are the caller's)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    rules: dict[str, _RuleSpec]
    alpha: float = Field(default=ALPHA, gt=0.0, lt=1.0)
    min_pairs: int = Field(default=MIN_PAIRS, ge=2)
    seed: int = SEED
    n_resamples: int = Field(default=N_RESAMPLES, ge=1)
    baseline: str | None = None
    junit: str | None = None
    markdown: str | None = None


_FIXES = {
    "float_type": "give a number, e.g. 0.05 (not true/false, not quoted)",
    "int_type": "give an integer, e.g. 5 (not true/false, not quoted)",
    "bool_type": "give true or false (not quoted)",
    "finite_number": "give a finite number",
    "greater_than": "raise it",
    "greater_than_equal": "raise it",
    "less_than": "lower it",
    "less_than_equal": "lower it",
    "string_type": "give a string",
}


def _config_error(where: str, exc: ValidationError) -> ConfigError:
    """The first error of ``exc`` as one line: the file, the dotted key, what is wrong, the fix
    (an unknown key gets the closest allowed key, ``difflib``)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(part) for part in err["loc"]]
    key = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _RuleSpec if len(loc) == 3 and loc[0] == "rules" else _GateSpec
        allowed = sorted(model.model_fields)
        close = difflib.get_close_matches(loc[-1], allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return ConfigError(f"{where}: unknown key {key}; {hint}the keys are {', '.join(allowed)}")
    if kind == "value_error":  # our own checks of a rule: the message says the fix
        return ConfigError(f"{where}: {key}: {err['msg'].removeprefix('Value error, ')}")
    if kind in ("dict_type", "model_type"):
        want = "{metric: {max_drop: 0.02}}" if key == "rules" else "{min: 0.8}"
        return ConfigError(f"{where}: {key}={err['input']!r} is not a mapping; give e.g. {want}")
    fix = _FIXES.get(kind, "see docs/how-to/ci-gate.md")
    return ConfigError(f"{where}: {key}={err['input']!r}: {err['msg'].lower()}; {fix}")


def parse_settings(raw: Mapping[str, Any], where: str = "gate config") -> GateSettings:
    """Read ``{alpha, min_pairs, seed, n_resamples, rules: {metric: {min, max, max_drop,
    by_type}}}`` (``baseline``, ``junit``, ``markdown`` are the caller's), validated by
    pydantic in strict mode: a bool is not a number, a string is neither a number nor a bool,
    an unknown key is refused (with the closest known one).

    Raises:
        ConfigError: One line naming ``where`` and the key: no rule, an unknown key, a wrong
            type, a non-finite number, a negative ``max_drop``, ``min`` > ``max``, a rule with
            no limit, an ``alpha`` outside (0, 1), ``min_pairs`` < 2, ``n_resamples`` < 1.
    """
    rules_raw = raw.get("rules")
    if not rules_raw:
        raise ConfigError(
            f"{where}: no rules; give e.g. rules: {{nDCG@10: {{max_drop: 0.02}}, "
            "faithfulness: {min: 0.8}}"
        )
    try:
        spec = _GateSpec.model_validate(dict(raw))
    except ValidationError as exc:
        raise _config_error(where, exc) from None
    rules = tuple(
        Rule(str(metric), r.min, r.max, r.max_drop, r.by_type) for metric, r in spec.rules.items()
    )
    return GateSettings(rules, spec.alpha, spec.min_pairs, spec.seed, spec.n_resamples)


def rule_limits(rule: Rule) -> list[tuple[str, float]]:
    """The rule's ``(kind, limit)`` pairs that are set, in the order min, max, max_drop."""
    pairs = (("min", rule.min), ("max", rule.max), ("max_drop", rule.max_drop))
    return [(kind, limit) for kind, limit in pairs if limit is not None]


class _Declared(Protocol):
    """A declared metric column: :class:`~rag_experiments.records.MetricSpec` before a run,
    :class:`~rag_experiments.analysis.runs.MetricInfo` read back from one."""

    name: str
    low: float
    high: float


def check_rule_metrics(settings: GateSettings, specs: Sequence[_Declared]) -> None:
    """Refuse rules naming a metric the run does not compute, or a bound no mean of the metric
    can meet (checked before any work, and by ``rag-exp gate`` before it reads the tables).

    Args:
        settings: The rules.
        specs: The run's metric columns: every metric's ``specs()`` (a per-type rule names the
            plain column; ``by_type`` handles the types), each with its declared range.

    Raises:
        ConfigError: A rule's metric is not among ``specs`` (the message suggests the closest
            name, ``difflib.get_close_matches``); or its ``min`` lies above the metric's
            highest value or its ``max`` below its lowest (the rule could never pass).
    """
    declared = {s.name: s for s in specs}
    known = sorted(declared)
    folded = {name.casefold(): name for name in known}
    for rule in settings.rules:
        spec = declared.get(rule.metric)
        if spec is None:
            close = difflib.get_close_matches(rule.metric.casefold(), list(folded), n=1)
            hint = f"did you mean {folded[close[0]]!r}? " if close else ""
            shown = ", ".join(known[:20]) + (
                f", … ({len(known)} in all)" if len(known) > 20 else ""
            )
            raise ConfigError(
                f"gate: rules.{rule.metric} names a metric this run does not compute; {hint}"
                f"the run computes {shown or 'none'}"
            )
    check_bounds(settings, specs)


def check_bounds(settings: GateSettings, specs: Sequence[_Declared]) -> None:
    """Refuse a ``min`` above its metric's highest value or a ``max`` below its lowest: no
    mean could pass (a rule whose metric is not in ``specs`` is left to the caller).

    Raises:
        ConfigError: The first such bound, with the metric's declared range.
    """
    declared = {s.name: s for s in specs}
    for rule in settings.rules:
        spec = declared.get(rule.metric)
        if spec is None:
            continue
        if rule.min is not None and rule.min > spec.high:
            kind, bound = "min", rule.min
        elif rule.max is not None and rule.max < spec.low:
            kind, bound = "max", rule.max
        else:
            continue
        raise ConfigError(
            f"gate: rules.{rule.metric}.{kind}={bound:g} is outside the metric's range "
            f"[{spec.low:g}, {spec.high:g}]: no mean can pass; give a {kind} within it"
        )


def check_alias_name(alias: str) -> None:
    """Refuse an alias name a tag key cannot hold or that means something else
    (:data:`RESERVED_ALIASES`).

    Raises:
        ConfigError: An alias that is empty, holds characters other than letters, digits,
            ``_``, ``-``, ``.``, or is reserved.
    """
    if not alias or not all(c.isalnum() or c in "_-." for c in alias):
        raise ConfigError(f"alias {alias!r}: use letters, digits, '_', '-', '.' (e.g. production)")
    if alias.casefold() in RESERVED_ALIASES:
        raise ConfigError(
            f"alias {alias!r} is reserved: `{LAST}` means the newest finished run of the "
            "experiment; pick another name (e.g. production)"
        )
