"""Agreement of a judge's binary verdicts with known labels, with bootstrap intervals.

For labels y and verdicts p in {0, 1} over n pairs (positive class 1):

- accuracy = (1/n) Σ [y_i = p_i];
- balanced accuracy = (TPR + TNR) / 2, TPR = TP / (TP + FN), TNR = TN / (TN + FP)
  (Brodersen et al., 2010; ``sklearn.metrics.balanced_accuracy_score``);
- Cohen's kappa κ = (p_o − p_e) / (1 − p_e), p_o the observed agreement and
  p_e = P(y=1)·P(p=1) + P(y=0)·P(p=0) the agreement expected by chance (Cohen, 1960;
  ``sklearn.metrics.cohen_kappa_score``). A judge that gives one verdict to every pair has
  κ = 0 and balanced accuracy 0.5, whatever its accuracy.

The point values come from scikit-learn. Each gets a 95 % percentile bootstrap interval
(Efron & Tibshirani, 1993, ch. 13, as in :mod:`rag_experiments.metrics.aggregate`): the n pairs are
resampled with replacement B = 1,000 times (``numpy.random.default_rng(seed)``), the statistic
is recomputed on each resample with the closed forms above (vectorised; they equal
scikit-learn's, see the tests) and the interval is the (2.5, 97.5) percentiles. Resamples where
the statistic is undefined (kappa when p_e = 1, a rate whose class is absent) are left out.

:func:`paired_gain` compares two verdict sets on the same pairs (a judge before and after
few-shot alignment, ``rag-exp align``): the gain ``after − before`` of kappa and balanced
accuracy, with the pairs resampled together (a paired bootstrap).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag_experiments.metrics.aggregate import CONFIDENCE, N_RESAMPLES


@dataclass(frozen=True)
class BinaryAgreement:
    """Agreement of verdicts with labels (definitions in the module docstring).

    Attributes:
        n: Pairs compared.
        accuracy: In [0, 1].
        balanced_accuracy: In [0, 1].
        kappa: In [-1, 1]; NaN when undefined (one class in both labels and verdicts).
        accuracy_ci: 95 % bootstrap interval of the accuracy.
        balanced_accuracy_ci: Its interval for the balanced accuracy.
        kappa_ci: Its interval for kappa.
        confusion: ``[[TP, FN], [FP, TN]]``: rows = label (positive, negative), columns =
            verdict (positive, negative).
    """

    n: int
    accuracy: float
    balanced_accuracy: float
    kappa: float
    accuracy_ci: tuple[float, float]
    balanced_accuracy_ci: tuple[float, float]
    kappa_ci: tuple[float, float]
    confusion: tuple[tuple[int, int], tuple[int, int]]


def _closed_forms(y: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy, balanced accuracy and kappa along the last axis of boolean arrays."""
    n = y.shape[-1]
    tp = np.sum(y & p, axis=-1)
    tn = np.sum(~y & ~p, axis=-1)
    pos = np.sum(y, axis=-1)
    neg = n - pos
    pred_pos = np.sum(p, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc = (tp + tn) / n
        rates = np.stack([tp / pos, tn / neg])  # TPR, TNR; NaN when the class is absent
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN column
            balanced = np.nanmean(rates, axis=0)
        p_e = (pos * pred_pos + neg * (n - pred_pos)) / n**2
        kappa = np.where(np.isclose(p_e, 1.0), np.nan, (acc - p_e) / (1.0 - p_e))
    return {"accuracy": acc, "balanced_accuracy": balanced, "kappa": kappa}


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    valid = values[~np.isnan(values)]
    if valid.size == 0:
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(valid, [tail, 100.0 - tail])
    return float(low), float(high)


def binary_agreement(
    labels: Sequence[bool],
    verdicts: Sequence[bool],
    *,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> BinaryAgreement:
    """Accuracy, balanced accuracy and Cohen's kappa of ``verdicts`` against ``labels``.

    Args:
        labels: Known labels (True = positive class).
        verdicts: The judge's verdicts, same length.
        seed: Seed of the bootstrap generator.
        n_resamples: B, bootstrap resamples.
        confidence: Interval coverage in (0, 1).

    Returns:
        The :class:`BinaryAgreement`; every value NaN (and ``n = 0``) for empty input.

    Raises:
        ValueError: ``labels`` and ``verdicts`` differ in length.
    """
    from sklearn.metrics import (
        accuracy_score,
        balanced_accuracy_score,
        cohen_kappa_score,
        confusion_matrix,
    )

    y = np.asarray(labels, dtype=bool)
    p = np.asarray(verdicts, dtype=bool)
    if y.shape != p.shape:
        raise ValueError(f"{y.size} labels but {p.size} verdicts")
    n = int(y.size)
    nan2 = (math.nan, math.nan)
    if n == 0:
        return BinaryAgreement(0, math.nan, math.nan, math.nan, nan2, nan2, nan2, ((0, 0), (0, 0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one class only: sklearn warns, values stay defined
        accuracy = float(accuracy_score(y, p))
        balanced = float(balanced_accuracy_score(y, p))
        with np.errstate(invalid="ignore", divide="ignore"):
            kappa = float(cohen_kappa_score(y, p, labels=[True, False]))
    cm = confusion_matrix(y, p, labels=[True, False])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    boot = _closed_forms(y[idx], p[idx])
    return BinaryAgreement(
        n=n,
        accuracy=accuracy,
        balanced_accuracy=balanced,
        kappa=kappa,
        accuracy_ci=_interval(boot["accuracy"], confidence),
        balanced_accuracy_ci=_interval(boot["balanced_accuracy"], confidence),
        kappa_ci=_interval(boot["kappa"], confidence),
        confusion=((int(cm[0, 0]), int(cm[0, 1])), (int(cm[1, 0]), int(cm[1, 1]))),
    )


@dataclass(frozen=True)
class PairedGain:
    """Change of an agreement statistic between two verdict sets on the same pairs.

    Attributes:
        statistic: ``kappa`` or ``balanced_accuracy``.
        before: The statistic of the first verdicts.
        after: The statistic of the second verdicts.
        gain: ``after − before``.
        ci: Its paired percentile bootstrap interval (the pairs resampled together).
    """

    statistic: str
    before: float
    after: float
    gain: float
    ci: tuple[float, float]

    @property
    def improved(self) -> bool:
        """The interval of the gain lies above 0."""
        return self.ci[0] > 0

    @property
    def worse(self) -> bool:
        """The interval of the gain lies below 0."""
        return self.ci[1] < 0


def paired_gain(
    labels: Sequence[bool],
    before: Sequence[bool],
    after: Sequence[bool],
    *,
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
    confidence: float = CONFIDENCE,
) -> dict[str, PairedGain]:
    """The gain in Cohen's kappa and balanced accuracy from ``before`` to ``after`` verdicts on
    the same labeled pairs, with a paired percentile bootstrap interval: the n pairs are
    resampled with replacement B times (``numpy.random.default_rng(seed)``), both statistics
    recomputed with the closed forms of the module docstring on the same resample for both
    verdict sets, and the interval of ``after − before`` is the (2.5, 97.5) percentiles
    (resamples where either is undefined are left out). Point values as
    :func:`binary_agreement` computes them.

    Args:
        labels: Known labels (True = positive).
        before: First verdicts, same length.
        after: Second verdicts, same length.
        seed: Seed of the bootstrap generator.
        n_resamples: B.
        confidence: Interval coverage in (0, 1).

    Returns:
        ``{"kappa": PairedGain, "balanced_accuracy": PairedGain}``; NaN values for no pairs.

    Raises:
        ValueError: The sequences differ in length.
    """
    y = np.asarray(labels, dtype=bool)
    b = np.asarray(before, dtype=bool)
    a = np.asarray(after, dtype=bool)
    if not y.shape == b.shape == a.shape:
        raise ValueError(f"{y.size} labels, {b.size} and {a.size} verdicts")
    n = int(y.size)
    out = {}
    if n == 0:
        nan2 = (math.nan, math.nan)
        return {s: PairedGain(s, math.nan, math.nan, math.nan, nan2) for s in _GAINED}
    point_b = binary_agreement(y, b, seed=seed, n_resamples=1)
    point_a = binary_agreement(y, a, seed=seed, n_resamples=1)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    boot_b = _closed_forms(y[idx], b[idx])
    boot_a = _closed_forms(y[idx], a[idx])
    for s in _GAINED:
        pb, pa = float(getattr(point_b, s)), float(getattr(point_a, s))
        out[s] = PairedGain(s, pb, pa, pa - pb, _interval(boot_a[s] - boot_b[s], confidence))
    return out


_GAINED = ("kappa", "balanced_accuracy")
"""The statistics :func:`paired_gain` reports."""
