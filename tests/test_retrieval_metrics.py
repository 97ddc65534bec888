"""Retrieval metrics against values computed by hand on a toy case."""

from __future__ import annotations

import math

import pytest

from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import RagResponse, Sample


def _s(i: str, rel: list[str], **kw) -> Sample:
    return Sample(id=i, user_input=f"question {i}?", reference_doc_ids=rel, **kw)


def _r(ranking: list[str] | None, error: str | None = None) -> RagResponse:
    return RagResponse(retrieved_doc_ids=ranking, error=error)


L2 = math.log2


@pytest.fixture
def toy():
    samples = [
        _s("q1", ["d1", "d3"]),
        _s("q2", ["d5"]),
        _s("q3", ["d7"]),
        _s("q4", [], answerable=False),
        _s("q5", ["d1"]),
        _s("q6", [], relevance={"d1": 2, "d2": 1, "d9": 0}),
        _s("q7", []),
    ]
    responses = [
        _r(["d2", "d1", "d3", "d4"]),
        _r(["d5", "d6"]),
        _r(["d8", "d9", "d10"]),
        _r(["d1"]),
        _r(None, error="timeout"),
        _r(["d2", "d1"]),
        _r(["d1"]),
    ]
    metrics = RetrievalMetrics(cutoffs=[1, 3, 10])
    return metrics, metrics.evaluate(samples, responses)


def test_three_query_toy_case_by_hand(toy):
    _, out = toy
    q1, q2, q3 = out[0], out[1], out[2]
    # q1: relevant d1 (rank 2) and d3 (rank 3)
    assert q1["Hit@1"].value == 0.0
    assert q1["Hit@3"].value == 1.0
    assert q1["MRR@10"].value == pytest.approx(1 / 2)
    assert q1["MRR@3"].value == pytest.approx(1 / 2)
    assert q1["MRR@1"].value == 0.0  # first relevant at rank 2: nothing within the top 1
    assert q1["P@3"].value == pytest.approx(2 / 3)
    assert q1["P@10"].value == pytest.approx(2 / 10)  # trec_eval divides by k
    assert q1["R@1"].value == 0.0
    assert q1["R@3"].value == 1.0
    dcg = 1 / L2(3) + 1 / L2(4)
    idcg = 1 / L2(2) + 1 / L2(3)
    assert q1["nDCG@3"].value == pytest.approx(dcg / idcg)
    assert q1["MAP@3"].value == pytest.approx((1 / 2 + 2 / 3) / 2)
    # q2: hit at rank 1
    for name in ("Hit@1", "MRR@10", "nDCG@10", "R@1", "MAP@10"):
        assert q2[name].value == pytest.approx(1.0), name
    assert q2["P@3"].value == pytest.approx(1 / 3)
    # q3: nothing relevant retrieved
    for name, mv in q3.items():
        assert mv.value == 0.0 and mv.reason is None, name
    # q5 in toy is a target error; q3's relevant doc never appears: MRR@10 0 as well
    assert q3["MRR@10"].value == 0.0


def test_graded_relevance_uses_trec_eval_linear_gain(toy):
    _, out = toy
    q6 = out[5]
    dcg = 1 / L2(2) + 2 / L2(3)  # d2 (grade 1) at rank 1, d1 (grade 2) at rank 2
    idcg = 2 / L2(2) + 1 / L2(3)
    assert q6["nDCG@3"].value == pytest.approx(dcg / idcg)
    assert q6["R@3"].value == 1.0  # d9 has grade 0: not relevant


def test_nan_rows_carry_reasons(toy):
    metrics, out = toy
    names = [s.name for s in metrics.specs()]
    assert len(names) == 6 * 3
    for row, reason in ((out[3], "unanswerable"), (out[4], "target_error"),
                        (out[6], "no_reference_docs")):
        assert set(row) == set(names)
        assert all(math.isnan(v.value) and v.reason == reason for v in row.values())


def test_rank_order_is_kept_for_tied_ids():
    # trec_eval would sort equal scores by doc id; our strictly decreasing scores keep rank order.
    m = RetrievalMetrics(cutoffs=[1])
    out = m.evaluate([_s("a", ["z"])], [_r(["z", "a"])])
    assert out[0]["Hit@1"].value == 1.0


def test_empty_ranking_scores_zero():
    m = RetrievalMetrics(cutoffs=[5])
    out = m.evaluate([_s("a", ["x"])], [_r([])])
    assert out[0]["nDCG@5"].value == 0.0 and out[0]["nDCG@5"].reason is None


def test_bad_config_is_refused():
    from rag_experiments.errors import ConfigError

    with pytest.raises(ConfigError, match="cutoffs"):
        RetrievalMetrics(cutoffs=[0])
    with pytest.raises(ConfigError, match="unknown retrieval measure"):
        RetrievalMetrics(measures=["Bpref"])
