"""BM25, hybrid fusion and the reranker wiring of the baseline, on tiny inline corpora: scores
against values computed by hand, RRF and the convex sum against their formulas."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import fields
from inspect import signature
from pathlib import Path

import pytest
from omegaconf import open_dict

from rag_experiments.build import build
from rag_experiments.chunking.none import NoChunker
from rag_experiments.config.schema import Bm25Conf
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError, PreflightError, RagExpError
from rag_experiments.index.bm25 import Analyzer, Bm25Params
from rag_experiments.index.bm25_params import INDEX_TITLE
from rag_experiments.job import preflight
from rag_experiments.records import Chunk, Document, Sample
from rag_experiments.retrieval.base import Hit, RerankerBase, RetrievalResult, rerank_result
from rag_experiments.retrieval.bm25 import Bm25Retriever
from rag_experiments.retrieval.hybrid import HybridRetriever, convex, rrf
from rag_experiments.targets.baseline import BaselineTarget
from rag_experiments.tracking.trace_shape import _documents
from tests.run_helpers import loaded_by

DOCS = {
    "d1": "the cat sat on the mat",
    "d2": "the dog chased the cat and the cat ran",
    "d3": "birds fly",
}


def chunks() -> list[Chunk]:
    return [Chunk(id=f"{d}#0", doc_id=d, text=t, position=0) for d, t in DOCS.items()]


def plain_bm25(tmp_path: Path, **kw) -> Bm25Retriever:
    """Lucene BM25 with k1 1.2, b 0.75 and no stemming or stop words (so tokens = words)."""
    args = dict(top_k=2, depth=3, k1=1.2, b=0.75, stemmer=None, stopwords=None)
    retriever = Bm25Retriever(**{**args, **kw}, index_dir=str(tmp_path / "bm25"))
    retriever.prepare(chunks(), "none|toy")
    return retriever


def test_lucene_bm25_scores_equal_the_formula_by_hand(tmp_path: Path) -> None:
    retriever = plain_bm25(tmp_path)
    # Lucene BM25 (bm25s "lucene"): idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
    # tf part = tf / (tf + k1 (1 - b + b dl / avgdl)). N = 3; dl = 6, 9, 2; avgdl = 17/3.
    idf_cat = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))  # ln 1.6
    idf_dog = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))  # ln 8/3
    norm_d1 = 1.2 * (0.25 + 0.75 * 6 / (17 / 3))  # 21.3/17
    norm_d2 = 1.2 * (0.25 + 0.75 * 9 / (17 / 3))  # 29.4/17
    d1 = idf_cat * 1 / (1 + norm_d1)
    d2 = idf_cat * 2 / (2 + norm_d2) + idf_dog * 1 / (1 + norm_d2)
    assert d1 == pytest.approx(math.log(1.6) * 17 / 38.3)  # the same by fractions
    scores = retriever.scores("cat dog")
    assert scores.tolist() == pytest.approx([d1, d2, 0.0], rel=1e-6)
    result = retriever.retrieve("cat dog")
    # d3 shares no term: not returned; d2 first.
    assert result.ranked_chunk_ids == ["d2#0", "d1#0"]
    assert result.scores == pytest.approx([d2, d1], rel=1e-6)
    assert [h.ranks for h in result.hits] == [{"bm25": 1}, {"bm25": 2}]
    assert result.contexts == [DOCS["d2"], DOCS["d1"]]


def test_default_analysis_is_porter_and_lucene_stop_words() -> None:
    analyzer = Analyzer(Bm25Params())
    # "the", "are", "of" are Lucene stop words; Porter: cats → cat, running → run,
    # generalization → gener (Porter 1980 step 2/3/4), a one-letter token is kept.
    assert analyzer.tokens(["The cats are running", "generalization of a B cell"]) == [
        ["cat", "run"],
        ["gener", "b", "cell"],
    ]
    with pytest.raises(RagExpError, match="not a PyStemmer algorithm"):
        Analyzer(Bm25Params(stemmer="klingon"))


def test_bm25_index_is_built_once_and_rebuilt_when_its_key_changes(tmp_path: Path) -> None:
    first = plain_bm25(tmp_path)
    assert first.store.builds == 1
    again = plain_bm25(tmp_path)
    assert again.store.builds == 0  # reused from the folder
    assert again.scores("cat").tolist() == first.scores("cat").tolist()
    other = plain_bm25(tmp_path, k1=2.0)
    assert other.store.builds == 1  # parameters are part of the key
    folders = sorted(p.name for p in (tmp_path / "bm25").iterdir() if p.is_dir())
    assert len(folders) == 2 and not any(f.startswith(".") for f in folders)  # no temp left
    # A damaged index (meta gone: a build killed before the rename leaves none) is rebuilt.
    for folder in (tmp_path / "bm25").iterdir():
        if folder.is_dir():
            (folder / "meta.json").unlink()
    assert plain_bm25(tmp_path).store.builds == 1


def test_bm25_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="method"):
        Bm25Retriever(method="bm26")
    with pytest.raises(ConfigError, match="b in"):
        Bm25Retriever(b=1.5)
    with pytest.raises(RagExpError, match="not prepared"):
        Bm25Retriever().retrieve("cat")


def test_hybrid_settings_name_the_offending_key(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match=r"^retriever.alpha must be in \[0, 1\], got 2.0.$"):
        HybridRetriever(alpha=2.0)
    with pytest.raises(ConfigError, match=r"^retriever.k must be > 0, got 0.$"):
        HybridRetriever(k=0)
    with caplog.at_level(logging.WARNING, logger="rag_experiments.retrieval.hybrid"):
        HybridRetriever(fusion="convex", norm="zscore", alpha=0.3)  # used: no warning
        assert caplog.records == []
        HybridRetriever(fusion="rrf", norm="zscore")
    (record,) = caplog.records
    assert "retriever.norm=zscore apply to retriever.fusion=convex only" in record.getMessage()


def hit(cid: str, score: float) -> Hit:
    return Hit(cid, cid, f"text {cid}", score)


def test_rrf_equals_the_formula() -> None:
    dense = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.1)]
    bm25 = [hit("c", 10.0), hit("a", 4.0), hit("d", 2.0)]
    fused = rrf({"dense": dense, "bm25": bm25}, k=60)
    expected = {
        "a": 1 / (60 + 1) + 1 / (60 + 2),
        "b": 1 / (60 + 2),
        "c": 1 / (60 + 3) + 1 / (60 + 1),
        "d": 1 / (60 + 3),
    }
    assert [h.chunk_id for h in fused] == ["a", "c", "b", "d"]
    assert [h.score for h in fused] == pytest.approx([expected[h.chunk_id] for h in fused])
    assert [h.ranks for h in fused] == [
        {"dense": 1, "bm25": 2},
        {"dense": 3, "bm25": 1},
        {"dense": 2},
        {"bm25": 3},
    ]


def test_convex_fusion_of_normalised_scores() -> None:
    dense = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.1)]
    bm25 = [hit("c", 10.0), hit("a", 4.0), hit("d", 2.0)]
    fused = convex({"dense": dense, "bm25": bm25}, {"dense": 0.5, "bm25": 0.5}, "minmax")
    # min-max: dense a 1, b 0.5, c 0; bm25 c 1, a 0.25, d 0; a missing source gives its min (0).
    want = {"a": 0.5 * 1 + 0.5 * 0.25, "b": 0.5 * 0.5, "c": 0.5 * 0 + 0.5 * 1, "d": 0.0}
    assert [h.chunk_id for h in fused] == ["a", "c", "b", "d"]
    assert [h.score for h in fused] == pytest.approx([want[h.chunk_id] for h in fused])
    z = convex({"dense": dense, "bm25": bm25}, {"dense": 1.0, "bm25": 0.0}, "zscore")
    # alpha 1: the dense order; z-scores of 0.9, 0.5, 0.1 are ±sqrt(3/2), 0; d gets dense's min.
    assert [h.chunk_id for h in z] == ["a", "b", "c", "d"]
    assert z[0].score == pytest.approx(math.sqrt(1.5))
    assert z[3].score == pytest.approx(-math.sqrt(1.5))


class WordOverlap(RerankerBase):
    """Scores a document by how many distinct query words it contains."""

    def __init__(self, candidates: int = 3, fail: bool = False) -> None:
        self.candidates = candidates
        self.fail = fail
        self.checked = 0

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        words = set(query.split())
        return [float(len(words & set(d.split()))) for d in documents]

    def check(self) -> None:
        self.checked += 1
        if self.fail:
            raise RagExpError("rerank server http://127.0.0.1:9 refused the connection")


def test_rerank_reorders_the_candidates_and_keeps_the_rest() -> None:
    hits = [hit(c, s) for c, s in [("a", 4), ("b", 3), ("c", 2), ("d", 1), ("e", 0.5)]]
    texts = {"a": "x", "b": "q w", "c": "q", "d": "q w e", "e": "q w e r"}
    hits = [
        Hit(h.chunk_id, h.doc_id, texts[h.chunk_id], h.score, {"bm25": i + 1})
        for i, h in enumerate(hits)
    ]
    result = RetrievalResult.from_hits(hits, top_k=2)
    out = rerank_result(result, WordOverlap(candidates=3), "q w e")
    # Candidates a, b, c score 0, 2, 1 → b, c, a; d and e (beyond 3) keep their order after.
    assert out.ranked_chunk_ids == ["b", "c", "a", "d", "e"]
    assert out.contexts == ["q w", "q"]
    assert [(h.retriever_rank, h.rerank_score) for h in out.hits[:3]] == [
        (2, 2.0),
        (3, 1.0),
        (1, 0.0),
    ]
    assert out.hits[3].rerank_score is None
    assert out.provenance()[0] == {
        "rank.bm25": 2,
        "score": 3.0,
        "rerank_score": 2.0,
        "retriever_rank": 2,
    }


def test_baseline_applies_the_reranker_and_records_sources(tmp_path: Path) -> None:
    retriever = Bm25Retriever(
        top_k=1, depth=3, stemmer=None, stopwords=None, index_dir=str(tmp_path)
    )
    docs = [Document(id=d, text=t) for d, t in DOCS.items()]
    target = BaselineTarget(NoChunker(), None, retriever, None, None, reranker=WordOverlap(2))
    target.prepare(EvalDataset(name="toy", samples=[], corpus=docs))
    response = target.answer(Sample(id="q", user_input="cat mat"))
    # BM25: d1 (cat, mat) before d2 (cat twice, longer); overlap keeps d1 first (2 words vs 1).
    assert response.retrieved_ids == ["d1#0"]
    (source,) = response.retrieved_sources
    assert (
        source["rank.bm25"] == 1 and source["retriever_rank"] == 1 and source["rerank_score"] == 2.0
    )
    (doc,) = _documents(response)
    assert doc["metadata"]["rank.bm25"] == 1 and doc["metadata"]["rerank_score"] == 2.0
    response = target.answer(Sample(id="q2", user_input="dog chased cat"))
    assert response.retrieved_ids == ["d2#0"]
    assert "embedder" not in target.describe() and target.describe()["retriever"] == "bm25"


@pytest.mark.slow
def test_composition_builds_each_retriever_and_checks_the_reranker(compose_cfg) -> None:
    common = ("embedder=hash", "metrics=retrieval", "dataset=sample")
    dense = compose_cfg(*common, "retriever=default")
    assert dense.retriever == compose_cfg(*common, "retriever=dense").retriever  # the alias
    exp = build(compose_cfg(*common, "retriever=bm25"))
    assert isinstance(exp.target.retriever, Bm25Retriever) and exp.target.embedder is None
    assert "embedder" not in exp.checks  # BM25 needs no embedder
    assert exp.target.retriever.params == Bm25Params(0.9, 0.4, "lucene", 0.5, "porter", "en")
    cfg = compose_cfg(
        *common, "retriever=hybrid", "retriever.fusion=convex", "retriever.bm25.k1=1.2"
    )
    with open_dict(cfg):
        cfg.reranker = {"_target_": f"{__name__}.WordOverlap", "candidates": 150, "fail": True}
    exp = build(cfg)
    hybrid = exp.target.retriever
    assert isinstance(hybrid, HybridRetriever) and hybrid.fusion == "convex"
    assert hybrid.bm25.params.k1 == 1.2 and exp.target.embedder is not None
    assert hybrid.depth == 150  # deeper than the metrics' 100: the reranker's candidates
    assert exp.checks["reranker"] is exp.target.reranker
    with pytest.raises(PreflightError, match="reranker cannot be used"):
        preflight(exp.checks)


class LeavesOut(RerankerBase):
    """A server under ``top_n``: scores only the documents holding the word ``keep`` (by their
    word count), the others ``-inf`` (left out)."""

    def __init__(self, candidates: int = 4) -> None:
        self.candidates = candidates

    def rerank(self, query: str, documents: list[str]) -> list[float]:
        return [float(len(d.split())) if "keep" in d else -math.inf for d in documents]


def test_documents_left_out_by_the_reranker_go_last_and_record_null_not_infinity() -> None:
    texts = ["a", "keep b", "c", "keep d e"]  # scored: 2 (2nd), 3 (4th); left out: 1st, 3rd
    hits = [Hit(f"c{i}", f"d{i}", t, 4.0 - i, {"bm25": i + 1}) for i, t in enumerate(texts)]
    out = rerank_result(RetrievalResult.from_hits(hits, top_k=4), LeavesOut(), "q")
    # scored best first (3 > 2), then the left-out ones in retriever order (1st, 3rd)
    assert out.ranked_chunk_ids == ["c3", "c1", "c0", "c2"]
    assert [(h.retriever_rank, h.rerank_score) for h in out.hits] == [
        (4, 3.0),
        (2, 2.0),
        (1, None),
        (3, None),
    ]
    rows = out.provenance()  # the top_k (4) contexts, as the trace and the table get them
    assert rows[2] == {"rank.bm25": 1, "score": 4.0, "rerank_score": None, "retriever_rank": 1}
    text = json.dumps(rows, allow_nan=False)  # raises on -inf: strict JSON holds no Infinity
    assert "Infinity" not in text and text.count('"rerank_score": null') == 2


def test_hybrid_sources_rank_at_least_as_deep_as_the_fused_ranking(tmp_path: Path) -> None:
    deep = HybridRetriever(top_k=2, depth=150, dense_depth=100, bm25_depth=40)
    assert (deep.dense.ranking_depth, deep.bm25.ranking_depth) == (150, 150)  # max(source, 150)
    shallow = HybridRetriever(top_k=2, depth=30, dense_depth=100, bm25_depth=40)
    assert (shallow.dense.ranking_depth, shallow.bm25.ranking_depth) == (100, 40)  # kept
    cut = HybridRetriever(
        top_k=1, depth=3, bm25_depth=1, bm25={"stemmer": None, "index_dir": str(tmp_path)}
    )
    cut.bm25.prepare(chunks(), "none|toy")
    # bm25_depth 1 would hand the fusion one hit; raised to the ranking depth 3: all 3 chunks
    assert len(cut.bm25.retrieve("cat birds").hits) == 3  # d1, d2 hold cat; d3 birds


@pytest.mark.slow
def test_a_set_retriever_depth_never_cuts_the_reranker_candidates(compose_cfg) -> None:
    common = ("embedder=hash", "metrics=retrieval", "dataset=sample", "retriever=bm25")
    for depth, candidates, expected in [(10, 20, 20), (30, 20, 30)]:  # max(depth, candidates)
        cfg = compose_cfg(*common, f"retriever.depth={depth}")
        with open_dict(cfg):
            cfg.reranker = {"_target_": f"{__name__}.WordOverlap", "candidates": candidates}
        retriever = build(cfg).target.retriever
        assert retriever.ranking_depth == expected


def test_bm25_defaults_come_from_one_place() -> None:
    """Pyserini's BEIR "flat" settings, by hand, in Bm25Params; the config schema and the
    retriever take each default from there (none written twice)."""
    assert Bm25Params() == Bm25Params(
        0.9, 0.4, "lucene", 0.5, "porter", "en", lower=True, language="auto"
    )
    assert INDEX_TITLE is True
    conf, taken = Bm25Conf(), signature(Bm25Retriever).parameters
    for name in [f.name for f in fields(Bm25Params) if f.name != "lower"] + ["index_title"]:
        default = INDEX_TITLE if name == "index_title" else getattr(Bm25Params, name)
        assert getattr(conf, name) == default and taken[name].default == default, name


@pytest.mark.slow
def test_the_schema_reads_the_bm25_defaults_without_loading_the_index_code() -> None:
    index_code = ["rag_experiments.index.chroma", "rag_experiments.index.bm25", "filelock"]
    assert loaded_by("import rag_experiments.config.schema", index_code) == []
