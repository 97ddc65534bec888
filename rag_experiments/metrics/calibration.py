"""Calibrated estimates of a judged metric's mean: prediction-powered inference (PPI).

A judged mean is only as good as the judge. With human labels ``Y`` on a few rows, the judge's
error on those rows corrects the judge's mean over the rest, and the confidence interval
accounts for both sources of noise (Angelopoulos, Bates, Fannjiang, Jordan, Zrnic,
"Prediction-powered inference", *Science* 382(6671), 2023, eq. (1)–(2) for the mean; ARES,
Saad-Falcon et al., NAACL 2024, uses it for RAG judges).

With ``n`` labeled rows (human value ``Y_i``, judge value ``f(X_i)``) and ``N`` **unlabeled**
rows (judge value ``f(X̃_j)`` only; the paper's setup: two disjoint i.i.d. sets, so the two
terms below are independent and their variances add)::

    θ̂_PP  = mean_N(λ·f(X̃)) − mean_n(λ·f(X) − Y)
    CI    = θ̂_PP ± z_{1−α/2} · sqrt(σ̂²_f / N + σ̂²_Δ / n)

with σ̂²_f the sample variance (``ddof=1``) of ``λ·f(X̃)`` over the unlabeled rows, σ̂²_Δ that
of ``λ·f(X) − Y`` over the labeled rows, and ``z`` the standard normal quantile. ``λ = 1`` is
the paper's PPI. ``power_tuning`` picks ``λ`` from the data (PPI++: Angelopoulos, Duchi, Zrnic,
"PPI++: Efficient prediction-powered inference", arXiv:2311.01453, 2023, Example 6.1 for the
mean): ``λ̂ = Cov_n(Y, f(X)) / ((1 + n/N) · Var_{n+N}(f))``, clipped to [0, 1]; ``λ = 0`` is
the labels-only estimate, so a useless judge cannot widen the interval much.

The classical estimate from the labels alone is ``mean_n(Y) ± z · sqrt(σ̂²_Y / n)``.

ppi-python (``ppi_py``) implements the same estimator; it is not a dependency because it
requires numba, statsmodels and gdown and installs a top-level ``tests`` package. Its
variances use ``ddof=0``; ours use ``ddof=1`` (a slightly wider interval, better at small
``n``).

**Few labels.** Both intervals above rest on the central limit theorem: they are valid as
``n`` (and ``N``) grow (Angelopoulos et al. 2023, Theorem 1 holds in the limit; ppi_py's
``ppi_mean_ci`` is the same normal interval), and at small ``n`` they can be badly narrow — two
labels of the same value give σ̂²_Δ = 0 and a zero-width interval. Below :data:`MIN_LABELS`
labeled rows (30, the usual floor for the normal approximation of a mean) the run logs instead
intervals valid at every ``n`` for values in [0, 1], from Hoeffding's inequality (Hoeffding,
"Probability inequalities for sums of bounded random variables", JASA 58(301), 1963, Thm 2):

    labels-only:  mean_n(Y) ± sqrt(ln(2/α) / (2n))
    PPI (λ = 1):  θ̂_PP ± ( sqrt(ln(4/α) / (2N)) + 2 · sqrt(ln(4/α) / (2n)) )

(the PPI one bounds each of its two independent means at α/2: ``f(X̃)`` ranges over [0, 1],
``f(X) − Y`` over [−1, 1]), both clipped to [0, 1]; ``λ`` is 1 there (power tuning estimates a
covariance, not worth trusting at that ``n``), and the summary line says so.

Rows whose judged value is NaN (no verdict) are left out of both estimates (their count is
logged as ``<metric>.ppi_n_excluded``): both estimate the mean over the rows the judge scored,
the same population as the plain ``<metric>`` mean.

Human labels come from a file (:func:`load_labels`): a JSONL of ``{"id", "metric", "value"}``
(value in [0, 1]) or a filled ``rag-exp grade-sheet`` CSV with its key beside it (label ``k``
of a set of ``K`` labels, worst to best, is the value ``k / (K − 1)``: ``unfaithful`` 0,
``partial`` 0.5, ``faithful`` 1; rubric grades 1…5 → 0, 0.25, …, 1), or a run graded in the
browser (``rag-exp review --run``; its labels file, several graders' values averaged).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import numpy as np

from rag_experiments.errors import ConfigError
from rag_experiments.records import MetricSpec, MetricValue

CONFIDENCE = 0.95
"""Coverage of the PPI and labels-only confidence intervals."""

MIN_ROWS = 2
"""Fewest labeled (and unlabeled) rows for an estimate: a variance needs two values."""

MIN_LABELS = 30
"""Fewest labeled rows for the normal-approximation (CLT) intervals; below it the run logs the
Hoeffding intervals of :func:`hoeffding_mean_ci` and :func:`hoeffding_ppi_ci` (see the module
docstring). 30 is the usual floor for a normal approximation of a mean, and where our HaluEval
bench (``bench/ppi_halueval.py``, docs/benchmarks.md) measured the normal interval's coverage
falling short: 90–93 % instead of 95 % at n = 25 binary labels."""

SUFFIXES = (
    "ppi",
    "ppi_ci_low",
    "ppi_ci_high",
    "ppi_lambda",
    "labels_mean",
    "labels_ci_low",
    "labels_ci_high",
    "ppi_n_labels",
    "ppi_n_unlabeled",
    "ppi_n_excluded",
)
"""Run values logged per labeled metric ``m``, as ``m.<suffix>``."""


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)


def power_tuned_lambda(
    y: np.ndarray, f_labeled: np.ndarray, f_unlabeled: np.ndarray
) -> np.ndarray | float:
    """PPI++'s ``λ̂`` for the mean (Angelopoulos, Duchi, Zrnic 2023, arXiv:2311.01453):
    ``Cov_n(Y, f(X)) / ((1 + n/N) · Var(f))``, the variance over labeled and unlabeled judge
    values together, clipped to [0, 1] (0 when the judge's values are constant).

    Args:
        y: Human values, shape ``(..., n)``.
        f_labeled: Judge values on the same rows, shape ``(..., n)``.
        f_unlabeled: Judge values on the unlabeled rows, shape ``(..., N)``.

    Returns:
        ``λ̂`` per leading index (a float for 1-D input).
    """
    n, big_n = y.shape[-1], f_unlabeled.shape[-1]
    cov = ((y - y.mean(-1, keepdims=True)) * (f_labeled - f_labeled.mean(-1, keepdims=True))).sum(
        -1
    ) / (n - 1)
    var = np.concatenate([f_labeled, f_unlabeled], axis=-1).var(-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(var > 0, cov / ((1.0 + n / big_n) * var), 0.0)
    lam = np.clip(lam, 0.0, 1.0)
    return float(lam) if lam.ndim == 0 else lam


def ppi_mean_ci(
    y: Sequence[float] | np.ndarray,
    f_labeled: Sequence[float] | np.ndarray,
    f_unlabeled: Sequence[float] | np.ndarray,
    *,
    confidence: float = CONFIDENCE,
    lam: float | np.ndarray = 1.0,
) -> tuple[np.ndarray | float, np.ndarray | float, np.ndarray | float]:
    """Prediction-powered estimate of a mean and its confidence interval (formula in the
    module docstring; Angelopoulos et al., *Science* 2023).

    Works on the last axis, so ``(draws, n)`` arrays give one estimate per draw (the coverage
    simulation of the tests).

    Args:
        y: Human values ``Y``, shape ``(..., n)``, in [0, 1], n ≥ 2.
        f_labeled: Judge values ``f(X)`` on the labeled rows, same shape as ``y``.
        f_unlabeled: Judge values ``f(X̃)`` on the unlabeled rows, shape ``(..., N)``, N ≥ 2.
        confidence: Coverage ``1 − α`` in (0, 1).
        lam: ``λ`` (1 = PPI; see :func:`power_tuned_lambda`), a float or one per draw.

    Returns:
        ``(estimate, ci_low, ci_high)``: floats for 1-D input, else arrays of the leading
        shape.

    Raises:
        ConfigError: Fewer than :data:`MIN_ROWS` labeled or unlabeled rows, mismatched shapes
            or a confidence outside (0, 1).
    """
    y_, fl, fu = (np.asarray(a, dtype=np.float64) for a in (y, f_labeled, f_unlabeled))
    if y_.shape != fl.shape:
        raise ConfigError(f"labels and judge values differ in shape: {y_.shape} vs {fl.shape}")
    if y_.shape[-1] < MIN_ROWS or fu.shape[-1] < MIN_ROWS:
        raise ConfigError(
            f"PPI needs at least {MIN_ROWS} labeled and {MIN_ROWS} unlabeled rows, got "
            f"{y_.shape[-1]} and {fu.shape[-1]}"
        )
    z = _z(confidence)
    lam_ = np.asarray(lam, dtype=np.float64)[..., None]
    imputed = lam_ * fu
    rectifier = lam_ * fl - y_
    estimate = imputed.mean(-1) - rectifier.mean(-1)
    se = np.sqrt(imputed.var(-1, ddof=1) / fu.shape[-1] + rectifier.var(-1, ddof=1) / y_.shape[-1])
    return _out(estimate, estimate - z * se, estimate + z * se)


def classical_mean_ci(
    y: Sequence[float] | np.ndarray, *, confidence: float = CONFIDENCE
) -> tuple[np.ndarray | float, np.ndarray | float, np.ndarray | float]:
    """The labels-only estimate: ``mean_n(Y) ± z_{1−α/2} · sqrt(σ̂²_Y / n)`` (central limit
    theorem; ``ddof=1``), on the last axis.

    Args:
        y: Human values, shape ``(..., n)``, n ≥ 2.
        confidence: Coverage in (0, 1).

    Returns:
        ``(mean, ci_low, ci_high)`` (floats for 1-D input).

    Raises:
        ConfigError: Fewer than :data:`MIN_ROWS` values or a confidence outside (0, 1).
    """
    y_ = np.asarray(y, dtype=np.float64)
    if y_.shape[-1] < MIN_ROWS:
        raise ConfigError(f"a labels-only CI needs at least {MIN_ROWS} labels, got {y_.shape[-1]}")
    z = _z(confidence)
    mean = y_.mean(-1)
    se = np.sqrt(y_.var(-1, ddof=1) / y_.shape[-1])
    return _out(mean, mean - z * se, mean + z * se)


def hoeffding_mean_ci(
    y: Sequence[float], *, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """The labels-only estimate with an interval valid at every ``n`` (values in [0, 1]):
    ``mean_n(Y) ± sqrt(ln(2/α) / (2n))`` (Hoeffding 1963, Thm 2), clipped to [0, 1].

    Args:
        y: Human values in [0, 1], n ≥ 1.
        confidence: Coverage ``1 − α`` in (0, 1).

    Returns:
        ``(mean, ci_low, ci_high)``.

    Raises:
        ConfigError: No value, or a confidence outside (0, 1).
    """
    _z(confidence)  # checks the confidence
    if len(y) < 1:
        raise ConfigError("a labels-only CI needs at least 1 label, got 0")
    alpha = 1.0 - confidence
    mean = float(np.mean(y))
    half = math.sqrt(math.log(2.0 / alpha) / (2.0 * len(y)))
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def hoeffding_ppi_ci(
    y: Sequence[float],
    f_labeled: Sequence[float],
    f_unlabeled: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float]:
    """The PPI estimate (``λ = 1``) with an interval valid at every ``n`` and ``N`` (values in
    [0, 1]): ``θ̂_PP ± (sqrt(ln(4/α) / (2N)) + 2 · sqrt(ln(4/α) / (2n)))``, Hoeffding's bound on
    each of the two independent means at ``α/2`` (``f(X̃)`` spans 1, ``f(X) − Y`` spans 2),
    clipped to [0, 1].

    Args:
        y: Human values, n ≥ 1.
        f_labeled: Judge values on the same rows.
        f_unlabeled: Judge values on the unlabeled rows, N ≥ 1.
        confidence: Coverage ``1 − α`` in (0, 1).

    Returns:
        ``(estimate, ci_low, ci_high)``.

    Raises:
        ConfigError: No labeled or no unlabeled row, mismatched lengths, or a confidence
            outside (0, 1).
    """
    _z(confidence)
    if len(y) != len(f_labeled):
        raise ConfigError(f"labels and judge values differ in length: {len(y)} vs {len(f_labeled)}")
    if len(y) < 1 or len(f_unlabeled) < 1:
        raise ConfigError(
            f"PPI needs at least 1 labeled and 1 unlabeled row, got {len(y)} and {len(f_unlabeled)}"
        )
    alpha = 1.0 - confidence
    log_term = math.log(4.0 / alpha)
    est = float(np.mean(f_unlabeled) - (np.mean(f_labeled) - np.mean(y)))
    half = math.sqrt(log_term / (2.0 * len(f_unlabeled))) + 2.0 * math.sqrt(
        log_term / (2.0 * len(y))
    )
    return est, max(0.0, est - half), min(1.0, est + half)


def _out(*arrays: np.ndarray) -> tuple:
    return tuple(float(a) if np.ndim(a) == 0 else a for a in arrays)


# --- labels ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CalibrationLabels:
    """Human values for some rows, per metric column.

    Attributes:
        by_metric: ``{metric column: {sample id: value in [0, 1]}}``.
        source: The file they came from (for messages).
        power_tuning: Estimate with PPI++'s data-chosen ``λ`` instead of ``λ = 1``.
        confidence: Coverage of the intervals.
    """

    by_metric: Mapping[str, Mapping[str, float]]
    source: str
    power_tuning: bool = False
    confidence: float = CONFIDENCE

    def check_metrics(self, specs: Sequence[MetricSpec]) -> None:
        """Refuse labels the run cannot calibrate (before the dataset loads): of a metric the
        run does not compute, or of a column whose declared range is not [0, 1] (labels are
        in [0, 1]; mixing them with a judge on another scale, e.g. a raw 1–5 grade, would make
        the PPI correction meaningless, so such columns are refused, not rescaled).

        Args:
            specs: The run's metric columns (canonical names and declared ranges).

        Raises:
            ConfigError: A label names another metric (the message lists the run's columns)
                or a column whose range is not [0, 1] (the message names it and its range).
        """
        columns = [s.name for s in specs]
        unknown = sorted(set(self.by_metric) - set(columns))
        if unknown:
            raise ConfigError(
                f"calibration.labels={self.source}: metric {', '.join(unknown)} is not computed "
                f"by this run (its columns: {', '.join(columns)}); fix the file's metric names "
                "or pick a metrics= suite that has them"
            )
        for spec in specs:
            if spec.name in self.by_metric and (spec.low, spec.high) != (0.0, 1.0):
                raise ConfigError(
                    f"calibration.labels={self.source}: metric {spec.name} is declared on "
                    f"[{spec.low:g}, {spec.high:g}], labels are in [0, 1]; label a [0, 1] "
                    "column instead (e.g. the normalised one, not a *_raw grade)"
                )

    def check_ids(self, dataset_ids: Iterable[str], evaluated_ids: Iterable[str]) -> None:
        """Refuse labels of rows the run does not evaluate, before any question is answered.

        Args:
            dataset_ids: Ids of the whole loaded dataset (before ``max_samples`` and the shard):
                a labeled id not among them is an error.
            evaluated_ids: Ids of the samples the run evaluates (a part of the dataset under
                ``max_samples`` or a shard): labeled ids outside it are ignored, as long as
                some labeled id is inside it.

        Raises:
            ConfigError: A labeled id is not in the dataset (the message names up to 5), or
                no labeled id is evaluated.
        """
        labeled = {i for values in self.by_metric.values() for i in values}
        missing = sorted(labeled - set(dataset_ids))
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            raise ConfigError(
                f"calibration.labels={self.source}: {len(missing)} labeled id(s) are not in the "
                f"dataset ({shown}); label rows by the dataset's sample ids"
            )
        if not labeled & set(evaluated_ids):
            raise ConfigError(
                f"calibration.labels={self.source}: none of its {len(labeled)} labeled ids is "
                "among the evaluated samples; raise max_samples, drop the shard, or label "
                "evaluated rows"
            )


def load_labels(
    path: str | Path,
    *,
    power_tuning: bool = False,
    confidence: float = CONFIDENCE,
    run_labels: Callable[[str], Path] | None = None,
) -> CalibrationLabels:
    """Read human labels: a JSONL of ``{"id", "metric", "value"}`` (``.jsonl``/``.json``) or a
    filled ``rag-exp grade-sheet`` CSV (``.csv``, its key ``grade_sheet_<sheet_id>.key.json``
    beside it; label ``k`` of ``K`` is ``k / (K − 1)``, blank cells are not labels), or the id
    of a run graded with ``rag-exp review --run`` (its labels file, fetched by ``run_labels``).

    A JSONL line may name its ``grader`` (the labels file of ``rag-exp review --run`` does):
    a later line of the same ``(id, metric, grader)`` is that grader's revision and replaces
    the earlier one, and a row labeled by several graders gets the mean of their values (the
    share who said 1, for verdicts). Lines without ``grader`` may not repeat an ``(id, metric)``.

    Args:
        path: The file, or a run id when ``run_labels`` is given and no such file exists.
        power_tuning: Carried into the result (see :class:`CalibrationLabels`).
        confidence: Carried into the result.
        run_labels: Called with a run id, returns the local path of that run's labels file
            (the engine passes one that reads the tracking store; None: files only).

    Returns:
        The :class:`CalibrationLabels`.

    Raises:
        ConfigError: No such file, a directory, an unreadable file, a bad line (not an
            object, a missing field, a value outside [0, 1], the same (id, metric) twice), a
            label outside the sheet's label set, or no label at all; the message names the
            file, the line and the fix.
    """
    p = Path(path)
    if run_labels is not None and not p.exists() and _RUN_ID.fullmatch(str(path)):
        p = run_labels(str(path))
    if p.is_dir():
        raise ConfigError(
            f"calibration.labels={path}: is a directory; give a JSONL file of "
            '{"id", "metric", "value"} or a filled grade sheet (.csv) in it'
        )
    if not p.is_file():
        raise ConfigError(
            f"calibration.labels={path}: no such file; give a JSONL of "
            '{"id", "metric", "value"} or a filled grade sheet (.csv)'
        )
    by_metric = _read_sheet(p) if p.suffix.lower() == ".csv" else _read_jsonl(p)
    if not any(by_metric.values()):
        raise ConfigError(f"calibration.labels={path}: the file holds no label")
    return CalibrationLabels(
        {m: dict(v) for m, v in by_metric.items() if v}, str(path), power_tuning, confidence
    )


_RUN_ID = re.compile(r"[0-9a-f]{32}")
"""An MLflow run id (what ``calibration.labels`` takes besides a file)."""


def _read_jsonl(p: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    seen: dict[tuple[str, str], int] = {}
    graded: dict[tuple[str, str], dict[str, float]] = {}  # (metric, id) -> grader -> value
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"calibration.labels={p}: cannot read it ({exc})") from exc
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"calibration.labels={p}:{lineno}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{where}: not JSON ({exc}); one object per line") from exc
        if not isinstance(row, dict) or not {"id", "metric", "value"} <= set(row):
            raise ConfigError(f'{where}: expected an object with "id", "metric" and "value"')
        value = row["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise ConfigError(f"{where}: value {value!r} is not a number in [0, 1]")
        key = (str(row["id"]), str(row["metric"]))
        if row.get("grader") is not None:  # a grader's latest line replaces its earlier ones
            graded.setdefault((key[1], key[0]), {})[str(row["grader"])] = float(value)
            continue
        if key in seen:
            raise ConfigError(
                f"{where}: id {key[0]} metric {key[1]} is labeled again (first on line "
                f"{seen[key]}); keep one line per (id, metric)"
            )
        seen[key] = lineno
        out.setdefault(key[1], {})[key[0]] = float(value)
    for (metric, sid), by_grader in graded.items():
        if sid in out.get(metric, {}):
            raise ConfigError(
                f"calibration.labels={p}: id {sid} metric {metric} has lines with and without "
                '"grader"; give every line of a row a grader, or none'
            )
        out.setdefault(metric, {})[sid] = sum(by_grader.values()) / len(by_grader)
    return out


def _read_sheet(p: Path) -> dict[str, dict[str, float]]:
    import pandas as pd

    try:
        sheet = pd.read_csv(p, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"calibration.labels={p}: cannot read the grade sheet ({exc})") from exc
    if not {"item", "sheet_id"} <= set(sheet.columns) or sheet.empty:
        raise ConfigError(
            f"calibration.labels={p}: not a filled grade sheet (no item/sheet_id columns or no "
            'rows); a .csv must come from rag-exp grade-sheet, else give a JSONL of {"id", '
            '"metric", "value"}'
        )
    sheet_id = sheet["sheet_id"].iloc[0]
    key_path = p.parent / f"grade_sheet_{sheet_id}.key.json"
    try:
        key = json.loads(key_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"calibration.labels={p}: cannot read its key {key_path} ({exc}); keep the key "
            "beside the sheet"
        ) from exc
    ids = {int(it["item"]): str(it["sample_id"]) for it in key.get("items", [])}
    out: dict[str, dict[str, float]] = {}
    for metric, labels in key.get("labels", {}).items():
        if metric not in sheet.columns:
            continue
        scale = {str(label).lower(): k / (len(labels) - 1) for k, label in enumerate(labels)}
        for _, row in sheet.iterrows():
            label = str(row[metric]).strip().lower()
            if not label:
                continue
            if label not in scale:
                raise ConfigError(
                    f"calibration.labels={p}: item {row['item']}: {metric}: {label!r} is not one "
                    f"of {', '.join(labels)}"
                )
            item = int(row["item"])
            if item not in ids:
                raise ConfigError(f"calibration.labels={p}: item {item} is not in {key_path}")
            out.setdefault(metric, {})[ids[item]] = scale[label]
    return out


# --- estimates of a run -----------------------------------------------------------------------
def calibrated_estimates(
    labels: CalibrationLabels,
    sample_ids: Sequence[str],
    values: Sequence[Mapping[str, MetricValue]],
) -> dict[str, float]:
    """PPI and labels-only estimates of every labeled metric of a run.

    For metric ``m``: labeled rows are the evaluated rows with a human value and a valid judge
    value; unlabeled rows are the other rows with a valid judge value (N counts only those: the
    paper's disjoint sets); rows with a NaN judge value are left out of both
    (``m.ppi_n_excluded``). Keys (:data:`SUFFIXES`): ``m.ppi``, ``m.ppi_ci_low``,
    ``m.ppi_ci_high``, ``m.ppi_lambda``, ``m.labels_mean``, ``m.labels_ci_low``,
    ``m.labels_ci_high``, ``m.ppi_n_labels``, ``m.ppi_n_unlabeled``, ``m.ppi_n_excluded``. With
    no labeled row only the counts are given; with fewer than :data:`MIN_LABELS` labeled rows
    the intervals are Hoeffding's (:func:`hoeffding_mean_ci`, :func:`hoeffding_ppi_ci`, λ = 1),
    valid at that ``n``; without enough unlabeled rows the PPI values are left out (the
    labels-only ones stay).

    Args:
        labels: The human labels (checked with :meth:`CalibrationLabels.check_metrics` and
            :meth:`CalibrationLabels.check_ids`).
        sample_ids: The evaluated samples' ids, in row order.
        values: One ``{column: MetricValue}`` per row.

    Returns:
        ``{name: value}`` run values (no NaN).
    """
    out: dict[str, float] = {}
    for metric, human in labels.by_metric.items():
        y, fl, fu, excluded = [], [], [], 0
        for sid, row in zip(sample_ids, values, strict=True):
            mv = row.get(metric)
            if mv is None or not mv.is_valid:
                excluded += 1
                continue
            if sid in human:
                y.append(human[sid])
                fl.append(mv.value)
            else:
                fu.append(mv.value)
        out[f"{metric}.ppi_n_labels"] = float(len(y))
        out[f"{metric}.ppi_n_unlabeled"] = float(len(fu))
        out[f"{metric}.ppi_n_excluded"] = float(excluded)
        if 0 < len(y) < MIN_LABELS:  # too few for the normal approximation: Hoeffding
            mean, low, high = hoeffding_mean_ci(y, confidence=labels.confidence)
            out.update({f"{metric}.labels_mean": mean, f"{metric}.labels_ci_low": low})
            out[f"{metric}.labels_ci_high"] = high
            if fu:
                est, low, high = hoeffding_ppi_ci(y, fl, fu, confidence=labels.confidence)
                out.update({f"{metric}.ppi": est, f"{metric}.ppi_ci_low": low})
                out.update({f"{metric}.ppi_ci_high": high, f"{metric}.ppi_lambda": 1.0})
            continue
        if len(y) < MIN_ROWS:
            continue
        mean, low, high = classical_mean_ci(y, confidence=labels.confidence)
        out.update({f"{metric}.labels_mean": mean, f"{metric}.labels_ci_low": low})
        out[f"{metric}.labels_ci_high"] = high
        if len(fu) < MIN_ROWS:
            continue
        y_, fl_, fu_ = np.asarray(y), np.asarray(fl), np.asarray(fu)
        lam = power_tuned_lambda(y_, fl_, fu_) if labels.power_tuning else 1.0
        est, low, high = ppi_mean_ci(y_, fl_, fu_, confidence=labels.confidence, lam=lam)
        out.update({f"{metric}.ppi": est, f"{metric}.ppi_ci_low": low})
        out.update({f"{metric}.ppi_ci_high": high, f"{metric}.ppi_lambda": float(lam)})
    return {k: float(v) for k, v in out.items() if not math.isnan(v)}


def summary_lines(values: Mapping[str, float]) -> list[str]:
    """Console lines of the calibrated estimates in a run's summary values (none without).

    Returns:
        A heading, then one line per labeled metric (``faithfulness  PPI 0.712 [0.650,
        0.774]  labels-only 0.700 [0.580, 0.820]  (n=40 labeled, N=460 unlabeled, 0
        excluded)``); [] without calibrated estimates.
    """
    lines = []
    for key in values:
        if not key.endswith(".ppi_n_labels"):
            continue
        m = key.removesuffix(".ppi_n_labels")
        n, big_n = int(values[key]), int(values.get(f"{m}.ppi_n_unlabeled", 0))
        why = ""
        if n < 1:
            why = "; a CI needs at least 1 labeled row with a valid judge value"
        elif n < MIN_LABELS:
            why = (
                f"; fewer than {MIN_LABELS} labels: the normal-approximation interval is not "
                "valid at this n, shown are Hoeffding intervals (valid at any n, wide)"
            )
            if big_n < 1:
                why += "; PPI needs at least 1 unlabeled row with a valid judge value"
        elif big_n < MIN_ROWS:
            why = f"; PPI needs at least {MIN_ROWS} unlabeled rows with a valid judge value"
        lines.append(
            f"  {m}  PPI {_interval(values, m, 'ppi', 'ppi')}  labels-only "
            f"{_interval(values, m, 'labels_mean', 'labels')}  (n={n} labeled, "
            f"N={big_n} unlabeled, {int(values.get(f'{m}.ppi_n_excluded', 0))} excluded{why})"
        )
    return ["  calibrated by human labels (mean [95% CI]):", *lines] if lines else []


def _interval(values: Mapping[str, float], metric: str, estimate: str, ci: str) -> str:
    v = values.get(f"{metric}.{estimate}")
    if v is None:
        return "n/a"
    return (
        f"{v:.3f} [{values[f'{metric}.{ci}_ci_low']:.3f}, {values[f'{metric}.{ci}_ci_high']:.3f}]"
    )
