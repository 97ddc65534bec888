"""Retrieval metrics against values computed by hand on a toy case."""

from __future__ import annotations

import math

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import MetricValue, RagResponse, Sample


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
    metrics = RetrievalMetrics(cutoffs=[1, 3, 10], chunk_level=False)
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
    for row, reason in (
        (out[3], "unanswerable"),
        (out[4], "target_error"),
        (out[6], "no_reference_docs"),
    ):
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
    # defined (0 over IDCG > 0, trec_eval -c) and flagged, so the row says why it is 0
    assert out[0]["nDCG@5"] == MetricValue(0.0, "empty_ranking")


def test_bad_config_is_refused():
    from rag_experiments.errors import ConfigError

    with pytest.raises(ConfigError, match="cutoffs"):
        RetrievalMetrics(cutoffs=[0])
    with pytest.raises(ConfigError, match="unknown retrieval measure"):
        RetrievalMetrics(measures=["Bpref"])


# --- chunk level -------------------------------------------------------------------------

ACCOUNTS = "New accounts are requested by the line manager using Access Request Form AR-1."
DESK = "The Service Desk creates a standard account within 2 business days."
MALWARE = "Staff must disconnect an infected computer from the network but must not power it off."
INVOICES = "Invoices are approved by the finance manager."
PAYMENTS = "Payments are released on Fridays."
OTHER = "Passwords must be changed every 90 days."
DESK_SHOUTED = "Service desk: THE SERVICE DESK creates a standard account within 2 business days!"


def _c(
    contexts: list[str],
    ids: list[str] | None = None,
    doc_ids: list[str] | None = None,
    error: str | None = None,
) -> RagResponse:
    return RagResponse(
        retrieved_contexts=contexts, retrieved_ids=ids, retrieved_doc_ids=doc_ids, error=error
    )


def _cs(i: str, refs: list[str], docs: list[str] = ("d1",), **kw) -> Sample:
    return Sample(
        id=i,
        user_input=f"question {i}?",
        reference_doc_ids=list(docs),
        reference_contexts=refs,
        **kw,
    )


@pytest.fixture
def chunk_toy():
    samples = [
        _cs("c1", [ACCOUNTS, DESK]),
        _cs("c2", [MALWARE]),
        _cs("c3", [INVOICES, PAYMENTS]),
    ]
    responses = [
        # ranks: other, DESK (case and punctuation changed), ACCOUNTS inside a longer chunk,
        # DESK again (already found: not relevant)
        _c(
            [OTHER, DESK_SHOUTED, "Accounts. " + ACCOUNTS + " Leavers are removed.", DESK],
            ids=["a#0", "b#1", "c#2", "b#1"],
            doc_ids=["d9", "d1"],
        ),
        # the same reference twice: only the first counts
        _c([MALWARE, MALWARE.upper()], ids=["m#0", "m#1"], doc_ids=["d1"]),
        # black box: texts only; rank 1 holds both references and is assigned the first
        _c([INVOICES + " " + PAYMENTS, OTHER, "Unrelated text about holidays.", PAYMENTS]),
    ]
    metrics = RetrievalMetrics(cutoffs=[1, 3, 10])
    return metrics, metrics.evaluate(samples, responses)


def test_chunk_level_three_query_toy_case_by_hand(chunk_toy):
    _, out = chunk_toy
    c1, c2, c3 = out
    # c1: run ctx0, ref1, ref0, ctx3 against {ref0, ref1}
    assert c1["chunk.Hit@1"].value == 0.0
    assert c1["chunk.Hit@3"].value == 1.0
    assert c1["chunk.MRR@1"].value == 0.0
    assert c1["chunk.MRR@10"].value == pytest.approx(1 / 2)
    assert c1["chunk.P@3"].value == pytest.approx(2 / 3)
    assert c1["chunk.P@10"].value == pytest.approx(2 / 10)  # the repeated DESK is not relevant
    assert c1["chunk.R@1"].value == 0.0
    assert c1["chunk.R@3"].value == 1.0
    dcg = 1 / L2(3) + 1 / L2(4)
    idcg = 1 / L2(2) + 1 / L2(3)
    assert c1["chunk.nDCG@3"].value == pytest.approx(dcg / idcg)
    assert c1["chunk.MAP@3"].value == pytest.approx((1 / 2 + 2 / 3) / 2)
    # c2: run ref0, ctx1 against {ref0}
    for name in (
        "chunk.Hit@1",
        "chunk.MRR@10",
        "chunk.nDCG@10",
        "chunk.R@1",
        "chunk.MAP@10",
        "chunk.P@1",
    ):
        assert c2[name].value == pytest.approx(1.0), name
    assert c2["chunk.P@3"].value == pytest.approx(1 / 3)  # not 2/3: MALWARE is found once
    # c3: run ref0, ctx1, ctx2, ref1 against {ref0, ref1}
    assert c3["chunk.Hit@1"].value == 1.0
    assert c3["chunk.MRR@1"].value == 1.0
    assert c3["chunk.R@1"].value == pytest.approx(1 / 2)  # rank 1 holds both, counts for one
    assert c3["chunk.R@3"].value == pytest.approx(1 / 2)
    assert c3["chunk.R@10"].value == 1.0
    assert c3["chunk.P@3"].value == pytest.approx(1 / 3)
    assert c3["chunk.P@10"].value == pytest.approx(2 / 10)  # 4 contexts, divided by k = 10
    assert c3["chunk.nDCG@3"].value == pytest.approx(1 / (1 / L2(2) + 1 / L2(3)))
    assert c3["chunk.nDCG@10"].value == pytest.approx(
        (1 / L2(2) + 1 / L2(5)) / (1 / L2(2) + 1 / L2(3))
    )
    assert c3["chunk.MAP@10"].value == pytest.approx((1 / 1 + 2 / 4) / 2)
    # doc level alongside: c1 finds d1 at rank 2; the black box c3 has no doc ids
    assert c1["Hit@1"].value == 0.0 and c1["MRR@10"].value == pytest.approx(1 / 2)
    assert c2["nDCG@10"].value == 1.0
    assert all(
        math.isnan(v.value) and v.reason == "no_doc_ids"
        for n, v in c3.items()
        if not n.startswith("chunk.")
    )
    assert all(v.reason is None for row in out for n, v in row.items() if n.startswith("chunk."))


def test_chunk_names_come_after_the_doc_names(chunk_toy):
    metrics, out = chunk_toy
    names = [s.name for s in metrics.specs()]
    doc = [f"{m}@{k}" for m in ("Hit", "MRR", "nDCG", "P", "R", "MAP") for k in (1, 3, 10)]
    assert names == doc + [f"chunk.{n}" for n in doc]
    assert all(set(row) == set(names) for row in out)
    spec = {s.name: s for s in metrics.specs()}["chunk.R@3"]
    assert (spec.higher_is_better, spec.low, spec.high) == (True, 0.0, 1.0)
    assert "reference context" in spec.description


def test_chunk_level_nan_reasons_and_empty_context_flag():
    samples = [
        _cs("n1", [MALWARE], answerable=False),
        _cs("n2", []),  # no reference contexts: doc level still scored
        _cs("n3", ["  —  ", "..."]),  # references without a word count as none
        _cs("n4", [MALWARE]),
        _cs("n5", [MALWARE], docs=[]),  # no reference docs: chunk level still scored
        _cs("n6", [MALWARE]),
    ]
    responses = [
        _c([MALWARE], doc_ids=["d1"]),
        _c([MALWARE], doc_ids=["d1"]),
        _c([MALWARE], doc_ids=["d1"]),
        _c([], error="timeout"),
        _c([MALWARE]),
        _c([], doc_ids=[]),  # retrieved nothing
    ]
    metrics = RetrievalMetrics(cutoffs=[2])
    out = metrics.evaluate(samples, responses)

    def reasons(row, prefix):
        chunk = prefix == "chunk."
        return {v.reason for n, v in row.items() if n.startswith("chunk.") is chunk}

    assert reasons(out[0], "") == reasons(out[0], "chunk.") == {"unanswerable"}
    assert reasons(out[1], "chunk.") == {"no_reference_contexts"}
    assert out[1]["R@2"].value == 1.0 and out[1]["R@2"].reason is None
    assert reasons(out[2], "chunk.") == {"no_reference_contexts"}
    assert reasons(out[3], "") == reasons(out[3], "chunk.") == {"target_error"}
    assert reasons(out[4], "") == {"no_reference_docs"}
    assert out[4]["chunk.Hit@2"].value == 1.0
    assert out[5]["R@2"] == MetricValue(0.0, "empty_ranking")
    assert out[5]["chunk.R@2"] == MetricValue(0.0, "empty_context")
    for row in out[:4]:
        assert all(math.isnan(v.value) for n, v in row.items() if n.startswith("chunk."))


def test_blank_reference_contexts_are_not_judged():
    # Only MALWARE is judged: finding it is full recall.
    m = RetrievalMetrics(cutoffs=[3], measures=["R"])
    out = m.evaluate([_cs("b", ["", MALWARE, " . "])], [_c([OTHER, MALWARE])])
    assert out[0]["chunk.R@3"].value == 1.0


def test_chunk_ids_never_collide_with_reference_ids():
    # A target whose chunk ids look like ours: a non-covering context must stay non-relevant,
    # and repeated ids must stay separate ranks.
    m = RetrievalMetrics(cutoffs=[1, 3])
    s = [_cs("x", [MALWARE, INVOICES])]
    known = m.evaluate(s, [_c([OTHER, OTHER, MALWARE], ids=["ref1", "ref1", "ref0"])])[0]
    blind = m.evaluate(s, [_c([OTHER, OTHER, MALWARE])])[0]
    assert known["chunk.Hit@1"].value == 0.0
    assert known["chunk.MRR@3"].value == pytest.approx(1 / 3)
    assert known["chunk.P@3"].value == pytest.approx(1 / 3)
    assert known["chunk.R@3"].value == pytest.approx(1 / 2)
    assert {n: v.value for n, v in known.items() if n.startswith("chunk.")} == pytest.approx(
        {n: v.value for n, v in blind.items() if n.startswith("chunk.")}
    )


def test_min_overlap_is_passed_on():
    ref = "alpha beta gamma delta"  # 4 distinct tokens
    loose = RetrievalMetrics(cutoffs=[1], measures=["Hit"], min_overlap=0.5)
    strict = RetrievalMetrics(cutoffs=[1], measures=["Hit"], min_overlap=0.75)
    sample, resp = [_cs("o", [ref])], [_c(["alpha beta zeta eta"])]
    assert loose.evaluate(sample, resp)[0]["chunk.Hit@1"].value == 1.0  # 2/4 ≥ 0.5
    assert strict.evaluate(sample, resp)[0]["chunk.Hit@1"].value == 0.0  # 2/4 < 0.75
    with pytest.raises(ConfigError, match="min_overlap"):
        RetrievalMetrics(min_overlap=0.0)


def test_chunk_level_off_leaves_doc_values_unchanged(chunk_toy):
    _, on = chunk_toy
    samples = [_cs("c1", [ACCOUNTS, DESK]), _cs("c2", [MALWARE]), _cs("c3", [INVOICES])]
    responses = [_c([OTHER], doc_ids=["d9", "d1"]), _c([MALWARE], doc_ids=["d1"]), _c([OTHER])]
    off_metrics = RetrievalMetrics(cutoffs=[1, 3, 10], chunk_level=False)
    off = off_metrics.evaluate(samples, responses)
    assert all(not n.startswith("chunk.") for row in off for n in row)
    assert all(not s.name.startswith("chunk.") for s in off_metrics.specs())
    for a, b in zip(on, off, strict=True):
        for name, v in b.items():
            assert (math.isnan(v.value) and math.isnan(a[name].value)) or v == a[name], name


def test_values_equal_ir_measures_iter_calc_on_random_rankings():
    # Reference: ir-measures' own per-query path (Qrel/ScoredDoc lists through the pytrec_eval
    # provider's iter_calc, one Metric per value; MRR@k as RR over each ranking's first k
    # entries), on graded qrels, rankings with duplicate ids, empty rankings and unjudged docs.
    import random

    import ir_measures
    from ir_measures import AP, RR, P, R, Success, nDCG

    rng = random.Random(7)
    pool = [f"d{j}" for j in range(30)]
    samples, responses = [], []
    for q in range(150):
        rel = {d: rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(pool, rng.randint(1, 6))}
        rel[rng.choice(list(rel))] = rng.choice([1, 2, 3])  # at least one relevant doc
        samples.append(Sample(id=f"q{q}", user_input="?", relevance=rel))
        responses.append(_r([rng.choice(pool) for _ in range(rng.randint(0, 14))]))
    cutoffs = [1, 3, 5, 10]
    out = RetrievalMetrics(cutoffs=cutoffs, chunk_level=False).evaluate(samples, responses)

    provider = ir_measures.providers.registry["pytrec_eval"]
    qrels = [
        ir_measures.Qrel(str(q), d, g) for q, s in enumerate(samples) for d, g in s.qrels().items()
    ]

    def run(k: int | None) -> list:
        docs = []
        for q, resp in enumerate(responses):
            ranking = resp.retrieved_doc_ids
            n = len(ranking)
            cut = ranking if k is None else ranking[:k]
            docs.extend(ir_measures.ScoredDoc(str(q), d, float(n - r)) for r, d in enumerate(cut))
        return docs

    kinds = {"Hit": Success, "nDCG": nDCG, "P": P, "R": R, "MAP": AP}
    ref = {}
    for name, measure in kinds.items():
        for k in cutoffs:
            for m in provider.iter_calc([measure @ k], qrels, run(None)):
                ref[(int(m.query_id), f"{name}@{k}")] = m.value
    for k in cutoffs:
        for m in provider.iter_calc([RR], qrels, run(k)):
            ref[(int(m.query_id), f"MRR@{k}")] = m.value
    assert len(ref) == 150 * 6 * len(cutoffs)
    got = {(q, n): v.value for q, row in enumerate(out) for n, v in row.items()}
    assert got == ref  # exactly equal floats
