"""Rerankers: the HTTP reranker against the fake word-overlap server (order, mapping, retries,
preflight) and the fake reranker, with scores computed by hand."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from rag_experiments.build import own_errors
from rag_experiments.common.http import nest_retry
from rag_experiments.config.schema import FakeRerankerConf, HttpRerankerConf
from rag_experiments.errors import ConfigError, PreflightError
from rag_experiments.fakes.llama_cpp_server import free_port
from rag_experiments.fakes.rerank_server import FakeRerankServer
from rag_experiments.job import preflight
from rag_experiments.llm.cache import CachedChat, ResponseCache, cache_in_use
from rag_experiments.llm.errors import LLMError, LLMHTTPError, LLMUnreachableError
from rag_experiments.llm.fake import FakeChat
from rag_experiments.llm.usage import UsageMeter
from rag_experiments.locations import CONF_DIR
from rag_experiments.retrieval.rerank import (
    CachedReranker,
    FakeReranker,
    HttpReranker,
    RerankResponseError,
    reranked_order,
    word_overlap,
)

QUERY = "Which river flows through Paris?"  # words: which, river, flows, through, paris (5)
DOCS = [
    "Berlin is the capital of Germany.",  # none of the 5: 0/5
    "The Seine is a river that flows through Paris.",  # river flows through paris: 4/5
    "Paris is the capital of France.",  # paris: 1/5
    "Which river is the longest? The Nile river.",  # which river: 2/5
]
HAND_SCORES = [0.0, 4 / 5, 1 / 5, 2 / 5]
HAND_ORDER = [1, 3, 2, 0]  # 0.8 > 0.4 > 0.2 > 0.0


def build(option: str = "http", **overrides: Any) -> Any:
    """A reranker built as the composition root builds a config node: the option's YAML over
    its schema, the flat retry keys folded into one ``retry`` (nest_retry), instantiated."""
    schema = {"http": HttpRerankerConf, "http_tei": HttpRerankerConf, "fake": FakeRerankerConf}
    raw = OmegaConf.load(CONF_DIR / "reranker" / f"{option}.yaml")
    raw.pop("defaults")
    node = OmegaConf.merge(OmegaConf.structured(schema[option]), raw, overrides)
    with own_errors():  # our errors leave as they are, not wrapped by Hydra
        return instantiate(nest_retry(OmegaConf.to_container(node, resolve=True), where="reranker"))


def test_word_overlap_by_hand():
    assert [word_overlap(QUERY, d) for d in DOCS] == pytest.approx(HAND_SCORES)
    assert word_overlap("", "anything") == 0.0


def test_http_reranker_order_equals_the_hand_computed_one():
    with FakeRerankServer() as server:
        reranker = build(url=server.url)
        assert isinstance(reranker, HttpReranker) and reranker.candidates == 20
        scores = reranker.rerank(QUERY, DOCS)
        reranker.close()
    assert scores == pytest.approx(HAND_SCORES)
    assert reranked_order(scores) == HAND_ORDER
    assert server.bodies == [{"query": QUERY, "documents": DOCS}]  # no model, no top_n sent


def test_fake_reranker_gives_the_same_order():
    reranker = build("fake", candidates=3)
    assert isinstance(reranker, FakeReranker) and reranker.candidates == 3
    assert reranker.rerank(QUERY, DOCS) == pytest.approx(HAND_SCORES)
    assert reranked_order(reranker.rerank(QUERY, DOCS)) == HAND_ORDER
    reranker.check()  # nothing to check
    assert reranker.describe() == {"reranker": "fake", "reranker.candidates": "3"}


def test_ties_keep_the_retriever_order():
    assert reranked_order([0.5, 0.9, 0.5, 0.9]) == [1, 3, 0, 2]


def test_top_n_and_model_are_sent_and_documents_left_out_go_last():
    with FakeRerankServer(model="bge") as server:
        scores = build(url=server.url, top_n=2, model="bge").rerank(QUERY, DOCS)
    assert server.bodies[0]["top_n"] == 2 and server.bodies[0]["model"] == "bge"
    assert scores[1] == pytest.approx(0.8) and scores[3] == pytest.approx(0.4)
    assert scores[0] == -math.inf and scores[2] == -math.inf
    assert reranked_order(scores) == [1, 3, 0, 2]  # left out: after, in retriever order


def test_batches_are_scored_in_order():
    with FakeRerankServer() as server:
        scores = build(url=server.url, batch_size=3).rerank(QUERY, DOCS)
    assert [len(b["documents"]) for b in server.bodies] == [3, 1]
    assert scores == pytest.approx(HAND_SCORES)


def test_tei_shaped_answers_map_through_the_http_tei_option():
    with FakeRerankServer() as server:
        reranker = build("http_tei", url=f"{server.root}/rerank")
        reranker.check()
        scores = reranker.rerank(QUERY, DOCS)
    body = server.bodies[-1]
    assert body == {"query": QUERY, "texts": DOCS}  # TEI's request: texts, no model/top_n
    assert scores == pytest.approx(HAND_SCORES)


def test_a_dead_server_is_refused_by_check_in_seconds():
    url = f"http://127.0.0.1:{free_port()}/v1/rerank"
    # retries that would take a minute if check() used them: a refused connection fails at once
    reranker = build(url=url, max_retries=5, backoff_s=10.0, backoff_max_s=30.0)
    started = time.perf_counter()
    with pytest.raises(LLMUnreachableError) as caught:
        reranker.check()
    assert time.perf_counter() - started < 5.0
    message = str(caught.value)
    assert "reranker.url" in message and url in message and "\n" not in message
    with pytest.raises(PreflightError) as wrapped:  # the job's preflight names the role
        preflight({"reranker": reranker})
    assert wrapped.value.reason == "unreachable" and "reranker" in str(wrapped.value)


def test_429_is_retried_after_retry_after():
    with FakeRerankServer(faults=["429"], retry_after_s=0.3) as server:
        reranker = build(url=server.url, backoff_s=0.01, max_retries=2)
        scores = reranker.rerank(QUERY, DOCS)
    assert server.requests == 2  # the 429, then the answer
    assert server.arrivals[1] - server.arrivals[0] >= 0.3  # Retry-After honoured
    assert scores == pytest.approx(HAND_SCORES)


def test_a_timeout_is_retried():
    with FakeRerankServer(faults=["slow"], slow_s=1.0) as server:
        reranker = build(url=server.url, timeout_s=0.3, backoff_s=0.01, max_retries=1)
        scores = reranker.rerank(QUERY, DOCS)
    assert server.requests == 2
    assert scores == pytest.approx(HAND_SCORES)


def test_retries_end_with_the_last_error():
    with FakeRerankServer(faults=["500"] * 3) as server:
        reranker = build(url=server.url, backoff_s=0.01, backoff_max_s=0.02, max_retries=2)
        with pytest.raises(LLMHTTPError) as caught:
            reranker.rerank(QUERY, DOCS)
    assert caught.value.status == 500 and server.requests == 3


def test_the_key_is_sent_and_never_shown(monkeypatch):
    monkeypatch.setenv("RERANK_TEST_KEY", "sk-rerank-secret")
    with FakeRerankServer() as server:
        reranker = build(url=server.url, api_key_env="RERANK_TEST_KEY")
        reranker.rerank(QUERY, DOCS[:1])
        url = server.url
    assert server.headers[0]["authorization"] == "Bearer sk-rerank-secret"
    assert "sk-rerank-secret" not in repr(reranker) + str(reranker.describe())
    assert reranker.describe()["reranker.url"] == url
    monkeypatch.delenv("RERANK_TEST_KEY")
    with pytest.raises(ConfigError, match="reranker.api_key_env"):
        build(url="http://127.0.0.1:9/v1/rerank", api_key_env="RERANK_TEST_KEY")


def test_at_most_max_concurrency_requests_are_in_flight():
    with FakeRerankServer(faults=["slow"] * 4, slow_s=0.3) as server:
        reranker = build(url=server.url, max_concurrency=2)
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda q: reranker.rerank(q, DOCS), [QUERY] * 4))
    assert server.requests == 4 and server.peak_in_flight == 2
    assert all(r == pytest.approx(HAND_SCORES) for r in results)


def test_check_refuses_an_answer_the_mapping_cannot_read():
    with FakeRerankServer() as server:
        reranker = build(url=server.url, response={"score": "score"})  # TEI's key, wrong here
        with pytest.raises(RerankResponseError) as caught:
            reranker.check()
    assert caught.value.reason == "bad_response"
    assert "reranker.response.score" in str(caught.value)


def test_an_answer_that_is_not_json_is_a_bad_response_as_the_docs_say():
    with FakeRerankServer(faults=["html"] * 2) as server:
        reranker = build(url=server.url, backoff_s=0.01, max_retries=1)
        with pytest.raises(LLMError) as caught:
            reranker.rerank(QUERY, DOCS)
    assert caught.value.reason == "bad_response"  # was http_error
    assert "the answer is not JSON" in str(caught.value) and server.requests == 2  # retried


def test_check_names_the_fix_for_an_unknown_model():
    with FakeRerankServer(model="bge") as server:
        with pytest.raises(LLMHTTPError) as caught:
            build(url=server.url, model="other").check()
    assert caught.value.status == 404 and "reranker.model" in str(caught.value)


def test_a_shorter_list_without_top_n_is_an_error():
    reranker = build(url="http://127.0.0.1:9/v1/rerank")
    payload = {"results": [{"index": 1, "relevance_score": 0.5}]}
    with pytest.raises(RerankResponseError, match="1 of 2 documents got no score"):
        reranker.mapping.scores(payload, 2)
    with pytest.raises(RerankResponseError, match="scored twice"):
        reranker.mapping.scores({"results": [{"index": 0, "relevance_score": 1}] * 2}, 2)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"top_n": 5, "batch_size": 4}, "reranker.top_n (5) applies to each request"),
        ({"response": {"results": "results["}}, "reranker.response.results"),
        ({"candidates": 0}, "reranker.candidates must be >= 1"),
        ({"url": "127.0.0.1:8080/v1/rerank"}, "reranker.url must start with http"),
        ({"model": "m", "request": {"model": None}}, "reranker.request.model is null"),
    ],
)
def test_bad_settings_fail_when_built(overrides, needle):
    with pytest.raises(ConfigError) as caught:
        build(**overrides)
    assert needle in str(caught.value)


# --- the response cache (a rerun sends no rerank request) -----------------------------------
def _cached(server_url: str, cache: ResponseCache | None, mode: str = "read_write", **kw: Any):
    meter = UsageMeter("reranker")
    return CachedReranker(build(url=server_url, **kw), meter, cache, mode), meter


def test_cached_reranker_answers_a_repeat_from_the_cache_with_no_request(tmp_path):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    with FakeRerankServer() as server:
        first, meter1 = _cached(server.url, cache)
        assert first.rerank(QUERY, DOCS) == pytest.approx(HAND_SCORES)
        assert server.requests == 1 and len(cache) == 1
        again, meter2 = _cached(server.url, cache)  # a rerun: a new reranker, the same file
        scores = again.rerank(QUERY, DOCS)
        assert server.requests == 1  # no request: answered from the cache
        again.rerank(QUERY, DOCS[:3])  # other documents: a miss
        assert server.requests == 2
    assert scores == pytest.approx(HAND_SCORES)
    assert (meter1.calls, meter1.cache_hits) == (1, 0)
    assert (meter2.calls, meter2.cache_hits) == (2, 1)
    assert meter2.metrics()["reranker.llm_calls"] - meter2.metrics()["reranker.llm_cache_hits"] == 1


def test_cache_key_holds_the_rerankers_identity_and_left_out_documents_come_back_as_inf(tmp_path):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    with FakeRerankServer(model="bge") as server:
        cut, _ = _cached(server.url, cache, top_n=2, model="bge")
        cut.rerank(QUERY, DOCS)
        full, _ = _cached(server.url, cache, model="bge")  # no top_n: another identity
        assert full.rerank(QUERY, DOCS) == pytest.approx(HAND_SCORES)
        assert server.requests == 2
        again, _ = _cached(server.url, cache, top_n=2, model="bge")
        scores = again.rerank(QUERY, DOCS)
        assert server.requests == 2
    # top_n=2 keeps the two best by hand (0.8, 0.4); the two left out come back as -inf
    assert scores[1] == pytest.approx(0.8) and scores[3] == pytest.approx(0.4)
    assert scores[0] == -math.inf and scores[2] == -math.inf


@pytest.mark.parametrize(("mode", "requests", "stored"), [("read_only", 2, 0), ("off", 2, 0)])
def test_cache_modes_apply_to_the_reranker(tmp_path, mode, requests, stored):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    with FakeRerankServer() as server:
        reranker, meter = _cached(server.url, cache, mode)
        reranker.rerank(QUERY, DOCS)
        reranker.rerank(QUERY, DOCS)
        assert server.requests == requests
    assert len(cache) == stored and meter.calls == 2 and meter.cache_hits == 0


def test_the_fake_reranker_is_metered_but_never_cached(tmp_path):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    meter = UsageMeter("reranker")
    reranker = CachedReranker(FakeReranker(candidates=3), meter, cache)
    assert reranker.rerank(QUERY, DOCS) == pytest.approx(HAND_SCORES)
    assert len(cache) == 0 and meter.calls == 1 and reranker.candidates == 3


def test_a_failed_rerank_is_counted_and_not_stored(tmp_path):
    cache = ResponseCache(tmp_path / "llm.sqlite")
    with FakeRerankServer() as server:
        reranker, meter = _cached(server.url, cache, request={"documents": "texts"}, max_retries=0)
        with pytest.raises(RerankResponseError):
            reranker.rerank(QUERY, DOCS)
    assert meter.errors == 1 and len(cache) == 0


def test_the_reranker_and_a_chat_model_choose_their_cache_alike(tmp_path):
    """One rule (llm.cache.cache_in_use) for both wrappers: the store unless the mode is off or
    the part is not cacheable; an unknown mode is refused with the same one line."""
    cache = ResponseCache(tmp_path / "llm.sqlite")
    assert cache_in_use(cache, "read_only", True) is cache
    assert cache_in_use(cache, "off", True) is None
    assert cache_in_use(cache, "read_write", False) is None
    meter = UsageMeter("reranker")
    with FakeRerankServer() as server:
        served = build(url=server.url)
        for mode in ("read_write", "off"):
            assert CachedReranker(served, meter, cache, mode).cache is cache_in_use(
                cache, mode, True
            )
        messages = []
        for wrap, inner in ((CachedReranker, served), (CachedChat, FakeChat())):
            with pytest.raises(ConfigError) as refused:
                wrap(inner, meter, cache, "sometimes")
            messages.append(str(refused.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("cache.mode='sometimes' is not one of read_write, read_only")
