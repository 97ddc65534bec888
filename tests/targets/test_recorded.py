"""``target=recorded``, the RAGAS and DeepEval dataset files and ``rag-exp export``: a run's
answers exported and scored again without calling the system give the same answer metrics;
hand-written peer files load and score; a row without a response is NaN ``no_response``."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import DictConfig

from rag_experiments.cli import main as cli_main
from rag_experiments.data.base import EvalDataset
from rag_experiments.data.jsonl import JsonlDataset, write_jsonl
from rag_experiments.data.peer import DeepEvalDataset, RagasDataset, write_deepeval, write_ragas
from rag_experiments.errors import DatasetError
from rag_experiments.job import run_job
from rag_experiments.metrics.keyword_faithfulness import KeywordFaithfulness
from rag_experiments.records import (
    Citation,
    Document,
    RagResponse,
    RecordedAnswer,
    RecordedCitation,
    Sample,
)
from rag_experiments.targets.recorded import RecordedTarget
from rag_experiments.tracking.store import read_table

ANSWER_METRICS = (
    "faithfulness",
    "answer_relevancy",
    "context_precision",
    "context_recall",
    "keyword_faithfulness",
)
FAKE = ("llm=fake", "judge=fake", "embedder=hash", "metrics=custom")


def _run(compose_cfg: Callable[..., DictConfig], tmp_path: Path, name: str, *overrides: str):
    """Run one job; return ``(run, per-query rows by id)``."""
    run_job(compose_cfg(*FAKE, f"run_name={name}", *overrides))
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment], f"tags.`mlflow.runName` = '{name}'")
    table = read_table(client, run.info.run_id)
    return run, {row["id"]: row for row in table.to_dict(orient="records")}


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.slow
def test_export_and_rescore_gives_the_same_answer_metrics(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    base, base_rows = _run(compose_cfg, tmp_path, "base", "max_samples=12")
    assert len(base_rows) == 12
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    for fmt, out in (("ragas", "rec.jsonl"), ("deepeval", "rec.json")):
        path = tmp_path / out
        assert (
            cli_main(
                [
                    "export",
                    base.info.run_id,
                    "--format",
                    fmt,
                    "--out",
                    str(path),
                    "--tracking-uri",
                    uri,
                ]
            )
            == 0
        )
        cache = tmp_path / f"cache-{fmt}"  # its own cache: nothing may build an index there
        rec, rec_rows = _run(
            compose_cfg,
            tmp_path,
            f"rec-{fmt}",
            f"dataset={fmt}",
            f"dataset.path={path}",
            "target=recorded",
            f"paths.cache_dir={cache}",
        )
        assert rec.data.tags["target"] == "recorded"
        assert not (cache / "chroma").exists()
        assert rec_rows.keys() == base_rows.keys()
        for metric in (*ANSWER_METRICS, "Hit@10", "nDCG@10"):  # doc ids were exported too
            for qid, row in base_rows.items():
                assert _same(rec_rows[qid][metric], row[metric]), (fmt, metric, qid)
                assert rec_rows[qid][f"{metric}.reason"] == row[f"{metric}.reason"] or (
                    isinstance(row[f"{metric}.reason"], float)
                )  # NaN (no reason) both
        for metric in ANSWER_METRICS:  # the logged means and counts too
            for key in (metric, f"{metric}_n_valid"):
                assert rec.data.metrics[key] == base.data.metrics[key]
        assert rec.data.metrics["n_failed"] == 0


RAGAS_CSV = (
    "user_input,response,retrieved_contexts,reference,reference_contexts\n"
    '"Who approves access requests?","Alice approves access requests.",'
    "\"['Access requests are approved by Alice.', 'Badges are blue.']\","
    '"Alice.","[\'Access requests are approved by Alice.\']"\n'
    '"How long is a badge valid?",,"[""Badges are valid for one year.""]",'
    '"One year.","[""Badges are valid for one year.""]"\n'  # no response; JSON-encoded lists
    '"Who signs leave?","Bob signs leave forms today.","[\'Bob signs leave forms.\']",'
    '"Bob.",[]\n'
)

DEEPEVAL_JSON = [
    {
        "input": "Who approves access requests?",
        "actual_output": "Alice approves access requests.",
        "expected_output": "Alice.",
        "retrieval_context": ["Access requests are approved by Alice.", "Badges are blue."],
        "context": ["Access requests are approved by Alice."],
        "name": None,
        "comments": None,
        "additional_metadata": {"team": "it"},
    },
    {
        "input": "How long is a badge valid?",
        "actual_output": None,
        "expected_output": "One year.",
        "retrieval_context": ["Badges are valid for one year."],
        "context": None,
    },
    {
        "input": "Who signs leave?",
        "actual_output": "Bob signs leave forms today.",
        "expected_output": "Bob.",
        "retrieval_context": ["Bob signs leave forms."],
    },
]


@pytest.mark.parametrize("fmt", ["ragas", "deepeval"])
def test_hand_written_peer_files_load_and_score(
    fmt: str, compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    if fmt == "ragas":
        path = tmp_path / "answers.csv"
        path.write_text(RAGAS_CSV, encoding="utf-8")
        ids = ["q0002", "q0003", "q0004"]  # by file line (the header is line 1)
    else:
        path = tmp_path / "goldens.json"
        path.write_text(json.dumps(DEEPEVAL_JSON), encoding="utf-8")
        ids = ["q0001", "q0002", "q0003"]  # by item
    loaded = {"ragas": RagasDataset, "deepeval": DeepEvalDataset}[fmt](str(path)).load()
    assert [s.id for s in loaded.samples] == ids
    first, missing, third = loaded.samples
    assert first.recorded == RecordedAnswer(
        response="Alice approves access requests.",
        retrieved_contexts=["Access requests are approved by Alice.", "Badges are blue."],
    )
    assert first.reference_contexts == ["Access requests are approved by Alice."]
    assert missing.recorded is not None and missing.recorded.response is None
    assert third.reference == "Bob." and third.reference_contexts == []

    run, rows = _run(
        compose_cfg, tmp_path, fmt, f"dataset={fmt}", f"dataset.path={path}", "target=recorded"
    )
    assert run.data.metrics["n_failed"] == 0  # a missing answer is not a target failure
    for metric in (
        "faithfulness",
        "answer_relevancy",
        "keyword_faithfulness",
        "answer_judge.accuracy",
        "refusal",
    ):
        assert (
            math.isnan(rows[ids[1]][metric]) and rows[ids[1]][f"{metric}.reason"] == "no_response"
        ), metric
        assert not math.isnan(rows[ids[0]][metric]), metric
    # The contexts of the row without an answer are still judged (context_recall needs none).
    assert rows[ids[1]]["context_recall.reason"] != "no_response"
    # keyword_faithfulness by hand: W(response) = {alice, approves, access, requests}, of which
    # access, requests, alice are in the contexts → 3/4;
    # {bob, signs, leave, forms, today}: all but "today" → 4/5.
    assert rows[ids[0]]["keyword_faithfulness"] == pytest.approx(3 / 4)
    assert rows[ids[2]]["keyword_faithfulness"] == pytest.approx(4 / 5)
    assert run.data.metrics["keyword_faithfulness_n_valid"] == 2


def test_recorded_target_matches_doc_ids_by_text_when_absent() -> None:
    corpus = [
        Document("leave", "Bob signs leave forms. Leave is 25 days."),
        Document("access", "Access requests are approved by Alice."),
    ]
    samples = [
        Sample(
            id="a",
            user_input="q",
            recorded=RecordedAnswer(
                response="x",
                retrieved_contexts=[
                    "Access requests are approved by Alice.",
                    "Nothing like any document here",
                    "Bob signs leave forms.",
                ],
            ),
        ),
        Sample(
            id="b",
            user_input="q",
            recorded=RecordedAnswer(
                response="y",
                retrieved_contexts=["Bob signs leave forms."],
                retrieved_doc_ids=["mine"],
                retrieved_ids=["mine#0"],
                latency_ms=12.5,
            ),
        ),
        Sample(id="c", user_input="q"),
    ]
    target = RecordedTarget()
    target.prepare(EvalDataset("t", samples, corpus))
    a, b, c = (target.answer(s) for s in samples)
    assert a.retrieved_doc_ids == ["access", "unmatched:2", "leave"]
    assert (a.response, a.no_response, a.error) == ("x", False, None)
    assert (b.retrieved_doc_ids, b.retrieved_ids, b.latency_ms) == (["mine"], ["mine#0"], 12.5)
    assert (c.no_response, c.retrieved_contexts, c.retrieved_doc_ids) == (True, [], [])
    no_corpus = RecordedTarget()
    no_corpus.prepare(EvalDataset("t", samples, []))
    assert no_corpus.answer(samples[0]).retrieved_doc_ids is None  # doc metrics: no_doc_ids
    assert math.isnan(
        KeywordFaithfulness().evaluate([samples[2]], [c])[0]["keyword_faithfulness"].value
    )


def test_peer_file_problems_are_listed_by_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "user_input,response,retrieved_contexts\n"
        '"Q1","A","[\'ok\']"\n'
        '"Q2","A",not a list\n'
        ',"A",[]\n',
        encoding="utf-8",
    )
    with pytest.raises(DatasetError) as err:
        RagasDataset(str(bad)).load()
    text = str(err.value)
    assert f"{bad}:3:retrieved_contexts" in text and f"{bad}:4:user_input" in text
    de = tmp_path / "de.json"
    de.write_text(json.dumps([{"input": "Q", "actual_output": 5}]), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"de.json:1:actual_output/retrieval_context"):
        DeepEvalDataset(str(de)).load()


def test_ragas_jsonl_keeps_unknown_keys_and_reads_integer_context_ids(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps(
            {
                "user_input": "q",
                "response": "a",
                "retrieved_contexts": ["c"],
                "retrieved_context_ids": [3],
                "reference": None,
                "rubrics": {"x": "y"},
            }
        )
        + "\n",
        encoding="utf-8",
    )
    (sample,) = RagasDataset(str(path)).load().samples
    assert (sample.id, sample.reference, sample.metadata) == ("q0001", "", {"rubrics": {"x": "y"}})
    assert sample.recorded == RecordedAnswer(
        response="a", retrieved_contexts=["c"], retrieved_ids=["3"]
    )


def test_structured_citations_round_trip_every_format_and_reach_the_response(
    tmp_path: Path,
) -> None:
    cites = [
        RecordedCitation(statement="A.", chunk_id="d#0"),
        RecordedCitation(statement="B", doc_id="d", text="quoted"),
    ]
    samples = [
        Sample(
            id="q1", user_input="Q?", recorded=RecordedAnswer(response="A. B.", citations=cites)
        ),
        Sample(id="q2", user_input="R?", recorded=RecordedAnswer(response="C.", citations=[])),
        Sample(id="q3", user_input="S?", recorded=RecordedAnswer(response="D [1].")),
    ]
    for name, write, load in [
        ("o.jsonl", write_jsonl, JsonlDataset),
        ("r.jsonl", write_ragas, RagasDataset),
        ("r.csv", write_ragas, RagasDataset),
        ("d.json", write_deepeval, DeepEvalDataset),
    ]:
        assert load(str(write(samples, tmp_path / name))).load().samples == samples, name
    target = RecordedTarget()
    assert target.answer(samples[0]).citations == [
        Citation("A.", chunk_id="d#0"),
        Citation("B", doc_id="d", text="quoted"),
    ]
    resp = target.answer(samples[0])  # a checkpoint line (asdict, JSON) reads back equal
    assert RagResponse(**json.loads(json.dumps(dataclasses.asdict(resp)))) == resp
    assert target.answer(samples[1]).citations == []  # cites nothing
    assert target.answer(samples[2]).citations is None  # inline markers, if any


def test_bad_citations_are_named_by_file_line_and_field(tmp_path: Path) -> None:
    rows = [
        {"id": "q1", "user_input": "Q", "recorded": {"citations": [{"statement": "A"}]}},
        {
            "id": "q2",
            "user_input": "Q",
            "recorded": {
                "citations": [{"statement": "A", "text": "t"}, {"statement": "A", "chunk_id": 3}]
            },
        },
    ]
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        JsonlDataset(str(data)).load()
    text = str(err.value)
    assert f"{data}:1:recorded.citations.0: " in text and "needs a source" in text
    assert f"{data}:2:recorded.citations.1.chunk_id: " in text
