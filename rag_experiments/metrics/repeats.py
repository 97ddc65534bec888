"""Judge stability: judging every (row, metric) several times (``judge.repeats``) and what the
spread between the repeats says.

An LLM judge is a noisy instrument: the same row judged twice can get another verdict (a
sampled token, a context shown in another order). A difference between two runs smaller than
that noise is not a difference. With ``judge.repeats=N`` (N > 1) the judge scheduler
(:mod:`~rag_experiments.metrics.scheduler`) asks every judged metric N times per row, varying
only what ``judge.vary`` names:

* ``seed`` (default): repeat ``r`` sends ``seed = base + r`` with the judge call (``base`` is
  the judge's configured ``seed``, 0 when it has none). This is the judge's sampling noise at
  its configured temperature; a deterministic judge at temperature 0 shows none.
* ``context_order``: repeat ``r`` shows the retrieved contexts (and their ids) in a seeded
  permutation (``random.Random(f"{base}:{sample id}:{r}").shuffle``): position bias. Metrics
  whose value is rank-weighted (``context_precision``) then mix the judge's noise with the
  effect of the order itself; read their spread with that in mind.
* ``temperature``: repeat ``r`` samples at ``judge.vary_temperature`` (default 0.7) with
  ``seed = base + r``: how far verdicts move when the judge samples.

Repeat 0 is always the call a run without repeats makes: the same prompt, options and response
cache key, so earlier caches and ``rag-exp rerun`` of earlier runs still hit. Repeats ``r >= 1``
carry ``r`` in their cache key (:func:`~rag_experiments.llm.cache.request_key`).

**What is logged** (for every judged column ``<m>``, only when N > 1):

* the row's value: the mean of its valid (non-NaN) repeats; NaN with repeat 0's reason when no
  repeat is valid;
* per-query column ``<m>.sd``: the row's **sample** standard deviation over its valid repeats
  (``ddof=1``; NaN with fewer than 2). Sample, not population: the N repeats are a sample of
  the verdicts the judge could give, and what a reader needs is an estimate of that noise, which
  the population formula underestimates by ``sqrt((N-1)/N)`` (18 % at N=3);
* per-query column ``<m>.flip``: whether the row's verdict differs between its repeats (empty
  with fewer than 2 valid repeats); ``rag-exp merge`` recomputes ``<m>.flip_rate`` from it;
* run metric ``<m>.judge_sd``: the pooled within-row SD over the rows that have an ``<m>.sd``,
  ``sqrt(mean(sd_i²))`` (the root of the mean within-row variance, Bland & Altman 1996: the
  mean of the SDs would underestimate it);
* run metric ``<m>.flip_rate``: the share of those rows whose **verdict** differs between
  repeats, where a value's verdict is ``value >= `` the midpoint of the column's declared range
  (``(low + high) / 2`` of its :class:`~rag_experiments.records.MetricSpec`: 0.5 for the
  [0, 1] metrics, :data:`FLIP_THRESHOLD`; 3 for a raw 1–5 grade). A row whose repeats are 0.6
  and 0.9 does not flip (its spread shows in ``<m>.sd``); 0.4 and 0.6 do.

Sources: the within-item standard deviation of repeated measurements is the usual
test-retest reliability measure (Bland & Altman, "Measurement error", BMJ 1996).
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import RepeatCall, RepeatScope
from rag_experiments.metrics.audit import RATIONALE_KEY, USAGE_KEYS
from rag_experiments.records import MetricValue, RagResponse, Sample

VARY_CHOICES = ("seed", "context_order", "temperature")
"""Values of ``judge.vary``."""

FLIP_THRESHOLD = 0.5
"""A [0, 1] value's verdict is ``value >= FLIP_THRESHOLD`` (see the module docstring)."""

SD_SUFFIX = ".sd"
"""Per-query column of a row's spread: ``<metric>.sd``."""
FLIP_SUFFIX = ".flip"
"""Per-query column of whether a row's verdict flips between repeats: ``<metric>.flip``."""
JUDGE_SD_SUFFIX = ".judge_sd"
"""Run metric: pooled within-row SD ``sqrt(mean(sd_i²))``, ``<metric>.judge_sd``."""
FLIP_RATE_SUFFIX = ".flip_rate"
"""Run metric: share of rows whose verdict flips, ``<metric>.flip_rate``."""


@dataclass(frozen=True)
class JudgeRepeats:
    """How often each (row, metric) is judged and what varies between the repeats.

    Args:
        repeats: Judgements per (row, metric), >= 1 (1 = today's single judgement).
        vary: One of :data:`VARY_CHOICES`.
        temperature: Sampling temperature of repeats ``>= 1`` with ``vary="temperature"``.
        base_seed: The judge's own seed; repeat ``r`` sends ``base_seed + r``.
        scope: Which repeat the judge's calls belong to, owned by these repeats (one per job):
            the judge scheduler enters it (:meth:`entered`), the judge's response cache is
            built with it (``build.build``) and reads it. Not part of equality.

    Raises:
        ConfigError: ``repeats`` < 1, an unknown ``vary`` or a negative ``temperature``.
    """

    repeats: int = 1
    vary: str = "seed"
    temperature: float = 0.7
    base_seed: int = 0
    scope: RepeatScope = field(default_factory=RepeatScope, compare=False, repr=False)

    def __post_init__(self) -> None:
        if int(self.repeats) < 1:
            raise ConfigError(
                f"judge.repeats must be >= 1 (judgements per row and metric), got {self.repeats}"
            )
        if self.vary not in VARY_CHOICES:
            raise ConfigError(
                f"judge.vary={self.vary!r} is not one of {', '.join(VARY_CHOICES)}: set what "
                "changes between judge repeats"
            )
        if float(self.temperature) < 0:
            raise ConfigError(f"judge.vary_temperature must be >= 0, got {self.temperature}")

    def call(self, repeat: int) -> RepeatCall | None:
        """What repeat ``repeat`` changes in the judge's calls (None for repeat 0: nothing)."""
        if repeat == 0:
            return None
        if self.vary == "seed":
            return RepeatCall(repeat, {"seed": self.base_seed + repeat})
        if self.vary == "temperature":
            return RepeatCall(
                repeat, {"temperature": float(self.temperature), "seed": self.base_seed + repeat}
            )
        return RepeatCall(repeat)  # context_order: the prompt changes, not the options

    def entered(self, repeat: int) -> AbstractContextManager[None]:
        """A block whose judge calls belong to repeat ``repeat``: :attr:`scope` entered with
        :meth:`call` (nothing changes for repeat 0)."""
        return self.scope.entered(self.call(repeat))

    def view(self, repeat: int, sample: Sample, resp: RagResponse) -> RagResponse:
        """The response the judge sees in repeat ``repeat``: ``resp`` itself, or with
        ``vary="context_order"`` and ``repeat >= 1`` its contexts (and chunk ids) permuted by
        ``random.Random(f"{base_seed}:{sample.id}:{repeat}")``."""
        n = len(resp.retrieved_contexts)
        if repeat == 0 or self.vary != "context_order" or n < 2:
            return resp
        order = list(range(n))
        random.Random(f"{self.base_seed}:{sample.id}:{repeat}").shuffle(order)
        ids = resp.retrieved_ids
        return dataclasses.replace(
            resp,
            retrieved_contexts=[resp.retrieved_contexts[i] for i in order],
            retrieved_ids=[ids[i] for i in order] if ids is not None and len(ids) == n else ids,
        )


@dataclass
class RepeatSummary:
    """The spread of one metric's repeats over all rows.

    Attributes:
        sd: ``{column: one sample SD per row}`` (NaN for a row with < 2 valid repeats).
        flipped: ``{column: per row, whether its verdict differs between repeats}`` (None for a
            row with < 2 valid repeats).
    """

    sd: dict[str, list[float]] = field(default_factory=dict)
    flipped: dict[str, list[bool | None]] = field(default_factory=dict)

    def run_values(self) -> dict[str, float]:
        """``<column>.judge_sd`` and ``<column>.flip_rate`` over the rows with >= 2 valid
        repeats; NaN when there are none.

        ``judge_sd`` is the within-subject SD of Bland & Altman ("Measurement error", BMJ
        1996): ``sqrt(mean_i(s_i²))``, the root of the mean of the rows' sample variances
        (``ddof=1``), not the mean of their SDs. ``flip_rate`` is the share of rows that flip.
        """
        return judge_noise(self.sd, self.flipped)


def judge_noise(
    sd: Mapping[str, Sequence[float]], flipped: Mapping[str, Sequence[bool | None]]
) -> dict[str, float]:
    """``<column>.judge_sd`` (pooled within-row SD, ``sqrt(mean(s_i²))`` over the rows with an
    SD; Bland & Altman, BMJ 1996) and ``<column>.flip_rate`` (share of the rows with a flip
    verdict that flip) per column; NaN when no row has one.

    Args:
        sd: ``{column: per row, its sample SD over the repeats (NaN with < 2 valid)}``.
        flipped: ``{column: per row, whether its verdict flips (None with < 2 valid)}``;
            must have the columns of ``sd``.

    Returns:
        ``{"<column>.judge_sd": float >= 0, "<column>.flip_rate": float in [0, 1]}``.
    """
    out: dict[str, float] = {}
    for col, sds in sd.items():
        valid = [s for s in sds if not math.isnan(s)]
        flips = [f for f in flipped[col] if f is not None]
        pooled = math.sqrt(statistics.fmean(s * s for s in valid)) if valid else math.nan
        out[col + JUDGE_SD_SUFFIX] = pooled
        out[col + FLIP_RATE_SUFFIX] = sum(flips) / len(flips) if flips else math.nan
    return out


def combine_row(
    repeats: Sequence[dict[str, MetricValue]],
    thresholds: Mapping[str, float] | None = None,
) -> tuple[dict[str, MetricValue], dict[str, float], dict[str, bool | None]]:
    """One row's value per column from its repeats.

    Args:
        repeats: One ``{column: MetricValue}`` per repeat, repeat 0 first.
        thresholds: Verdict threshold per column (the midpoint of its range); a column not
            in it uses :data:`FLIP_THRESHOLD`.

    Returns:
        ``(values, sd, flipped)``: per column the mean of the valid repeats (NaN with repeat
        0's reason, or the first reason given, when none is valid), their sample SD (NaN with
        fewer than 2) and whether their verdicts (``>=`` the column's threshold) differ
        (None with fewer than 2).
    """
    values: dict[str, MetricValue] = {}
    sd: dict[str, float] = {}
    flipped: dict[str, bool | None] = {}
    for col in repeats[0]:
        cells = [r.get(col, MetricValue.nan("missing")) for r in repeats]
        valid = [c.value for c in cells if c.is_valid]
        if valid:
            values[col] = MetricValue(statistics.fmean(valid))
        else:
            values[col] = MetricValue.nan(next((c.reason for c in cells if c.reason), "missing"))
        if len(valid) >= 2:
            sd[col] = statistics.stdev(valid)
            cut = (thresholds or {}).get(col, FLIP_THRESHOLD)
            flipped[col] = len({v >= cut for v in valid}) > 1
        else:
            sd[col], flipped[col] = math.nan, None
    return values, sd, flipped


def combine_audit(
    records: Sequence[dict[str, Any]], vary: str, values: Sequence[dict[str, MetricValue]]
) -> dict[str, Any]:
    """One row's audit record from its repeats' records: repeat 0's record with ``repeat: 0``,
    the others under ``repeats`` (each with its ``repeat`` index), the usage counters summed
    over all repeats, and a first rationale line saying the value is the mean
    (``mean of 3 judge repeats (judge.vary=seed): faithfulness 1, 0, 1``)."""
    out = dict(records[0])
    out["repeat"] = 0
    out["repeats"] = [{**rec, "repeat": r} for r, rec in enumerate(records[1:], start=1)]
    for key in USAGE_KEYS:
        out[key] = sum(int(rec.get(key, 0)) for rec in records)
    shown = "; ".join(f"{col} " + ", ".join(_fmt(v.get(col)) for v in values) for col in values[0])
    line = f"mean of {len(records)} judge repeats (judge.vary={vary}): {shown}"
    out[RATIONALE_KEY] = [line, *(records[0].get(RATIONALE_KEY) or [])]
    return out


def _fmt(value: MetricValue | None) -> str:
    if value is None or not value.is_valid:
        return f"NaN ({value.reason if value is not None else 'missing'})"
    return f"{value.value:.3g}"
