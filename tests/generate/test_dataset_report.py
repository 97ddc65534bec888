"""rag-exp dataset report: numbers checked against values computed by hand on a 5-question set."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rag_experiments.chunking.fixed import FixedChunker
from rag_experiments.generate.report import build_report, evenness
from rag_experiments.llm.fake import FakeChat
from rag_experiments.records import Document, Sample

DOC_A = "Alpha policy. " + "Badges must be worn at all times inside the building. " * 1
DOC_B = "Beta guide. Backups run every night at two and are kept for thirty five days."
DOC_C = "Gamma notes. Nothing here is asked about by any question in the set."


def _samples() -> list[Sample]:
    return [
        Sample(
            id="q1",
            user_input="Must badges be worn inside the building?",
            reference="Yes, at all times.",
            reference_doc_ids=["a"],
            reference_contexts=["Badges must be worn at all times inside the building."],
            question_type="compliance",
        ),
        Sample(
            id="q2",
            user_input="Must badges be worn inside the building at night?",
            reference="Yes.",
            reference_doc_ids=["a"],
            reference_contexts=["Badges must be worn at all times inside the building."],
            question_type="compliance",
        ),
        Sample(
            id="q3",
            user_input="How long are nightly backups kept?",
            reference="Thirty five days.",
            reference_doc_ids=[],
            reference_contexts=[
                "Backups run every night at two and are kept for thirty five days."
            ],
            question_type="timeline_sla",
        ),
        Sample(
            id="q4",
            user_input="Who pays for the staff party?",
            answerable=False,
            question_type="compliance",
        ),
        Sample(
            id="q5",
            user_input="When do backups run?",
            reference="At two.",
            reference_doc_ids=["b"],
            reference_contexts=[],
            question_type="procedural",
        ),
    ]


def _docs() -> list[Document]:
    return [Document("a", DOC_A), Document("b", DOC_B), Document("c", DOC_C)]


def test_report_numbers_by_hand():
    report = build_report(
        _samples(), "five.jsonl", documents=_docs(), chunker=FixedChunker(size=1000, overlap=0)
    )
    d = report.to_dict()
    # types: compliance 3, timeline_sla 1, procedural 1 of 5
    assert d["type_shares"] == {"compliance": 0.6, "timeline_sla": 0.2, "procedural": 0.2}
    h = -(0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2))
    assert d["type_evenness"] == pytest.approx(h / math.log(3))
    assert d["answerable_share"] == 0.8
    # words per question: 7, 9, 6, 6, 4 → sorted 4 6 6 7 9 (linear percentiles hit elements)
    assert report.question_words == [7, 9, 6, 6, 4]
    assert d["question_length_words"] == {"min": 4, "p25": 6, "median": 6, "p75": 7, "max": 9}
    # q1 tokens {must, badges, be, worn, inside, the, building} (7) ⊂ q2's 9 → 7/9 = 0.778 < 0.8
    assert d["near_duplicates"] == []
    # one chunk per document (size 1000): a covered by q1/q2 (named and matched), b by q3's
    # context (no doc id named → every chunk compared) and by q5's doc id, c by nothing
    cov = d["coverage"]
    assert (cov["n_documents"], cov["n_documents_covered"]) == (3, 2)
    assert (cov["n_chunks"], cov["n_chunks_covered"]) == (3, 2)
    assert cov["uncovered_documents"] == ["c"] and cov["chunk_share"] == pytest.approx(2 / 3)
    assert report.stats.n_samples == 5 and report.stats.n_unanswerable == 1


def test_near_duplicate_threshold_and_chunk_coverage_with_small_chunks():
    samples = _samples()
    report = build_report(
        samples, documents=_docs(), chunker=FixedChunker(size=40, overlap=0), dup_threshold=0.75
    )
    assert [(a, b) for a, b, _ in report.near_duplicates] == [("q1", "q2")]
    assert report.near_duplicates[0][2] == pytest.approx(7 / 9)
    cov = report.coverage
    # 40-character windows: DOC_A has 68 characters → 2 chunks; DOC_B 77 → 2; DOC_C 68 → 2.
    # A window that is a verbatim piece of a reference context covers it: a#0 holds
    # "Alpha policy." which is in no reference → not covered; a#1 ("… inside the building.")
    # is a piece of q1's context → covered. b#0 starts "Beta guide." (not in q3's context),
    # b#1 is a piece of it → covered.
    assert cov.n_chunks == 6
    texts = {c.id: c.text for d in _docs() for c in FixedChunker(size=40, overlap=0).split(d)}
    assert set(texts) == {"a#0", "a#1", "b#0", "b#1", "c#0", "c#1"}
    assert cov.n_chunks_covered == 2


def test_groundedness_with_a_scripted_judge():
    judge = FakeChat(
        {
            "FaithfulnessOutput": {
                "claims": [{"claim": "x", "context": 1}, {"claim": "y", "context": 0}]
            }
        }
    )
    g = build_report(_samples(), judge=judge).groundedness
    # judged: answerable with a reference and reference contexts → q1, q2, q3 (q5 has none)
    assert (g.n_judged, g.n_valid, g.judge_calls) == (3, 3, 3)
    assert g.mean == 0.5 and g.share_grounded == 0.0
    assert g.not_grounded == ["q1", "q2", "q3"] and g.judge["model"] == "fake-chat"


def test_evenness_edges():
    assert evenness([5]) == 1.0 and evenness([2, 2]) == pytest.approx(1.0)
    assert evenness([]) == 1.0


@pytest.mark.slow
def test_cli_writes_markdown_json_plots_and_logs(tmp_path):
    data = tmp_path / "five.jsonl"
    data.write_text(
        "".join(json.dumps(s.model_dump(mode="json")) + "\n" for s in _samples()), encoding="utf-8"
    )
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for doc in _docs():
        (corpus / f"{doc.id}.txt").write_text(doc.text, encoding="utf-8")
    out = tmp_path / "rep"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_experiments",
            "dataset",
            "report",
            str(data),
            "--corpus",
            str(corpus),
            "--judge",
            "fake",
            "--json",
            "--out",
            str(out),
            "--log",
            "chunker=fixed",
            "chunker.size=1000",
            "chunker.overlap=0",
            f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"paths.cache_dir={tmp_path}/c",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    d = json.loads(done.stdout)
    assert d["coverage"]["n_documents_covered"] == 2 and d["answerable_share"] == 0.8
    # the fake judge's default script: 1 of 2 claims supported
    assert d["groundedness"]["mean"] == 0.5
    assert {p.name for p in out.iterdir()} == {
        "report.md",
        "report.json",
        "question_length.png",
        "question_types.png",
        "groundedness.png",
    }
    assert (out / "question_length.png").read_bytes()[:4] == b"\x89PNG"
    client = MlflowClient(f"sqlite:///{tmp_path}/m.db")
    (run,) = client.search_runs([client.get_experiment_by_name("datasets").experiment_id])
    assert run.data.metrics["answerable_share"] == 0.8
    assert run.data.metrics["coverage_documents"] == pytest.approx(2 / 3)
    assert {a.path for a in client.list_artifacts(run.info.run_id, "report")} >= {
        "report/report.md",
        "report/groundedness.png",
    }


@pytest.mark.slow
def test_sample_dataset_report_runs(tmp_path):
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_experiments",
            "dataset",
            "report",
            str(root / "datasets/sample/eval.jsonl"),
            "--corpus",
            str(root / "datasets/sample/docs"),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    rows = [json.loads(line) for line in (root / "datasets/sample/eval.jsonl").open()]
    referenced = {d for row in rows for d in row["reference_doc_ids"]}
    n_docs = sum(1 for p in (root / "datasets/sample/docs").iterdir() if p.is_file())
    answerable = sum(1 for row in rows if row["answerable"])
    assert f"documents: {len(referenced)} / {n_docs}" in done.stdout  # distractors: not covered
    assert f"{len(rows)} ({answerable} answerable" in done.stdout
