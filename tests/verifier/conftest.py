"""Tiny random classification model folders (written once per session) and their raw logits."""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import pytest

from rag_experiments.fakes.tiny_verifier import make_tiny_verifier


@pytest.fixture(scope="session")
def tiny_nli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-label (contradiction, entailment, neutral) tiny BERT folder."""
    return make_tiny_verifier(tmp_path_factory.mktemp("tiny-nli"))


@pytest.fixture(scope="session")
def tiny_one(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-logit tiny BERT folder."""
    return make_tiny_verifier(tmp_path_factory.mktemp("tiny-one"), num_labels=1, seed=1)


@functools.cache
def _load(folder: str) -> tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    return tok, AutoModelForSequenceClassification.from_pretrained(folder).eval()


def raw_logits(folder: Path, premise: str, hypothesis: str) -> list[float]:
    """The model's logits of one pair, computed here from the folder with transformers."""
    import torch

    tok, model = _load(str(folder))
    with torch.no_grad():
        return model(**tok(premise, hypothesis, return_tensors="pt")).logits[0].tolist()


def by_hand(logits: list[float], index: int = 1) -> float:
    """softmax(logits)[index], or sigmoid(logits[0]) for one logit, written out."""
    if len(logits) == 1:
        return 1 / (1 + math.exp(-logits[0]))
    return math.exp(logits[index]) / sum(math.exp(v) for v in logits)
