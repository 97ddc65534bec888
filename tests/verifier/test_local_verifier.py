"""The local verifier: label detection, probabilities and windows checked against the tiny
model's own logits."""

from __future__ import annotations

import math

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.verifier.base import probability, supported_index, word_windows
from rag_experiments.verifier.local import LocalVerifier
from tests.verifier.conftest import by_hand, raw_logits

PAIRS = [
    ("Paris is the capital of France.", "Paris is the capital of France."),
    ("Berlin is in Germany.", "The sky is blue."),
    ("The river is old.", "Rome is a city."),
]


def test_supported_label_is_detected_or_named_and_a_bad_one_refused():
    nli = {0: "contradiction", 1: "entailment", 2: "neutral"}
    assert supported_index(nli, None, "m") == 1
    assert supported_index({"0": "INCONSISTENT", "1": "CONSISTENT"}, None, "m") == 1
    assert supported_index(nli, "Neutral", "m") == 2
    assert supported_index(nli, 0, "m") == 0
    assert supported_index(nli, "2", "m") == 2
    assert supported_index({0: "LABEL_0"}, None, "m") == 0  # one logit: sigmoid
    with pytest.raises(ConfigError, match="verifier.label=3 is not one of its labels"):
        supported_index(nli, 3, "m")
    with pytest.raises(ConfigError, match="cannot tell which label.*0=LABEL_0, 1=LABEL_1"):
        supported_index({0: "LABEL_0", 1: "LABEL_1"}, None, "m")


def test_probability_is_softmax_of_the_label_or_sigmoid_of_one_logit():
    assert probability([0.0, math.log(3.0)], 1) == pytest.approx(0.75)
    assert probability([2.0], 0) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert probability([1000.0, 0.0, 0.0], 0) == pytest.approx(1.0)  # stable


def test_word_windows_overlap_and_cover_the_text():
    text = " ".join(f"w{i}" for i in range(10))
    assert word_windows(text, 4, 1) == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert word_windows("short text", 4, 1) == ["short text"]


@pytest.mark.slow
def test_scores_are_the_softmax_of_the_entailment_logit(tiny_nli):
    verifier = LocalVerifier(str(tiny_nli))
    assert verifier.label == "entailment" and verifier.index == 1
    expected = [by_hand(raw_logits(tiny_nli, p, h), 1) for p, h in PAIRS]
    assert verifier.score(PAIRS) == pytest.approx(expected, abs=1e-6)
    assert len(set(round(e, 4) for e in expected)) == 3  # the pairs are told apart
    assert verifier.score([]) == []
    named = LocalVerifier(str(tiny_nli), label="neutral")
    assert named.score(PAIRS[:1]) == pytest.approx([by_hand(raw_logits(tiny_nli, *PAIRS[0]), 2)])


@pytest.mark.slow
def test_a_one_logit_model_is_read_through_a_sigmoid(tiny_one):
    verifier = LocalVerifier(str(tiny_one))
    expected = [by_hand(raw_logits(tiny_one, p, h)) for p, h in PAIRS]
    assert verifier.score(PAIRS) == pytest.approx(expected, abs=1e-6)


@pytest.mark.slow
def test_a_long_premise_is_windowed_and_scores_its_best_window(tiny_nli):
    verifier = LocalVerifier(str(tiny_nli), max_length=24, stride=4)
    premise = (
        "The river is old. Paris is the capital of France. The sun is a star. "
        "Berlin is in Germany. The moon is small. Rome is a city in Italy."
    )
    claim = "Paris is the capital of France."
    windows = verifier.windows(premise, claim)
    assert len(windows) > 1 and all(w in premise for w in windows)
    assert windows[0].startswith("The river") and premise.endswith(windows[-1])
    for window in windows:  # each fits: specials + window + claim <= max_length
        assert len(verifier.tokenizer(window, claim)["input_ids"]) <= 24
    best = max(by_hand(raw_logits(tiny_nli, w, claim), 1) for w in windows)
    assert verifier.score([(premise, claim)]) == pytest.approx([best], abs=1e-6)


@pytest.mark.slow
def test_a_missing_folder_and_a_bad_method_are_refused(tmp_path, tiny_nli):
    with pytest.raises(ConfigError, match="no model folder there"):
        LocalVerifier(str(tmp_path))
    with pytest.raises(ConfigError, match="verifier.method='generate'"):
        LocalVerifier(str(tiny_nli), method="generate")
    assert LocalVerifier(str(tiny_nli)).trust_remote_code is False  # never by default
