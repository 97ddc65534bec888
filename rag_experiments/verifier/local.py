"""A verifier model folder run in-process by ``transformers`` (``verifier=local``).

The folder is what ``save_pretrained`` writes (``config.json``, the weights, the tokenizer
files): an NLI cross-encoder (``cross-encoder/nli-deberta-v3-*``; a sentence-transformers
``CrossEncoder`` folder is such a folder), a MiniCheck checkpoint, or Vectara's HHEM-2.1-open.
It is loaded with ``AutoTokenizer`` and ``AutoModelForSequenceClassification``; a model whose
class comes with the folder (HHEM) runs only with ``trust_remote_code: true``, never by
default.

**Scoring** (``method: logits``): each pair's premise is cut into windows of the tokens that
fit beside the hypothesis in ``max_length`` (the model's, by default), neighbours overlapping
by ``stride`` tokens (:meth:`LocalVerifier.windows`, character spans of the premise, so each
window is a substring of it); every (window, hypothesis) pair goes through the model in batches
of ``batch_size``; the pair's probability is the maximum over its windows of
:func:`~rag_experiments.verifier.base.probability` (sigmoid of a single logit, else the softmax
of the "supported" label, :func:`~rag_experiments.verifier.base.supported_index`).
``method: predict`` calls the model's own ``predict(pairs)`` instead (HHEM-2.1-open's remote
code returns its probabilities of "consistent" and handles length itself).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag_experiments.errors import ConfigError
from rag_experiments.verifier.base import VerifierBase, probability, supported_index

METHODS = ("logits", "predict")
"""How a local model is asked: its logits (any sequence classifier), or its own ``predict``."""

DEFAULT_MAX_LENGTH = 512
"""Tokens per pair when neither the tokenizer nor the config states a limit."""


class LocalVerifier(VerifierBase):
    """A sequence-classification model folder as a verifier (see the module docstring).

    Args:
        path: The model folder (``save_pretrained`` output).
        label: Which output means "supported": an index, a label name, or null to detect it
            from ``config.id2label`` (one-logit models: sigmoid, no label).
        trust_remote_code: Run the model code shipped in the folder (HHEM needs it). Off by
            default: that code runs with your permissions.
        method: ``logits`` or ``predict`` (:data:`METHODS`).
        max_length: Tokens of one (window, hypothesis) pair; null = the model's limit.
        stride: Tokens shared by neighbouring windows of a long premise.
        batch_size: Pairs per forward pass.
        device: Torch device (``cpu``, ``cuda``, ``cuda:1``).

    Raises:
        ConfigError: No such folder, a folder that does not load, an unknown ``method``, a
            bad number, or a label that cannot be resolved.
    """

    def __init__(
        self,
        path: str,
        label: Any = None,
        trust_remote_code: bool = False,
        method: str = "logits",
        max_length: int | None = None,
        stride: int = 64,
        batch_size: int = 16,
        device: str = "cpu",
    ) -> None:
        where = f"verifier.path={path}"
        if method not in METHODS:
            raise ConfigError(f"verifier.method={method!r}: choose one of {', '.join(METHODS)}")
        if int(batch_size) < 1 or int(stride) < 0 or (max_length is not None and max_length < 8):
            raise ConfigError(
                "verifier.batch_size must be >= 1, verifier.stride >= 0 and verifier.max_length "
                f">= 8 or null; got {batch_size}, {stride}, {max_length}"
            )
        folder = Path(str(path)).expanduser()
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"{where}: no model folder there (no config.json); give the folder a "
                "`save_pretrained` wrote (no verifier model ships with the package: see "
                "docs/how-to/verifiers.md)"
            )
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(
                str(folder), trust_remote_code=bool(trust_remote_code)
            )
            self.model = AutoModelForSequenceClassification.from_pretrained(
                str(folder), trust_remote_code=bool(trust_remote_code)
            )
        except (OSError, ValueError) as exc:
            hint = (
                ""
                if trust_remote_code
                else " (a model with its own code, such as HHEM, needs verifier.trust_remote_code"
                "=true)"
            )
            raise ConfigError(f"{where}: the model does not load: {exc}{hint}") from None
        self.model.to(device).eval()
        self._torch = torch
        self.path = str(folder)
        self.method = method
        self.device = device
        self.batch_size = int(batch_size)
        self.trust_remote_code = bool(trust_remote_code)
        id2label = dict(getattr(self.model.config, "id2label", None) or {})
        if int(self.model.config.num_labels) == 1:
            id2label = {0: id2label.get(0, "score")}
        self.index = supported_index(id2label, label, where)
        self.label = str(id2label.get(self.index, self.index))
        limit = min(
            int(getattr(self.tokenizer, "model_max_length", 0) or 0) or 10**9,
            int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or 10**9,
        )
        self.max_length = int(max_length) if max_length else min(limit, 10**9)
        if self.max_length >= 10**9:
            self.max_length = DEFAULT_MAX_LENGTH
        self.stride = int(stride)
        self._specials = int(self.tokenizer.num_special_tokens_to_add(pair=True))
        self._lock = threading.Lock()
        self._id = self._identity()

    def _identity(self) -> str:
        """Model folder name + a digest of its config and weights' sizes + the settings."""
        folder = Path(self.path)
        digest = hashlib.sha256((folder / "config.json").read_bytes())
        for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
            digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
        return (
            f"local:{folder.name}@{digest.hexdigest()[:12]}:{self.method}:{self.label}:"
            f"{self.max_length}:{self.stride}"
        )

    @property
    def id(self) -> str:
        """``local:<folder>@<digest>:<method>:<label>:<max_length>:<stride>``."""
        return self._id

    def describe(self) -> dict[str, str]:
        """``provider`` (``transformers``), ``model`` (the folder's name), ``digest``,
        ``label``, ``max_length``."""
        return {
            "provider": "transformers",
            "model": Path(self.path).name,
            "digest": self._id.split("@")[1].split(":")[0],
            "label": self.label,
            "max_length": str(self.max_length),
        }

    def windows(self, premise: str, hypothesis: str) -> list[str]:
        """The windows of ``premise`` that fit beside ``hypothesis`` in :attr:`max_length`
        tokens (special tokens counted), neighbours sharing :attr:`stride` tokens (at most
        half a window), each a substring of ``premise``; ``[premise]`` when it fits."""
        hyp = len(self.tokenizer(hypothesis, add_special_tokens=False)["input_ids"])
        budget = max(8, self.max_length - self._specials - hyp)
        enc = self.tokenizer(
            premise, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        spans = enc["offset_mapping"]
        if len(spans) <= budget:
            return [premise]
        step = budget - min(self.stride, budget // 2)
        out = []
        for start in range(0, len(spans), step):
            chunk = spans[start : start + budget]
            out.append(premise[chunk[0][0] : chunk[-1][1]])
            if start + budget >= len(spans):
                break
        return out

    def logits(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """The model's logits of each (premise, hypothesis) pair as given (no windowing;
        longer pairs truncated from the premise), in batches of :attr:`batch_size`."""
        out: list[list[float]] = []
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start : start + self.batch_size]
            enc = self.tokenizer(
                [p for p, _ in batch],
                [h for _, h in batch],
                truncation="only_first",
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            ).to(self.device)
            with self._lock, self._torch.inference_mode():
                values = self.model(**enc).logits
            out += values.float().cpu().tolist()
        return out

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """P(premise supports hypothesis) of each pair: the maximum over the premise's
        :meth:`windows` (``method: logits``), or the model's ``predict`` (``method:
        predict``).

        Args:
            pairs: ``(premise, hypothesis)`` pairs.

        Returns:
            One probability in [0, 1] per pair, same order; ``[]`` for no pairs.
        """
        pairs = list(pairs)
        if not pairs:
            return []
        if self.method == "predict":
            with self._lock, self._torch.inference_mode():
                scores = self.model.predict(pairs)
            return [min(1.0, max(0.0, float(s))) for s in scores]
        flat: list[tuple[str, str]] = []
        owner: list[int] = []
        for i, (premise, hypothesis) in enumerate(pairs):
            for window in self.windows(premise, hypothesis):
                flat.append((window, hypothesis))
                owner.append(i)
        best = [0.0] * len(pairs)
        for i, row in zip(owner, self.logits(flat), strict=True):
            best[i] = max(best[i], probability(row, self.index))
        return best
