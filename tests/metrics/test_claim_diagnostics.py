"""The shared claim layer and the claim metrics: hand-computed values of every formula and
edge, one judge call per distinct extraction / check shared by every entry, the verifier
adapter, and the audit's claim verdicts."""

from __future__ import annotations

import json
import math
import re
import threading

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.llm.base import Completion, Usage
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.parsing import parse_structured
from rag_experiments.metrics.audit import RATIONALE_KEY
from rag_experiments.metrics.claim_formulas import ClaimTables, claim_values
from rag_experiments.metrics.claim_layer import (
    ClaimLayer,
    JudgeClaimChecker,
    JudgeClaimExtractor,
    LexicalClaimChecker,
    SentenceClaimExtractor,
    VerifierClaimChecker,
)
from rag_experiments.metrics.diagnostics import (
    ClaimCorrectness,
    ClaimFaithfulness,
    ContextClaimUtilization,
    NoiseSensitivity,
    RetrieverClaims,
    Unfaithfulness,
)
from rag_experiments.records import RagResponse, Sample

T, F = True, False
ENTRIES = (
    ClaimCorrectness,
    RetrieverClaims,
    ContextClaimUtilization,
    NoiseSensitivity,
    Unfaithfulness,
    ClaimFaithfulness,
)


def _v(tables: ClaimTables) -> dict[str, float]:
    return {k: v.value for k, v in claim_values(tables).items()}


# --- formulas, by hand ----------------------------------------------------------------------


def test_every_formula_on_one_worked_row():
    # response claims r1..r4, reference claims g1..g3, chunks c1..c3
    # answer2response (reference ⊨ r_i): r1 T, r2 T, r3 F, r4 F
    # response2answer (response ⊨ g_j):  g1 T, g2 F, g3 T
    # retrieved2answer: g1 in c1; g2 in c2; g3 in none   -> relevant chunks c1, c2; c3 irrelevant
    # retrieved2response: r1 in c1; r2 in none; r3 in c3 (irrelevant); r4 in c2 (relevant)
    t = ClaimTables(
        answer2response=(T, T, F, F),
        response2answer=(T, F, T),
        retrieved2response=((T, F, F), (F, F, F), (F, F, T), (F, T, F)),
        retrieved2answer=((T, F, F), (F, T, F), (F, F, F)),
        n_chunks=3,
    )
    v = _v(t)
    p, r = 2 / 4, 2 / 3
    assert v["claim_precision"] == p
    assert v["claim_recall"] == r
    assert v["claim_f1"] == pytest.approx(2 * p * r / (p + r))
    assert v["context_claim_recall"] == 2 / 3  # g1, g2 recalled
    assert v["context_claim_precision"] == 2 / 3  # c1, c2 useful
    assert v["context_claim_utilization"] == 1 / 2  # recalled g1, g2; response holds g1
    assert v["noise_sensitivity_relevant"] == 1 / 4  # r4: incorrect, from relevant c2
    assert v["noise_sensitivity_irrelevant"] == 1 / 4  # r3: incorrect, only from c3
    assert v["hallucination"] == 0.0  # r2 unfaithful but correct
    assert v["self_knowledge"] == 1 / 4  # r2
    assert v["claim_faithfulness"] == 3 / 4


def test_a_claim_in_relevant_and_irrelevant_chunks_counts_as_relevant_noise_only():
    t = ClaimTables((F,), (T,), ((T, T),), ((T, F),), n_chunks=2)
    v = _v(t)
    assert (v["noise_sensitivity_relevant"], v["noise_sensitivity_irrelevant"]) == (1.0, 0.0)


@pytest.mark.parametrize(
    ("tables", "name", "reason"),
    [
        (ClaimTables((), (T,), (), ((T,),), 1), "claim_precision", "no_claims"),
        (ClaimTables((), (T,), (), ((T,),), 1), "hallucination", "no_claims"),
        (ClaimTables((T,), (), ((T,),), (), 1), "claim_recall", "no_reference_claims"),
        (ClaimTables((T,), (), ((T,),), (), 1), "context_claim_precision", "no_reference_claims"),
        (
            ClaimTables((T,), (), ((T,),), (), 1),
            "noise_sensitivity_relevant",
            "no_reference_claims",
        ),
        (
            ClaimTables((T,), (T,), ((F,),), ((F,),), 1),
            "context_claim_utilization",
            "no_recalled_claims",
        ),
        (ClaimTables((T,), (T,), ((),), ((),), 0), "context_claim_precision", "empty_context"),
        (ClaimTables((T,), (T,), ((),), ((),), 0), "hallucination", "empty_context"),
        (ClaimTables((T,), (T,), ((),), ((),), 0), "self_knowledge", "empty_context"),
        (ClaimTables("no_reference", (T,), ((T,),), ((T,),), 1), "claim_f1", "no_reference"),
    ],
)
def test_empty_denominators_are_nan_with_a_reason(tables, name, reason):
    value = claim_values(tables, [name])[name]
    assert math.isnan(value.value) and value.reason == reason


def test_no_chunks_gives_flagged_zeros_where_the_formula_is_zero():
    v = claim_values(ClaimTables((F,), (T,), ((),), ((),), 0))
    for name in ("context_claim_recall", "claim_faithfulness", "noise_sensitivity_irrelevant"):
        assert (v[name].value, v[name].reason) == (0.0, "empty_context")


def test_f1_is_zero_when_precision_and_recall_are_zero():
    assert _v(ClaimTables((F,), (F,), ((T,),), ((T,),), 1))["claim_f1"] == 0.0


# --- the layer -------------------------------------------------------------------------------


class ClaimJudge:
    """Answers the claim prompts from their text: claims = the text's sentences; a claim is
    entailed by a passage that contains it verbatim (case-insensitive). Counts calls."""

    max_concurrency = 4
    slot_affinity = False

    def __init__(self):
        self.calls = 0
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def complete(self, messages, schema=None, **options):
        with self._lock:
            self.calls += 1
        text = messages[-1]["content"]
        self.prompts.append(schema.__name__)
        if schema.__name__ == "ClaimList":
            body = text.split("Text: ", 1)[1].split("\n\nTask:", 1)[0]
            reply = {"claims": [s.strip() for s in body.split(".") if s.strip()]}
        else:
            passages = re.findall(r"^\[\d+\] (.*)$", text.split("Claims:")[0], flags=re.M)
            claims = re.findall(r"^\[\d+\] (.*)$", text.split("Claims:")[1], flags=re.M)
            reply = {
                "entailed_by": [
                    [i + 1 for i, p in enumerate(passages) if c.lower() in p.lower()]
                    for c in claims
                ]
            }
        raw = json.dumps(reply)
        return Completion(text=raw, parsed=parse_structured(raw, schema), usage=Usage(10, 5))

    def describe(self):
        return {"provider": "claim-judge"}


SAMPLE = Sample(
    id="q1", user_input="How is an account made?", reference="Form AR-1 is used. It takes 2 days."
)
RESP = RagResponse(
    response="Form AR-1 is used. Badges are blue.",
    retrieved_contexts=["Form AR-1 is used by managers.", "Badges are blue at reception."],
)


def _score_all(judge, **kw):
    out = {}
    for cls in ENTRIES:
        values, record = cls(judge=judge, **kw).score_row(SAMPLE, RESP)
        out.update({k: v.value for k, v in values.items()})
        out.setdefault("_calls", 0)
        out["_calls"] += record["judge_calls"]
    return out


def test_every_entry_shares_one_extraction_per_text_and_one_check_per_pair():
    judge = ClaimJudge()
    v = _score_all(judge)
    # 2 extractions + response vs reference + reference vs response + 2 chunk checks
    assert judge.calls == v["_calls"] == 6
    # r = [Form AR-1 is used ✓ref ✓c1, Badges are blue ✗ref ✓c2]; g = [Form AR-1 ✓resp ✓c1,
    # It takes 2 days ✗resp, in no chunk]
    assert v["claim_precision"] == 0.5 and v["claim_recall"] == 0.5
    assert v["context_claim_recall"] == 0.5 and v["context_claim_precision"] == 0.5
    assert v["noise_sensitivity_irrelevant"] == 0.5 and v["noise_sensitivity_relevant"] == 0.0
    assert v["claim_faithfulness"] == 1.0 and v["hallucination"] == 0.0


def test_without_the_cache_every_entry_asks_for_itself():
    judge = ClaimJudge()
    v = _score_all(judge, claim_cache=False)
    # extractions + checks: correctness 2+2, retriever 1+1, utilization 1+2, noise 2+3,
    # unfaithfulness 1+2, faithfulness 1+1
    assert judge.calls == v["_calls"] == 19
    assert v["claim_f1"] == 0.5


def test_one_call_per_chunk_when_the_judge_cannot_batch():
    judge = ClaimJudge()
    ClaimFaithfulness(judge=judge, batch_chunks=False).score_row(SAMPLE, RESP)
    assert judge.prompts == ["ClaimList", "ClaimSupport", "ClaimSupport"]


def test_concurrent_requests_for_one_check_make_one_call():
    judge = ClaimJudge()
    layer = ClaimLayer(JudgeClaimExtractor(judge), JudgeClaimChecker(judge))
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(layer.check(("a b",), ("a b c",))))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert judge.calls == 1
    assert sorted(u.calls for _, u in results) == [0] * 7 + [1]
    assert {c.entailed for c, _ in results} == {((True,),)}


class StubVerifier:
    """A verifier backend: probability 0.9 when the hypothesis is in the premise, else 0.1."""

    def __init__(self):
        self.batches = []

    def score(self, pairs):
        self.batches.append(list(pairs))
        return [0.9 if h.lower().rstrip(".") in p.lower() else 0.1 for p, h in pairs]


def test_verifier_checker_scores_all_pairs_in_one_batch():
    verifier = StubVerifier()
    layer = ClaimLayer(SentenceClaimExtractor(), VerifierClaimChecker(verifier))
    values, record = ClaimFaithfulness(layer=layer).score_row(SAMPLE, RESP)
    assert values["claim_faithfulness"].value == 1.0 and record["judge_calls"] == 0
    assert len(verifier.batches) == 1 and len(verifier.batches[0]) == 4  # 2 claims × 2 chunks


def test_lexical_checker_by_hand():
    checked, _ = LexicalClaimChecker(0.8).check(
        ["Badges are blue.", "Passwords expire monthly."], ["Blue badges are given."]
    )
    assert checked.entailed == ((True,), (False,))


def test_rationale_lists_each_claim_with_its_verdicts():
    _, record = NoiseSensitivity(judge=ClaimJudge()).score_row(SAMPLE, RESP)
    assert record[RATIONALE_KEY] == [
        "response claim: Form AR-1 is used | in reference ✓ | chunks 1",
        "response claim: Badges are blue | in reference ✗ | chunks 2",
        "reference claim: Form AR-1 is used | chunks 1",
        "reference claim: It takes 2 days | chunks none",
    ]


@pytest.mark.parametrize(
    ("sample", "resp", "column", "reason"),
    [
        (SAMPLE, RagResponse(error="timeout"), "claim_precision", "target_error"),
        (SAMPLE, RagResponse(no_response=True), "claim_recall", "no_response"),
        (SAMPLE, RagResponse(response="I don't know."), "claim_precision", "refusal"),
        (Sample(id="q", user_input="?", reference=""), RESP, "claim_recall", "no_reference"),
        (
            Sample(id="q", user_input="?", reference="x", answerable=False),
            RESP,
            "claim_precision",
            "unanswerable",
        ),
    ],
)
def test_row_edges_are_nan_with_their_reason(sample, resp, column, reason):
    values, _ = ClaimCorrectness(judge=ClaimJudge()).score_row(sample, resp)
    assert math.isnan(values[column].value) and values[column].reason == reason


def test_fake_judge_script_runs_every_entry_offline():
    judge = FakeChat(
        responses={
            "ClaimList": {"claims": ["one", "two"]},
            "ClaimSupport": {"entailed_by": [[1], []]},
        },
        fit_lengths=True,
    )
    values = {}
    for cls in ENTRIES:
        values.update(cls(judge=judge).score_row(SAMPLE, RESP)[0])
    assert values["claim_f1"].value == 0.5 and values["claim_faithfulness"].value == 0.5
    assert values["context_claim_precision"].value == 0.5


def test_no_judge_and_unknown_checker_say_how_to_fix():
    with pytest.raises(ConfigError, match="needs a judge"):
        ClaimCorrectness().score_row(SAMPLE, RESP)
    with pytest.raises(ConfigError, match="checker must be one of"):
        ClaimCorrectness(checker="nli")


def test_faithfulness_and_context_recall_on_the_claim_layer_cost_nothing_more():
    from rag_experiments.metrics.context_recall import ContextRecall
    from rag_experiments.metrics.faithfulness import Faithfulness

    judge = ClaimJudge()
    v = _score_all(judge)
    faith, rec_f = Faithfulness(judge=judge, claim_layer=True).score_row(SAMPLE, RESP)
    recall, rec_r = ContextRecall(judge=judge, claim_layer=True).score_row(SAMPLE, RESP)
    assert judge.calls == 6 and rec_f["judge_calls"] == rec_r["judge_calls"] == 0
    assert faith["faithfulness"].value == v["claim_faithfulness"] == 1.0
    assert recall["context_recall"].value == v["context_claim_recall"] == 0.5


def test_with_a_verifier_the_judge_extracts_and_the_verifier_checks():
    # checker=auto with the job's verifier: the 2 extractions are judge calls, every check is
    # the verifier's (the StubVerifier entails a claim its premise contains: the same
    # verdicts as ClaimJudge's, so the values equal the judge-only ones by hand above).
    judge, verifier = ClaimJudge(), StubVerifier()
    v = _score_all(judge, verifier=verifier)
    assert judge.calls == v["_calls"] == 2
    assert judge.prompts == ["ClaimList", "ClaimList"]
    # response vs reference, reference vs response, response vs 2 chunks, reference vs 2 chunks
    assert sorted(len(b) for b in verifier.batches) == [2, 2, 4, 4]
    assert v["claim_precision"] == 0.5 and v["claim_recall"] == 0.5
    assert v["context_claim_recall"] == 0.5 and v["noise_sensitivity_irrelevant"] == 0.5
    assert v["claim_faithfulness"] == 1.0 and v["hallucination"] == 0.0


def test_checker_choice_follows_the_jobs_verifier():
    verifier = StubVerifier()
    assert ClaimCorrectness(judge=ClaimJudge()).checker == "judge"
    assert ClaimCorrectness(judge=ClaimJudge(), verifier=verifier).checker == "verifier"
    assert ClaimCorrectness(judge=ClaimJudge(), verifier=verifier, checker="judge").verifier is None
    with pytest.raises(ConfigError, match="checker=verifier needs a verifier: set verifier=local"):
        ClaimCorrectness(judge=ClaimJudge(), checker="verifier")


def test_the_run_hands_its_verifier_to_the_claim_entries(tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from rag_experiments.build import SharedParts, build_metric
    from rag_experiments.locations import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["metrics=diagnostics", "judge=fake"])
    GlobalHydra.instance().clear()
    node = cfg.metrics.suite.claim_correctness
    shared = SharedParts.__new__(SharedParts)
    shared.cfg, stub = cfg, StubVerifier()
    shared.judge, shared.verifier = ClaimJudge, lambda: stub  # type: ignore[method-assign]
    assert build_metric(node, shared).checker == "judge"  # verifier=none: the judge checks
    cfg.verifier = {"_target_": "x"}  # any verifier node: the run builds and hands it over
    built = build_metric(node, shared)
    assert built.checker == "verifier" and built.verifier is stub
