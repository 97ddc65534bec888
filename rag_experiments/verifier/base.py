"""What every verifier declares, and the pieces the local and served verifiers share.

A verifier (:class:`~rag_experiments.protocols.Verifier`) scores ``(premise, hypothesis)``
pairs: the probability in [0, 1] that the premise supports (entails) the hypothesis. A premise
longer than the model reads is cut into overlapping windows and the pair scores the **maximum**
over its windows (a statement is supported when some part of the context supports it; the rule
of SummaC-ZS and of MiniCheck's chunking).

**Which output means "supported".** A classifier with several labels has one that means
"supported" (``entailment`` for NLI models, ``consistent`` for HHEM, ``SUPPORTED`` …).
:func:`supported_index` finds it from ``config.id2label`` (:data:`SUPPORTED_LABELS`, case-
insensitive) or takes the one the config names (``verifier.label``: an index or a name); a
model whose labels name none of them is refused with its labels listed. A model with one logit
(a cross-encoder, MiniCheck-style binary heads exported with one output) is read through a
sigmoid. Probabilities (:func:`probability`): ``softmax(logits)[k]`` for ≥ 2 labels,
``sigmoid(logit)`` for one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from rag_experiments.errors import ConfigError

SUPPORTED_LABELS = (
    "entailment",
    "entailed",
    "entails",
    "consistent",
    "supported",
    "support",
    "faithful",
    "factual",
    "grounded",
)
"""Label names (lower-cased) that mean "the premise supports the hypothesis"."""

_WORD = re.compile(r"\S+")


class VerifierBase:
    """Defaults of a verifier's declarations (:class:`~rag_experiments.protocols.Verifier`).

    Attributes:
        max_concurrency: Rows scored at once by the judge scheduler (1: an in-process model
            runs one batch at a time; a server: its configured bound).
        slot_affinity: Always False (no server slots to pin a question to).
        slots: 1.
        cacheable: Scores are stored in the response cache.
    """

    max_concurrency: int = 1
    slot_affinity: ClassVar[bool] = False
    slots: ClassVar[int] = 1
    cacheable: ClassVar[bool] = True

    @property
    def id(self) -> str:
        """Identity of model + settings that change scores (part of every cache key)."""
        raise NotImplementedError

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(premise supports hypothesis) of each ``(premise, hypothesis)`` pair, in order."""
        raise NotImplementedError

    def describe(self) -> dict[str, str]:
        """Tags naming the verifier: ``provider``, ``model`` and its settings."""
        raise NotImplementedError

    def check(self) -> None:
        """Nothing to check (a served verifier overrides it)."""

    def close(self) -> None:
        """Nothing to close (a served verifier overrides it)."""


def supported_index(id2label: Mapping[Any, str], label: int | str | None, where: str) -> int:
    """The output index that means "supported".

    Args:
        id2label: The model's ``config.id2label`` (keys ints or digit strings).
        label: The configured label: an index, a label name (case-insensitive), or None to
            detect it from :data:`SUPPORTED_LABELS`.
        where: Names the model in messages.

    Returns:
        An index in ``[0, len(id2label))``; 0 for a one-logit model.

    Raises:
        ConfigError: The index is out of range, the name is not a label, or (detection) no
            label or several labels name support.
    """
    labels = {int(k): str(v) for k, v in id2label.items()}
    n = max(1, len(labels))
    if n == 1:
        return 0
    listed = ", ".join(f"{i}={labels[i]}" for i in sorted(labels))
    if isinstance(label, bool):
        raise ConfigError(f"{where}: verifier.label must be an index or a label name, got {label}")
    if isinstance(label, int) or (isinstance(label, str) and label.strip().isdigit()):
        index = int(label)
        if not 0 <= index < n:
            raise ConfigError(
                f"{where}: verifier.label={index} is not one of its labels ({listed})"
            )
        return index
    if isinstance(label, str) and label.strip():
        found = [i for i, name in labels.items() if name.lower() == label.strip().lower()]
        if not found:
            raise ConfigError(
                f"{where}: verifier.label={label!r} is not one of its labels ({listed})"
            )
        return found[0]
    found = [i for i, name in labels.items() if name.lower() in SUPPORTED_LABELS]
    if len(found) != 1:
        raise ConfigError(
            f"{where}: cannot tell which label means 'supported' from its labels ({listed}); "
            "set verifier.label to its index or name (see the model card)"
        )
    return found[0]


def probability(logits: Sequence[float], index: int) -> float:
    """P(supported) from one pair's logits: ``sigmoid(logits[0])`` for one logit, else
    ``softmax(logits)[index]`` (computed stably, max subtracted).

    Returns:
        A float in [0, 1].
    """
    values = [float(x) for x in logits]
    if len(values) == 1:
        return 1.0 / (1.0 + math.exp(-values[0]))
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return exps[index] / sum(exps)


def word_windows(text: str, size: int, overlap: int) -> list[str]:
    """``text`` cut into windows of ``size`` whitespace-separated words, consecutive windows
    sharing ``overlap`` words; one window (the text) when it is not longer than ``size``.

    Args:
        text: The premise.
        size: Words per window (>= 1).
        overlap: Words shared by neighbours (0 <= overlap < size).

    Returns:
        The windows in order (``[text]`` for a short or empty text).
    """
    words = _WORD.findall(text)
    if len(words) <= size:
        return [text]
    step = size - overlap
    out = []
    for start in range(0, len(words), step):
        out.append(" ".join(words[start : start + size]))
        if start + size >= len(words):
            break
    return out
