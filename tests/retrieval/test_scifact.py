"""A reduced BEIR SciFact check on real data (skipped when ../shared/real is absent).

The full run (``rag-exp run dataset=beir dataset.path=../shared/real/ir/scifact chunker=none
metrics=retrieval``) reproduces MTEB's published nDCG@10 for all-MiniLM-L6-v2; that takes
minutes, so this test runs the same pipeline on 40 test queries over a corpus of their relevant
abstracts plus 400 others, and compares it with a reference implementation written here:
sentence-transformers directly, exact cosine ranking in numpy, pytrec_eval through ir-measures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from rag_experiments.data.beir import BeirDataset
from rag_experiments.job import run_job

pytestmark = [pytest.mark.slow, pytest.mark.real_data]


def _mini_beir(src: Path, dst: Path, n_queries: int = 40, n_other: int = 400) -> None:
    full = BeirDataset(str(src), max_queries=n_queries).load()
    keep = {d for s in full.samples for d in s.reference_doc_ids}
    others = sorted((d for d in full.corpus if d.id not in keep), key=lambda d: d.id)[:n_other]
    keep |= {d.id for d in others}
    (dst / "qrels").mkdir(parents=True)
    with (dst / "corpus.jsonl").open("w") as fh:
        for d in full.corpus:
            if d.id in keep:
                fh.write(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n")
    with (dst / "queries.jsonl").open("w") as fh:
        for s in full.samples:
            fh.write(json.dumps({"_id": s.id, "text": s.user_input}) + "\n")
    with (dst / "qrels" / "test.tsv").open("w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for s in full.samples:
            for d, g in s.relevance.items():
                fh.write(f"{s.id}\t{d}\t{g}\n")


def _reference_ndcg10(folder: Path) -> float:
    import ir_measures
    from ir_measures import nDCG
    from sentence_transformers import SentenceTransformer

    from rag_experiments.embedding.sentence_transformers import bundled_model_path

    ds = BeirDataset(str(folder)).load()
    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    docs = model.encode([f"{d.title} {d.text}" for d in ds.corpus], normalize_embeddings=True)
    queries = model.encode([s.user_input for s in ds.samples], normalize_embeddings=True)
    scores = queries @ docs.T
    qrels = [ir_measures.Qrel(s.id, d, g) for s in ds.samples for d, g in s.relevance.items()]
    run = []
    for qi, s in enumerate(ds.samples):
        for di in np.argsort(-scores[qi])[:100]:
            run.append(ir_measures.ScoredDoc(s.id, ds.corpus[di].id, float(scores[qi, di])))
    provider = ir_measures.providers.registry["pytrec_eval"]
    return provider.calc_aggregate([nDCG @ 10], qrels, run)[nDCG @ 10]


def test_reduced_scifact_matches_reference_implementation(shared_real, compose_cfg, tmp_path):
    mini = tmp_path / "scifact-mini"
    _mini_beir(shared_real / "ir" / "scifact", mini)
    cfg = compose_cfg("dataset=beir", f"dataset.path={mini}", "chunker=none", "metrics=retrieval")
    run_job(cfg)
    client = MlflowClient(cfg.tracking.uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (run,) = client.search_runs([exp.experiment_id])
    ours = run.data.metrics["nDCG_at_10"]
    assert run.data.metrics["nDCG_at_10_n_valid"] == 40
    reference = _reference_ndcg10(mini)
    assert 0.5 < reference < 1.0
    assert ours == pytest.approx(reference, abs=0.005)


BM25_FLAT_SCIFACT = 0.679
"""Published BM25-flat nDCG@10 on SciFact (Kamalloo et al., "Resources for Brewing BEIR:
Reproducible Reference Models and Statistical Analyses", SIGIR 2024; Pyserini's BEIR flat
index: title + text, k1 0.9, b 0.4, Porter stemming, Lucene's English stop words)."""


def test_full_scifact_bm25_reproduces_the_published_flat_figure(shared_real, compose_cfg, capsys):
    cfg = compose_cfg(
        "experiment=scifact", f"dataset.path={shared_real / 'ir' / 'scifact'}", "retriever=bm25"
    )
    run_job(cfg)
    client = MlflowClient(cfg.tracking.uri)
    exp = client.get_experiment_by_name(cfg.tracking.experiment)
    (run,) = client.search_runs([exp.experiment_id])
    ndcg = run.data.metrics["nDCG_at_10"]
    params = {k: v for k, v in run.data.params.items() if k.startswith("retriever.")}
    with capsys.disabled():
        print(f"\nSciFact test, 300 queries, BM25 {params}: nDCG@10 = {ndcg:.5f}")
    assert run.data.metrics["nDCG_at_10_n_valid"] == 300
    assert abs(ndcg - BM25_FLAT_SCIFACT) <= 0.01
