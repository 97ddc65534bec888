"""The TEI verifier against the fake TEI server: request shapes, probabilities by hand, windows,
batches and failures; with the tiny model, the same values as the local verifier."""

from __future__ import annotations

import math

import pytest

from rag_experiments.common.http import RetryPolicy
from rag_experiments.errors import ConfigError, LLMError
from rag_experiments.fakes.tei_server import FakeTeiServer
from rag_experiments.verifier.tei import TeiVerifier
from tests.verifier.conftest import by_hand, raw_logits

NLI = {0: "contradiction", 1: "entailment", 2: "neutral"}


def overlap_logits(premise: str, hypothesis: str) -> list[float]:
    """Deterministic logits: entailment = share of the hypothesis's words in the premise."""
    words = set(premise.lower().split())
    hyp = hypothesis.lower().split()
    share = sum(w in words for w in hyp) / len(hyp)
    return [0.0, 3.0 * share, 1.0]


def softmax_entail(premise: str, hypothesis: str) -> float:
    c, e, n = overlap_logits(premise, hypothesis)
    return math.exp(e) / (math.exp(c) + math.exp(e) + math.exp(n))


PAIRS = [("the sky is blue", "the sky is blue"), ("the sky is blue", "grass is green")]
NO_RETRY = RetryPolicy(timeout_s=5.0, max_retries=0)


def test_predict_sends_pairs_and_reads_the_entailment_probability():
    with FakeTeiServer(logits_fn=overlap_logits, id2label=NLI) as server:
        verifier = TeiVerifier(url=server.root, retry=NO_RETRY)
        got = verifier.score(PAIRS)
        assert server.bodies == [
            {
                "inputs": [list(p) for p in PAIRS],
                "truncate": True,
                "raw_scores": False,
            }
        ]
    assert got == pytest.approx([softmax_entail(*p) for p in PAIRS])
    assert got[0] == pytest.approx(math.exp(3) / (1 + math.exp(3) + math.e))  # share 1


def test_predict_batches_windows_and_takes_the_best_window():
    premise = "grass is green " + " ".join(f"w{i}" for i in range(21)) + " the sky is blue"
    with FakeTeiServer(logits_fn=overlap_logits, id2label=NLI) as server:
        verifier = TeiVerifier(
            url=server.root, window_words=8, overlap_words=2, batch_size=2, retry=NO_RETRY
        )
        (got,) = verifier.score([(premise, "the sky is blue")])
        n_windows = sum(len(b["inputs"]) for b in server.bodies)
        assert n_windows == 5 and all(len(b["inputs"]) <= 2 for b in server.bodies)
        assert server.requests == 3
    assert got == pytest.approx(softmax_entail("the sky is blue", "the sky is blue"))


def test_rerank_sends_the_premise_as_query_and_reads_each_score():
    def one_logit(premise: str, hypothesis: str) -> list[float]:
        return [overlap_logits(premise, hypothesis)[1] - 1.5]

    with FakeTeiServer(logits_fn=one_logit, id2label={0: "LABEL_0"}) as server:
        verifier = TeiVerifier(url=server.root, route="rerank", retry=NO_RETRY)
        got = verifier.score(PAIRS)
        assert server.bodies[0]["query"] == "the sky is blue"
        assert server.bodies[0]["texts"] == ["the sky is blue", "grass is green"]
    assert got == pytest.approx([1 / (1 + math.exp(-one_logit(*p)[0])) for p in PAIRS])


def test_a_label_the_model_lacks_and_a_dead_server_fail_with_their_fix():
    with FakeTeiServer(logits_fn=overlap_logits, id2label=NLI) as server:
        with pytest.raises(ConfigError, match="verifier.label='consistent' is not one"):
            TeiVerifier(url=server.root, label="consistent", retry=NO_RETRY).score(PAIRS)
        TeiVerifier(url=server.root, retry=NO_RETRY).check()
        root = server.root
    with pytest.raises(LLMError, match="cannot be reached") as caught:
        TeiVerifier(url=root, retry=NO_RETRY).score(PAIRS)
    assert caught.value.reason == "unreachable"
    with pytest.raises(ConfigError, match="verifier.route='embed'"):
        TeiVerifier(route="embed")


@pytest.mark.slow
def test_the_tiny_model_served_gives_the_local_values(tiny_nli, tiny_one):
    pairs = [
        ("Paris is the capital of France.", "Paris is the capital of France."),
        ("Berlin is in Germany.", "The sky is blue."),
    ]
    with FakeTeiServer(str(tiny_nli)) as server:
        got = TeiVerifier(url=server.root, retry=NO_RETRY).score(pairs)
    assert got == pytest.approx([by_hand(raw_logits(tiny_nli, *p), 1) for p in pairs], abs=1e-6)
    with FakeTeiServer(str(tiny_one)) as server:
        got = TeiVerifier(url=server.root, route="rerank", retry=NO_RETRY).score(pairs)
    assert got == pytest.approx([by_hand(raw_logits(tiny_one, *p)) for p in pairs], abs=1e-6)
