"""BM25 on real-world queries: questions with no indexable word (stop words or emoji only),
text written without spaces (CJK bigrams as Lucene's CJKAnalyzer), and what an empty ranking
scores. Corpora and questions are made here; rankings and scores checked by hand."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from rag_experiments.chunking.none import NoChunker
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError
from rag_experiments.index.bm25 import Analyzer
from rag_experiments.index.bm25_params import Bm25Params
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import Chunk, Document, RagResponse, Sample
from rag_experiments.retrieval.base import Hit, RetrievalResult
from rag_experiments.retrieval.bm25 import Bm25Retriever
from rag_experiments.retrieval.hybrid import HybridRetriever
from rag_experiments.targets.baseline import BaselineTarget
from rag_experiments.text.cjk import bigrams, spaced_bigrams

EN_DOCS = {"e1": "the cat sat on the mat", "e2": "birds fly south in winter"}
ZH_DOCS = {
    "z1": "北京是中国的首都",  # 北京 京是 是中 中国 国的 的首 首都 (7 bigrams)
    "z2": "上海是中国最大的城市",  # 上海 海是 是中 中国 国最 最大 大的 的城 城市 (9)
    "z3": "东京是日本的首都",  # 东京 京是 是日 日本 本的 的首 首都 (7)
}
NO_TERMS = ["Is it to be or not to be?", "🙂🚀🎉", "?!"]


def _chunks(docs: dict[str, str]) -> list[Chunk]:
    return [Chunk(id=f"{d}#0", doc_id=d, text=t, position=0) for d, t in docs.items()]


def _bm25(tmp_path: Path, docs: dict[str, str], **kw) -> Bm25Retriever:
    retriever = Bm25Retriever(top_k=3, index_dir=str(tmp_path / "bm25"), **kw)
    retriever.prepare(_chunks(docs), "none|" + "-".join(docs))
    return retriever


# --- a question with no token after analysis ---------------------------------------------------
@pytest.mark.parametrize("question", NO_TERMS)
def test_a_question_without_indexable_words_ranks_nothing_with_a_reason(
    tmp_path: Path, question: str
) -> None:
    retriever = _bm25(tmp_path, EN_DOCS)
    assert Analyzer(retriever.params).tokens([question]) == [[]]  # stop words / emoji only
    result = retriever.retrieve(question)  # bm25s raised IndexError here
    assert (result.hits, result.contexts, result.note) == ([], [], "no_query_terms")
    assert retriever.scores(question).tolist() == [0.0, 0.0]
    assert retriever.retrieve("zebra").note == "no_matching_terms"  # a word in no chunk
    assert retriever.retrieve("cat").note is None


def _fixed_dense(hybrid: HybridRetriever, chunk_ids: list[str]) -> None:
    hits = [
        Hit(c, c.split("#")[0], c, 1.0 - i / 10, {"dense": i + 1}) for i, c in enumerate(chunk_ids)
    ]
    result = RetrievalResult.from_hits(hits, hybrid.dense.top_k)
    hybrid.dense.retrieve = lambda query: result  # type: ignore[method-assign]


@pytest.mark.parametrize("fusion", ["rrf", "convex"])
def test_hybrid_falls_back_to_the_dense_ranking_when_bm25_has_no_term(
    tmp_path: Path, fusion: str
) -> None:
    hybrid = HybridRetriever(top_k=2, fusion=fusion, bm25={"index_dir": str(tmp_path)})
    hybrid.bm25.prepare(_chunks(EN_DOCS), "none|en")
    _fixed_dense(hybrid, ["e2#0", "e1#0"])
    result = hybrid.retrieve("Is it to be or not to be?")
    assert result.ranked_chunk_ids == ["e2#0", "e1#0"]  # the dense order, unchanged
    assert result.note == "bm25:no_query_terms"
    assert [h.ranks for h in result.hits] == [{"dense": 1}, {"dense": 2}]
    both = hybrid.retrieve("cat")
    assert both.note is None
    assert {h.chunk_id: h.ranks for h in both.hits}["e1#0"] == {"dense": 2, "bm25": 1}


def test_the_baseline_answers_such_a_question_and_the_row_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    retriever = Bm25Retriever(top_k=5, index_dir=str(tmp_path))
    target = BaselineTarget(NoChunker(), None, retriever, None, None)
    docs = [Document(id=d, text=t) for d, t in EN_DOCS.items()]
    with caplog.at_level(logging.WARNING, logger="rag_experiments.targets.baseline"):
        target.prepare(EvalDataset(name="toy", samples=[], corpus=docs))
    # top_k 5 > 2 chunks: BM25 hands a question at most 2 of them, not "all 2".
    (notice,) = [r.getMessage() for r in caplog.records]
    assert "every question gets at most 2 of them as context" in notice
    assert "retrieval_note" in notice
    response = target.answer(Sample(id="q", user_input="🙂🚀🎉"))
    assert response.error is None and response.retrieved_contexts == []
    assert response.metadata["retrieval_note"] == "no_query_terms"


# --- what an empty ranking scores -------------------------------------------------------------
def test_an_empty_ranking_scores_zero_flagged_not_nan() -> None:
    """Hit/MRR/nDCG/P/R/MAP of an empty ranking with relevant docs: numerator 0 over a positive
    denominator (trec_eval -c: 0 for every measure), flagged with the retriever's note."""
    sample = Sample(id="q", user_input="?", reference_doc_ids=["d1"])
    noted = RagResponse(retrieved_doc_ids=[], metadata={"retrieval_note": "no_query_terms"})
    plain = RagResponse(retrieved_doc_ids=[])
    found = RagResponse(retrieved_doc_ids=["d2", "d1"])
    metrics = RetrievalMetrics(cutoffs=(1, 5), chunk_level=False)
    rows = metrics.evaluate([sample] * 3, [noted, plain, found])
    names = [s.name for s in metrics.specs()]
    assert len(names) == 12
    for name in names:
        assert (rows[0][name].value, rows[0][name].reason) == (0.0, "no_query_terms"), name
        assert (rows[1][name].value, rows[1][name].reason) == (0.0, "empty_ranking"), name
        assert rows[2][name].reason is None
    # the found row by hand: relevant at rank 2
    assert rows[2]["Hit@5"].value == 1.0 and rows[2]["MRR@5"].value == 0.5
    assert rows[2]["nDCG@5"].value == pytest.approx(1 / math.log2(3))
    assert rows[2]["Hit@1"].value == 0.0


# --- text written without spaces --------------------------------------------------------------
def test_cjk_runs_become_lucene_bigrams() -> None:
    assert bigrams("检索模型") == ["检索", "索模", "模型"]
    assert bigrams("猫") == ["猫"]  # isolated: a unigram, as CJKBigramFilter
    assert spaced_bigrams("东京タワー") == " 东京 京タ タワ ワー "  # Han + Katakana: one run
    analyzer = Analyzer(Bm25Params())
    # a CJK run ends at Latin letters or punctuation; the Latin token is analysed as before
    assert analyzer.tokens(["BM25检索模型。Running 猫 한국어"]) == [
        ["bm25", "检索", "索模", "模型", "run", "猫", "한국", "국어"]
    ]
    # cjk = Lucene's CJKAnalyzer: no stemming; en = today's: a CJK sentence is one token
    assert Analyzer(Bm25Params(language="cjk")).tokens(["Running 检索"]) == [["running", "检索"]]
    assert Analyzer(Bm25Params(language="en")).tokens(["检索模型"]) == [["检索模型"]]
    with pytest.raises(ConfigError, match="retriever.language must be one of auto, en, cjk"):
        Bm25Retriever(language="zh")


def test_english_text_is_analysed_exactly_as_before() -> None:
    texts = ["The cats are running", "generalization of a B cell", "Müller's naïve café, 3.5%"]
    auto = Analyzer(Bm25Params()).tokens(texts)
    assert auto == Analyzer(Bm25Params(language="en")).tokens(texts)
    assert auto[0] == ["cat", "run"]


def test_a_chinese_question_ranks_chinese_documents_by_hand(tmp_path: Path) -> None:
    retriever = _bm25(tmp_path, ZH_DOCS, k1=1.2, b=0.75)
    question = "中国的首都是哪里？"  # 中国 国的 的首 首都 都是 是哪 哪里
    # Terms shared: z1 中国 国的 的首 首都; z2 中国; z3 的首 首都. N = 3, dl = 7, 9, 7,
    # avgdl = 23/3; df(中国) = df(的首) = df(首都) = 2, df(国的) = 1; every tf = 1.
    idf2, idf1 = math.log(1 + 1.5 / 2.5), math.log(1 + 2.5 / 1.5)

    def tf_part(dl: int) -> float:
        return 1 / (1 + 1.2 * (0.25 + 0.75 * dl / (23 / 3)))

    z1 = (3 * idf2 + idf1) * tf_part(7)
    z2 = idf2 * tf_part(9)
    z3 = 2 * idf2 * tf_part(7)
    assert z1 > z3 > z2
    result = retriever.retrieve(question)
    assert result.ranked_chunk_ids == ["z1#0", "z3#0", "z2#0"]
    assert result.scores == pytest.approx([z1, z3, z2], rel=1e-6)
    assert result.contexts[0] == "北京是中国的首都"
    # the same corpus analysed as space-separated text finds nothing (the bug of issue 42)
    spaces = _bm25(tmp_path, ZH_DOCS, k1=1.2, b=0.75, language="en")
    assert spaces.retrieve(question).hits == []
