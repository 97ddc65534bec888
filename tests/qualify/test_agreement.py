"""Judge–human agreement: the blinded sheet hides the judge, the key maps items back, and
Cohen's kappa matches a 2×2 table computed by hand; the result is logged to the run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from rag_experiments.errors import DatasetError
from rag_experiments.qualify.agreement import agreement, grade_sheet, log_agreement, score_sheet

# Judge faithfulness per sample: 6 "faithful" (1.0) and 4 "unfaithful" (0.0); s10 is not graded.
JUDGE = {f"s{i}": (1.0 if i < 6 else 0.0) for i in range(10)}
# Hand table (rows human, columns judge), n = 10:
#                judge faithful  judge unfaithful
#   faithful           4                1          -> human marginal 5
#   unfaithful         2                3          -> human marginal 5
#   judge marginal     6                4
# p_o = (4 + 3) / 10 = 0.7;  p_e = 0.5*0.6 + 0.5*0.4 = 0.5;  kappa = (0.7 - 0.5) / 0.5 = 0.4
HUMAN = {
    **{f"s{i}": "faithful" for i in range(4)},
    "s4": "unfaithful",
    "s5": "unfaithful",
    "s6": "faithful",
    **{f"s{i}": "unfaithful" for i in (7, 8, 9)},
}


def _run_with_table(tmp_path: Path) -> tuple[str, str]:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment("agree", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    rows = [
        {
            "id": sid,
            "user_input": f"question {sid}?",
            "reference": "ref",
            "response": f"answer {sid}",
            "retrieved_contexts": json.dumps(["ctx one", "ctx two"]),
            "faithfulness": v,
            "faithfulness.reason": None,
        }
        for sid, v in JUDGE.items()
    ]
    rows.append(
        {
            "id": "s10",
            "user_input": "q?",
            "reference": "",
            "response": "",
            "retrieved_contexts": "[]",
            "faithfulness": math.nan,
            "faithfulness.reason": "target_error",
        }
    )
    table = pd.DataFrame(rows).to_csv(index=False)
    client.log_text(run.info.run_id, table, "per_query_results.csv")
    return run.info.run_id, uri


def test_kappa_matches_a_2x2_table_by_hand() -> None:
    human = ["f"] * 4 + ["u"] * 1 + ["f"] * 2 + ["u"] * 3
    judge = ["f"] * 4 + ["f"] * 1 + ["u"] * 2 + ["u"] * 3  # pairs: 4 ff, 1 uf, 2 fu, 3 uu
    result = agreement(human, judge, ["u", "f"])
    # p_o = 7/10; human f 6/10, judge f 5/10; p_e = .6*.5 + .4*.5 = .5; kappa = .2/.5
    assert result.raw == pytest.approx(0.7)
    assert result.kappa == pytest.approx(0.4)
    assert math.isnan(agreement(["a", "a"], ["a", "a"], ["a", "b"]).kappa)  # one label: undefined


def test_grade_sheet_is_blinded_and_agreement_is_logged(tmp_path: Path) -> None:
    run_id, uri = _run_with_table(tmp_path)
    sheet_path, key_path = grade_sheet(run_id, uri, n=20, seed=0, out_dir=tmp_path / "out")

    sheet = pd.read_csv(sheet_path, dtype=str, keep_default_na=False)
    key = json.loads(key_path.read_text())
    assert len(sheet) == 10  # the NaN row is not graded; n larger than what exists
    assert list(sheet.columns) == [
        "item",
        "sheet_id",
        "question",
        "reference",
        "contexts",
        "response",
        "faithfulness",
        "notes",
    ]
    assert (sheet["faithfulness"] == "").all()  # judge verdicts hidden
    assert sheet["contexts"].iloc[0] == "[1] ctx one\n\n[2] ctx two"
    assert key["labels"] == {"faithfulness": ["unfaithful", "partial", "faithful"]}
    by_item = {it["item"]: it for it in key["items"]}
    order = [by_item[int(i)]["sample_id"] for i in sheet["item"]]
    assert sorted(order) == sorted(JUDGE) and order != sorted(JUDGE)  # shuffled
    again, _ = grade_sheet(run_id, uri, n=20, seed=0, out_dir=tmp_path / "again")
    assert again.read_text() == sheet_path.read_text()  # seeded

    # graders' labels (the first one in capitals: labels are case-insensitive)
    sheet["faithfulness"] = [HUMAN[s].upper() if k == 0 else HUMAN[s] for k, s in enumerate(order)]
    filled = tmp_path / "out" / "filled.csv"
    sheet.to_csv(filled, index=False)
    key2, results = score_sheet(filled)  # key found beside the sheet by its sheet_id
    (res,) = results
    assert (res.metric, res.n) == ("faithfulness", 10)
    assert res.raw == pytest.approx(0.7) and res.kappa == pytest.approx(0.4)

    log_agreement(key2, results)
    metrics = mlflow.MlflowClient(uri).get_run(run_id).data.metrics
    assert metrics["agreement.faithfulness.kappa"] == pytest.approx(0.4)
    assert metrics["agreement.faithfulness.raw"] == pytest.approx(0.7)
    assert metrics["agreement.faithfulness.n"] == 10

    sheet.loc[0, "faithfulness"] = "mostly"
    sheet.to_csv(filled, index=False)
    with pytest.raises(DatasetError, match="'mostly' is not one of unfaithful, partial, faithful"):
        score_sheet(filled)
