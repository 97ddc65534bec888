"""Faithfulness by a verifier: values by hand from the verifier's probabilities (and, slow, from
the tiny model's own logits through a whole `rag-exp run`, local and served), the edges with the
reasons of the judged metric, and judge-check's verifier probe."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from rag_experiments.errors import ConfigError
from rag_experiments.llm.errors import LLMTimeoutError
from rag_experiments.metrics.verifier_faithfulness import VerifierFaithfulness, sentence_claims
from rag_experiments.qualify.check import JudgeCheck, labeled_probes
from rag_experiments.qualify.pairs import LabeledPair
from rag_experiments.records import RagResponse, Sample
from rag_experiments.verifier.base import VerifierBase


class Table(VerifierBase):
    """P(premise supports hypothesis) from a table (default 0.1); records every call."""

    def __init__(self, table: dict[tuple[str, str], float], fail: bool = False) -> None:
        self.table = table
        self.fail = fail
        self.calls: list[list[tuple[str, str]]] = []

    @property
    def id(self) -> str:
        return "table"

    def describe(self) -> dict[str, str]:
        return {"provider": "test", "model": "table"}

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.calls.append(list(pairs))
        if self.fail:
            raise LLMTimeoutError("verifier: no answer within 1 s")
        return [self.table.get(p, 0.1) for p in pairs]


C1, C2 = "Paris is in France.", "The Seine flows through Paris."
TABLE = {
    (C1, "Paris is in France."): 0.9,
    (C2, "Paris is in France."): 0.3,
    (C1, "The Seine is long."): 0.2,
    (C2, "The Seine is long."): 0.45,
    (C1, "It has 2 million people."): 0.6,
    (C2, "It has 2 million people."): 0.7,
}
ANSWER = "Paris is in France. The Seine is long. It has 2 million people. Paris is in  france."


def _row(metric: VerifierFaithfulness, response: str, contexts: list[str], **kw):
    return metric.score_row(
        Sample(id="q", user_input="Tell me about Paris."),
        RagResponse(response=response, retrieved_contexts=contexts, **kw),
    )


def test_share_of_supported_sentences_and_mean_probability_by_hand():
    verifier = Table(TABLE)
    values, record = _row(VerifierFaithfulness(verifier), ANSWER, [C1, "  ", C2])
    # claims (the 4th repeats the 1st): best p = 0.9 (ctx 1), 0.45 (ctx 3), 0.7 (ctx 3)
    assert values["faithfulness"].value == pytest.approx(2 / 3)  # 0.9, 0.7 >= 0.5
    assert values["faithfulness_prob"].value == pytest.approx((0.9 + 0.45 + 0.7) / 3)
    assert len(verifier.calls) == 1 and len(verifier.calls[0]) == 6  # one batch: 3 x 2
    assert [c["context"] for c in record["claims"]] == [1, 3, 3]
    assert record["judge_calls"] == 1
    assert record["rationale"][1] == "✗ The Seine is long. (context 3, p=0.45)"
    lenient, _ = _row(VerifierFaithfulness(Table(TABLE), threshold=0.4), ANSWER, [C1, C2])
    assert lenient["faithfulness"].value == 1.0
    prefixed, _ = _row(VerifierFaithfulness(Table(TABLE), prefix="verifier."), ANSWER, [C1, C2])
    assert set(prefixed) == {"verifier.faithfulness", "verifier.faithfulness_prob"}


def test_edges_carry_the_judged_metrics_reasons():
    verifier = Table(TABLE)
    metric = VerifierFaithfulness(verifier)
    empty, _ = _row(metric, ANSWER, [" ", ""])
    assert {k: (v.value, v.reason) for k, v in empty.items()} == {
        "faithfulness": (0.0, "empty_context"),
        "faithfulness_prob": (0.0, "empty_context"),
    }
    for response, kw, reason in (
        ("", {}, "no_claims"),
        ("   ", {}, "no_claims"),
        ("I don't know.", {}, "refusal"),
        (ANSWER, {"error": "timeout"}, "target_error"),
    ):
        values, _ = _row(metric, response, [C1], **kw)
        assert all(math.isnan(v.value) and v.reason == reason for v in values.values())
    assert verifier.calls == []  # none of these asked the verifier
    failed, record = _row(VerifierFaithfulness(Table(TABLE, fail=True)), ANSWER, [C1])
    assert all(v.reason == "timeout" for v in failed.values())
    assert record["rationale"] == ["verifier: no answer within 1 s"]
    with pytest.raises(ConfigError, match="needs a verifier"):
        _row(VerifierFaithfulness(None), ANSWER, [C1])
    with pytest.raises(ConfigError, match="threshold must be in"):
        VerifierFaithfulness(verifier, threshold=1.5)


def test_sentence_claims_fold_case_and_spaces():
    assert sentence_claims("A b. a  B. C!") == ["A b.", "C!"]


def test_evaluate_runs_on_the_judge_scheduler_and_keeps_row_order():
    metric = VerifierFaithfulness(Table(TABLE))
    samples = [Sample(id=str(i), user_input="q") for i in range(3)]
    responses = [
        RagResponse(response="Paris is in France.", retrieved_contexts=[C1]),
        RagResponse(response="The Seine is long.", retrieved_contexts=[C1]),
        RagResponse(response="Paris is in France.", retrieved_contexts=[]),
    ]
    rows = metric.evaluate(samples, responses)
    assert [r["faithfulness"].value for r in rows] == [1.0, 0.0, 0.0]
    assert [a["judge_calls"] for a in metric.audit()] == [1, 1, 0]


def test_judge_check_qualifies_a_verifier_on_labeled_pairs_as_a_judge():
    assert "verifier" in labeled_probes()["verifier_faithfulness"].requires
    pairs = [
        LabeledPair("a", "q", (C1,), "Paris is in France.", True),
        LabeledPair("b", "q", (C1,), "The Seine is long.", False),
        LabeledPair("c", "q", (C2,), "It has 2 million people.", True),
        LabeledPair("d", "q", (C2,), "Paris is in France.", False),
    ]
    check = JudgeCheck(None, verifier=Table(TABLE), threshold=1.0)
    result = check.run(pairs, ["verifier_faithfulness"])["verifier_faithfulness"]
    # verdicts: a 0.9 ✓, b 0.2 ✗, c 0.7 ✓, d 0.3 ✗ → all agree with the labels
    assert result.verdicts == {"a": True, "b": False, "c": True, "d": False}
    assert result.agreement.kappa == 1.0 and result.agreement.balanced_accuracy == 1.0
    assert result.judge_calls == 4


# --- slow: the tiny model through a whole run, local and served -------------------------------


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory: pytest.TempPathFactory):
    """A three-label tiny BERT folder with random weights."""
    from rag_experiments.fakes.tiny_verifier import make_tiny_verifier

    return make_tiny_verifier(tmp_path_factory.mktemp("tiny-nli"))


def _run_verifier(tmp_path, *overrides: str):
    """A `rag-exp run metrics=verifier` of two sample questions; (run, per-query rows)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from mlflow import MlflowClient

    from rag_experiments.job import run_job
    from rag_experiments.locations import CONF_DIR, PROJECT_ROOT

    tmp_path.mkdir(parents=True, exist_ok=True)
    lines = (PROJECT_ROOT / "datasets/sample/eval.jsonl").read_text().splitlines()[:2]
    (tmp_path / "two.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            config_name="config",
            overrides=[
                "dataset=jsonl",
                f"dataset.path={tmp_path / 'two.jsonl'}",
                f"dataset.corpus={PROJECT_ROOT / 'datasets/sample/source'}",
                "embedder=hash",
                "llm=fake",
                "chunker=fixed",
                "metrics=verifier",
                "progress=false",
                f"paths.cache_dir={tmp_path}/cache",
                f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
                *overrides,
            ],
        )
    GlobalHydra.instance().clear()
    run_job(cfg)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    run = client.search_runs([exp], order_by=["attributes.start_time DESC"])[0]
    path = client.download_artifacts(run.info.run_id, "per_query.json", str(tmp_path))
    table = json.loads(open(path).read())
    rows = [dict(zip(table["columns"], r, strict=True)) for r in table["data"]]
    return run, rows


def _by_hand(folder, rows) -> list[tuple[float, float]]:
    """(faithfulness, faithfulness_prob) of each row from the model's own logits."""
    from tests.verifier.conftest import by_hand, raw_logits

    out = []
    for row in rows:
        claims = sentence_claims(row["response"])
        contexts = json.loads(row["retrieved_contexts"])  # the table keeps the list as JSON
        assert contexts and all(len(raw_logits(folder, c, "x")) == 3 for c in contexts)
        best = [max(by_hand(raw_logits(folder, c, claim), 1) for c in contexts) for claim in claims]
        out.append((sum(p >= 0.5 for p in best) / len(best), sum(best) / len(best)))
    return out


@pytest.mark.slow
def test_a_run_scores_faithfulness_with_the_tiny_model_local_and_served(tmp_path, tiny_nli):
    from rag_experiments.fakes.tei_server import FakeTeiServer

    run, rows = _run_verifier(tmp_path / "local", "verifier=local", f"verifier.path={tiny_nli}")
    expected = [v for pair in _by_hand(tiny_nli, rows) for v in pair]
    got = [v for r in rows for v in (r["faithfulness"], r["faithfulness_prob"])]
    assert got == pytest.approx(expected, abs=1e-5)
    assert run.data.metrics["verifier.llm_calls"] == 2  # one batch per question
    with FakeTeiServer(str(tiny_nli)) as server:
        served, served_rows = _run_verifier(
            tmp_path / "tei", "verifier=tei", f"verifier.url={server.root}"
        )
    served_values = [v for r in served_rows for v in (r["faithfulness"], r["faithfulness_prob"])]
    assert served_values == pytest.approx(expected, abs=1e-5)
    assert served.data.metrics["faithfulness"] == pytest.approx(run.data.metrics["faithfulness"])
