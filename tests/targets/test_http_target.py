"""HttpTarget: request templates, JMESPath mapping, corpus doc matching, retries, per-row
failures against a fault-injection server, concurrency and latency, secret redaction."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import mlflow
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from rag_experiments.analysis.runs import run_values
from rag_experiments.build import build_target
from rag_experiments.common.redact import REDACTED
from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError, RunFailedError, TargetError
from rag_experiments.metrics.citations import CitationAccuracy
from rag_experiments.metrics.claim_layer import (
    Checked,
    ClaimLayer,
    SentenceClaimExtractor,
    Usage,
)
from rag_experiments.metrics.keyword_coverage import KeywordCoverage
from rag_experiments.metrics.retrieval import RetrievalMetrics
from rag_experiments.records import Citation, Document, Sample
from rag_experiments.runner import evaluate, run_experiment
from rag_experiments.targets.doc_matcher import CorpusDocMatcher
from rag_experiments.targets.http import TARGET_RETRY, HttpTarget
from rag_experiments.targets.request_template import RequestTemplate
from rag_experiments.targets.response_mapping import ResponseMapping, ResponseMappingError
from rag_experiments.tracking.mlflow_tracker import MlflowTracker
from rag_experiments.tracking.store import RunStore

# --- a tiny scripted HTTP server ---------------------------------------------------------------

DROP = "drop"
"""A reply that closes the connection without answering."""

Reply = tuple[int, str, bytes]
Script = Callable[[dict, dict, int], "Reply | str"]
"""``script(json_body, headers, n)`` → ``(status, content type, body)`` or :data:`DROP`;
``n`` is how many times this question was asked (1 = first)."""


def _json(payload: object, status: int = 200) -> Reply:
    return status, "application/json", json.dumps(payload).encode()


class ScriptedServer:
    """A threaded HTTP server answering POSTs (and GETs, with an empty body) by ``script``."""

    def __init__(self, script: Script, delay_s: Callable[[dict], float] = lambda body: 0.0):
        self.script, self.delay_s = script, delay_s
        self.calls: Counter[str] = Counter()
        self.in_flight = 0
        self.peak = 0
        self.headers: list[dict] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _handle(self, body: dict) -> None:
                key = str(body.get("question", self.path))
                with lock:
                    outer.calls[key] += 1
                    n = outer.calls[key]
                    outer.in_flight += 1
                    outer.peak = max(outer.peak, outer.in_flight)
                    outer.headers.append(dict(self.headers))
                try:
                    time.sleep(outer.delay_s(body))
                    reply = outer.script(body, dict(self.headers), n)
                finally:
                    with lock:
                        outer.in_flight -= 1
                if reply == DROP:
                    self.close_connection = True
                    return
                status, ctype, data = reply
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out
                    pass

            def do_POST(self):
                size = int(self.headers.get("Content-Length") or 0)
                self._handle(json.loads(self.rfile.read(size) or b"{}"))

            def do_GET(self):
                self._handle({})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sample(i: int | str, question: str | None = None, **kw) -> Sample:
    return Sample(id=f"q{i}", user_input=question or f"question {i}?", **kw)


# --- request template ---------------------------------------------------------------------------


def test_body_template_fills_placeholders_and_keeps_types():
    tpl = RequestTemplate(
        {
            "q": "{user_input}",
            "meta": {"id": "{id}", "k": 5, "note": "ask: {user_input} {{raw}}"},
            "list": ["{question_type}", True, None],
        }
    )
    body = tpl.render(_sample(7, "Who approves?", question_type="procedural"))
    assert body == {
        "q": "Who approves?",
        "meta": {"id": "q7", "k": 5, "note": "ask: Who approves? {raw}"},
        "list": ["procedural", True, None],
    }
    assert tpl.body["q"] == "{user_input}"  # the template itself is unchanged


def test_body_template_rejects_unknown_placeholder():
    with pytest.raises(ConfigError, match=r"unknown placeholder \{question\}"):
        RequestTemplate({"question": "{question}"})


def test_header_env_interpolation_and_redaction(monkeypatch):
    monkeypatch.setenv("RX_TEST_TOKEN", "tok-123456")
    tpl = RequestTemplate(
        {},
        {
            "Authorization": "Bearer {env:RX_TEST_TOKEN}",
            "X-Tenant": "t{env:RX_TEST_TOKEN}",
            "Accept": "application/json",
        },
    )
    assert tpl.headers["Authorization"] == "Bearer tok-123456"
    assert tpl.public_headers() == {
        "Authorization": REDACTED,
        "X-Tenant": REDACTED,
        "Accept": "application/json",
    }
    assert tpl.scrub("echo ttok-123456 and Bearer abc") == f"echo t{REDACTED} and {REDACTED}"
    monkeypatch.delenv("RX_TEST_TOKEN")
    with pytest.raises(ConfigError, match="RX_TEST_TOKEN, which is not set"):
        RequestTemplate({}, {"Authorization": "Bearer {env:RX_TEST_TOKEN}"})
    with pytest.raises(ConfigError, match="only {env:NAME}"):
        RequestTemplate({}, {"X": "{user_input}"})


# --- response mapping ---------------------------------------------------------------------------


def test_mapping_strings_with_top_level_ids():
    m = ResponseMapping()
    out = m.apply(
        {
            "answer": "A",
            "contexts": ["c1", "c2"],
            "context_ids": ["x#0", 7],
            "doc_ids": ["x", "y", "x", "z"],
        }
    )
    assert (out.answer, out.contexts, out.context_ids, out.doc_ids) == (
        "A",
        ["c1", "c2"],
        ["x#0", "7"],
        ["x", "y", "z"],
    )


def test_mapping_context_objects_with_sub_expressions():
    m = ResponseMapping(
        answer="data.reply",
        contexts="data.hits",
        context_text="chunk.body",
        context_id="chunk.id",
        context_doc_id="source.doc",
    )
    payload = {
        "data": {
            "reply": "R",
            "hits": [
                {"chunk": {"body": "t1", "id": "a#1"}, "source": {"doc": "a"}},
                {"chunk": {"body": "t2", "id": "b#0"}, "source": {"doc": "b"}},
                {"chunk": {"body": "t3", "id": "a#2"}, "source": {"doc": "a"}},
            ],
        }
    }
    out = m.apply(payload)
    assert out.contexts == ["t1", "t2", "t3"]
    assert out.context_ids == ["a#1", "b#0", "a#2"]
    assert out.doc_ids == ["a", "b"]  # deduplicated, first occurrence wins
    # one object without a doc id: per-context doc ids are not used at all
    payload["data"]["hits"][1]["source"] = {}
    assert m.apply(payload).doc_ids is None


def test_mapping_errors():
    m = ResponseMapping()
    with pytest.raises(ResponseMappingError, match="no answer at 'answer'") as e:
        m.apply({"result": "x"})
    assert e.value.reason == "mapping_empty" and "keys ['result']" in str(e.value)
    with pytest.raises(ResponseMappingError, match="expected a list") as e:
        m.apply({"answer": "a", "contexts": "just one string"})
    assert e.value.reason == "mapping_invalid"
    with pytest.raises(ResponseMappingError, match="context 2 has no text"):
        m.apply({"answer": "a", "contexts": ["ok", {"content": "x"}]})
    with pytest.raises(ResponseMappingError, match="expected a string"):
        m.apply({"answer": {"text": "a"}, "contexts": []})
    with pytest.raises(ResponseMappingError, match="list of strings"):
        m.apply({"answer": "a", "contexts": [], "doc_ids": "d1"})
    # optional fields may be absent; required ones may be empty lists
    out = ResponseMapping(required=["answer"]).apply({"answer": "a"})
    assert (out.contexts, out.context_ids, out.doc_ids) == ([], None, None)
    with pytest.raises(ConfigError, match="not a valid JMESPath"):
        ResponseMapping(answer="choices[0")
    with pytest.raises(ConfigError, match="required lists 'doc_ids'"):
        ResponseMapping(doc_ids=None, required=["doc_ids"])


def test_mapping_citations_objects_id_lists_and_errors():
    m = ResponseMapping(
        citations="answer_citations",
        citation_statement="span",
        citation_chunk_id="chunks",
        citation_doc_id="doc",
        citation_text="quote",
    )
    out = m.apply(
        {
            "answer": "A. B.",
            "contexts": [],
            "answer_citations": [
                {"span": "A.", "chunks": ["c1", 2], "doc": "d"},  # two chunk ids: two citations
                {"span": "B", "quote": "the text"},
            ],
        }
    )
    assert out.citations == [
        Citation("A.", chunk_id="c1", doc_id="d"),
        Citation("A.", chunk_id="2", doc_id="d"),
        Citation("B", text="the text"),
    ]
    assert m.apply({"answer": "a", "contexts": []}).citations is None  # not found: markers
    assert m.apply({"answer": "a", "contexts": [], "answer_citations": []}).citations == []
    assert (
        ResponseMapping().apply({"answer": "a", "contexts": [], "citations": 1}).citations is None
    )
    for bad, message in [
        ("c1", "expected a list"),
        (["c1"], 'citation 1 is str "c1", expected an object'),
        ([{"chunks": "c1"}], "citation 1 has no statement text at 'span'"),
        ([{"span": "A", "quote": None}], "citation 1 names no source"),
        ([{"span": "A", "chunks": [True]}], "citation 1 chunk_id at 'chunks'"),
        ([{"span": "A", "chunks": ["a", "b"], "doc": ["x", "y", "z"]}], "2 chunk ids but 3"),
    ]:
        with pytest.raises(ResponseMappingError, match=message) as e:
            m.apply({"answer": "a", "contexts": [], "answer_citations": bad})
        assert e.value.reason == "mapping_invalid"
    with pytest.raises(ResponseMappingError, match="no citations at 'cites'") as e:
        ResponseMapping(citations="cites", required=["citations"]).apply({"answer": "a"})
    assert e.value.reason == "mapping_empty"
    with pytest.raises(ConfigError, match="citation_statement must be set"):
        ResponseMapping(citation_statement=None)


class _Substring:
    """Checker: a statement is entailed by a passage holding it (case-insensitive)."""

    batch = True

    def check(self, claims, texts, question=""):
        table = tuple(tuple(c.lower().rstrip(".") in t.lower() for t in texts) for c in claims)
        return Checked(table), Usage()


def test_http_target_maps_structured_citations_and_the_metric_scores_them():
    # A Cohere-shaped reply: the answer, its documents, and citations naming the answer's
    # spans and the cited documents' ids. s1 cites it#0 (holds it: good), s2 cites hr#0
    # (does not: wrong), s3 cites nothing -> recall 1/3, precision 1/2 (hand values).
    docs = [
        {"id": "it#0", "text": "Form AR-1 requests an account."},
        {"id": "it#1", "text": "The Service Desk needs 2 days."},
        {"id": "hr#0", "text": "Badges are collected at reception."},
    ]
    reply = {
        "text": "Form AR-1 requests an account. The Service Desk needs 2 days. "
        "Badges are collected at reception.",
        "documents": docs,
        "citations": [
            {
                "start": 0,
                "end": 29,
                "text": "Form AR-1 requests an account",
                "document_ids": ["it#0"],
            },
            {
                "start": 31,
                "end": 60,
                "text": "The Service Desk needs 2 days",
                "document_ids": ["hr#0"],
            },
        ],
    }
    with ScriptedServer(lambda body, headers, n: _json(reply)) as srv:
        target = HttpTarget(
            f"{srv.url}/chat",
            response={
                "answer": "text",
                "contexts": "documents",
                "context_id": "id",
                "citations": "citations",
                "citation_statement": "text",
                "citation_chunk_id": "document_ids",
                "citation_doc_id": None,
                "citation_text": None,
            },
            doc_ids_from_text=False,
        )
        sample = _sample(1)
        resp = target.answer(sample)
        target.close()
    assert resp.error is None, resp.error_message
    assert resp.citations == [
        Citation("Form AR-1 requests an account", chunk_id="it#0"),
        Citation("The Service Desk needs 2 days", chunk_id="hr#0"),
    ]
    layer = ClaimLayer(SentenceClaimExtractor(), _Substring())
    values, _ = CitationAccuracy(layer=layer).score_row(sample, resp)
    assert values["citation_recall"].value == pytest.approx(1 / 3)
    assert values["citation_precision"].value == pytest.approx(1 / 2)


@pytest.mark.parametrize(
    ("option", "payload", "expected"),
    [
        ("http", {"answer": "A", "contexts": ["c1"], "doc_ids": ["d1"]}, ("A", ["c1"], ["d1"])),
        (
            "http_openai",
            {
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": "A",
                            "context": {"citations": [{"content": "c1", "chunk_id": "0"}]},
                        }
                    }
                ]
            },
            ("A", ["c1"], None),
        ),
        (
            "http_openai",
            {"choices": [{"message": {"role": "assistant", "content": "A"}}]},
            ("A", [], None),
        ),
        (
            "http_langserve",
            {
                "output": {
                    "answer": "A",
                    "context": [
                        {"page_content": "c1", "metadata": {"source": "f.pdf"}, "type": "Document"}
                    ],
                },
                "metadata": {"run_id": "r"},
            },
            ("A", ["c1"], None),
        ),
    ],
)
def test_presets_compose_and_map_their_shape(compose_cfg, option, payload, expected):
    cfg = compose_cfg(f"target={option}")
    target = build_target(cfg.target)
    out = target.mapping.apply(payload)
    assert (out.answer, out.contexts, out.doc_ids) == expected
    body = target.template.render(_sample(1, "Q?"))
    assert "Q?" in json.dumps(body)


def test_misspelled_http_key_fails_at_compose(compose_cfg):
    with pytest.raises(Exception, match="timeout_sec"):
        compose_cfg("target=http", "target.timeout_sec=3")


def test_body_can_be_replaced_by_a_json_string(compose_cfg):
    cfg = compose_cfg("target=http", """target.body='{"input": {"question": "{user_input}"}}'""")
    assert build_target(cfg.target).template.render(_sample(1, "Q?")) == {
        "input": {"question": "Q?"}
    }


# --- corpus doc matching ------------------------------------------------------------------------

CORPUS = [
    Document(
        "a", "Access Policy. New accounts are requested by the line manager, using form AR-1."
    ),
    Document(
        "b", "Travel. Economy class is booked for flights under six hours; receipts are required."
    ),
    Document("c", "Travel (copy). Economy class is booked for flights under six hours."),
]


def test_doc_matcher_rule_by_hand():
    m = CorpusDocMatcher(CORPUS, min_overlap=0.7)
    # verbatim modulo case/punctuation/line breaks -> the containing doc
    assert m.match("new ACCOUNTS are requested\nby the line-manager") == "a"
    # contained in b and c: the first in corpus order
    assert m.match("Economy class is booked for flights under six hours") == "b"
    # rewritten, not verbatim: 6 of its 7 distinct words are in a (6/7 = 0.857 >= 0.7)
    assert m.match("accounts requested by the manager form zebra") == "a"
    # 5 of 7 words in a (0.714 >= 0.7)
    assert m.match("accounts requested by the manager zebra yak") == "a"
    # 3 of 4 words in both b and c, contained in neither: the tie goes to b (corpus order)
    assert m.match("economy class flights yak") == "b"
    assert m.match("accounts requested zebra yak wolf") is None  # 2/5 = 0.4 < 0.7
    assert m.match("?!") is None
    assert m.rank(
        ["flights under six hours", "nothing like it here", "line manager", "receipts are required"]
    ) == ["b", "unmatched:2", "a"]


def test_doc_matcher_rejects_bad_overlap():
    with pytest.raises(ConfigError, match="doc_min_overlap"):
        CorpusDocMatcher(CORPUS, min_overlap=0.0)


# --- transport failures, retries, secrets, concurrency -----------------------------------------


def test_connection_refused_is_a_row_error():
    target = HttpTarget(
        f"http://127.0.0.1:{_free_port()}/ask",
        retry=replace(TARGET_RETRY, max_retries=1, backoff_s=0.0),
    )
    resp = target.answer(_sample(1))
    assert resp.error == "connection_refused"
    assert "cannot connect" in resp.error_message and resp.metadata["attempts"] == 2
    assert resp.latency_ms > 0


def test_bad_config_is_refused():
    with pytest.raises(ConfigError, match="http:// or https://"):
        HttpTarget("127.0.0.1:8000/ask")
    with pytest.raises(ConfigError, match="max_concurrency must be >= 1"):
        HttpTarget("http://x/ask", max_concurrency=0)
    with pytest.raises(ConfigError, match="flat object"):
        HttpTarget("http://x/ask", method="GET", body={"q": {"nested": "{user_input}"}})


def test_secrets_never_reach_messages_tags_or_logs(monkeypatch, caplog):
    monkeypatch.setenv("RX_TEST_TOKEN", "very-secret-42")

    def echo(body, headers, n):  # a 500 whose body echoes the credential back
        return 500, "text/plain", f"denied for {headers.get('Authorization')}".encode()

    caplog.set_level(logging.DEBUG)
    with ScriptedServer(echo) as srv:
        target = HttpTarget(
            f"{srv.url}/ask",
            headers={"Authorization": "Bearer {env:RX_TEST_TOKEN}"},
            retry=replace(TARGET_RETRY, max_retries=1, backoff_s=0.0),
        )
        target.prepare(EvalDataset("t", [], []))
        resp = target.answer(_sample(1))
    assert srv.headers[0]["Authorization"] == "Bearer very-secret-42"  # the server got it
    assert resp.error == "http_500" and resp.metadata["http_status"] == 500
    assert "denied for" in resp.error_message and REDACTED in resp.error_message
    everything = resp.error_message + json.dumps(target.describe()) + caplog.text
    assert "very-secret-42" not in everything
    assert json.loads(target.describe()["http.headers"]) == {"Authorization": REDACTED}


def test_retry_after_recovers_and_health_check(caplog):
    def flaky(body, headers, n):
        if body == {}:  # GET /health
            return _json({"status": "ok"})
        if n == 1:
            return 503, "application/json", b'{"error": "warming up"}'
        return _json({"answer": "fine", "contexts": ["c"]})

    with ScriptedServer(flaky) as srv:
        target = HttpTarget(
            f"{srv.url}/ask",
            health_url=f"{srv.url}/health",
            retry=replace(TARGET_RETRY, max_retries=2, backoff_s=0.01),
        )
        target.prepare(EvalDataset("t", [], []))
        resp = target.answer(_sample(1))
    assert resp.error is None and resp.response == "fine" and resp.metadata["attempts"] == 2
    assert "attempt 1/3 failed (HTTP 503)" in caplog.text


def test_failed_health_check_stops_before_the_run():
    target = HttpTarget(
        "http://127.0.0.1:9/ask",
        health_url=f"http://127.0.0.1:{_free_port()}/health",
        retry=replace(TARGET_RETRY, max_retries=0),
    )
    with pytest.raises(TargetError, match="health check GET .* failed") as e:
        target.prepare(EvalDataset("t", [], []))
    assert e.value.reason == "endpoint_unavailable"


def test_dead_url_without_health_url_fails_before_the_run():
    url = f"http://127.0.0.1:{_free_port()}/ask"
    target = HttpTarget(url, retry=replace(TARGET_RETRY, max_retries=1, backoff_s=0.0))
    with pytest.raises(TargetError) as e:
        target.prepare(EvalDataset("t", [], []))
    assert e.value.reason == "endpoint_unavailable"
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"target.url {url} cannot be reached (ConnectError")
    assert "2 attempt(s)" in message  # retries=1: the first attempt and one retry
    assert message.endswith(
        "start the service, fix target.url, or set target.health_url to its health endpoint"
    )


def test_live_url_without_health_url_passes_without_asking_a_question(caplog):
    def answer(body, headers, n):
        return _json({"answer": "fine", "contexts": ["c"]})

    caplog.set_level(logging.INFO)
    with ScriptedServer(answer) as srv:
        target = HttpTarget(f"{srv.url}/ask", retry=replace(TARGET_RETRY, max_retries=0))
        target.prepare(EvalDataset("t", [], []))
        assert sum(srv.calls.values()) == 0  # the probe is a HEAD (501 here), not a question
        resp = target.answer(_sample(1))
    assert resp.error is None and resp.response == "fine"
    assert srv.calls == {"question 1?": 1}
    assert (
        f"HTTP target: {srv.url}/ask is reachable (HEAD {srv.url}/ask: HTTP 501; any reply "
        "counts, the probe asks no question)" in caplog.text
    )


def test_a_server_that_accepts_but_does_not_reply_passes_the_probe(caplog):
    caplog.set_level(logging.INFO)
    with socket.socket() as listening:  # the kernel accepts connections; nobody answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        port = listening.getsockname()[1]
        target = HttpTarget(
            f"http://127.0.0.1:{port}/ask",
            retry=replace(TARGET_RETRY, timeout_s=0.2, max_retries=0),
        )
        target.check()  # no error: a connection could be made
    assert f"127.0.0.1:{port}/ask is reachable (HEAD" in caplog.text
    assert "connected, no reply in time; any reply counts" in caplog.text


def test_a_server_that_resets_accepted_connections_passes_the_probe(caplog):
    caplog.set_level(logging.INFO)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        port = listening.getsockname()[1]

        def reset_each() -> None:  # accept, then close with RST (SO_LINGER 0): a ReadError
            for _ in range(2):
                try:
                    conn, _ = listening.accept()
                except OSError:
                    return
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.recv(1024)
                conn.close()

        threading.Thread(target=reset_each, daemon=True).start()
        target = HttpTarget(
            f"http://127.0.0.1:{port}/ask", retry=replace(TARGET_RETRY, timeout_s=2, max_retries=0)
        )
        target.check()  # no error: a connection could be made
    assert "connected, no reply in time" in caplog.text


def test_concurrency_keeps_order_and_per_row_latency():
    def answer(body, headers, n):
        return _json({"answer": body["question"].upper(), "contexts": [body["question"]]})

    samples = [_sample(i) for i in range(8)]
    with ScriptedServer(answer, delay_s=lambda body: 0.25) as srv:
        target = HttpTarget(f"{srv.url}/ask", max_concurrency=4)
        # the runner answers target.max_concurrency at once
        out = evaluate(EvalDataset("t", samples, []), target, [], progress=False).responses
    assert [r.response for r in out] == [s.user_input.upper() for s in samples]
    assert srv.peak == 4  # four requests in flight at once
    # each row's latency is its own request (>= the server's 250 ms), not the queue's
    assert all(250 <= r.latency_ms < 1500 for r in out), [r.latency_ms for r in out]


# --- the fault-injection run --------------------------------------------------------------------

DOCS = [
    Document(f"d{i}", t)
    for i, t in enumerate(
        [
            "Alpha bravo charlie delta echo foxtrot.",
            "Golf hotel india juliet kilo lima.",
            "Mike november oscar papa quebec romeo.",
        ]
    )
]
T = [d.text for d in DOCS]

REPLIES: dict[int, Callable[[int], Reply | str]] = {
    # answered (q3 only at the second attempt): doc ids from text, then from the endpoint
    0: lambda n: _json({"answer": "a0", "contexts": [T[0], T[1]]}),
    1: lambda n: _json({"answer": "a1", "contexts": [T[0], T[1]]}),
    2: lambda n: _json(
        {
            "answer": "a2",
            "contexts": [{"text": T[1], "doc_id": "d1"}, {"text": T[2], "doc_id": "d2"}],
        }
    ),
    3: lambda n: (
        (503, "text/plain", b"busy") if n == 1 else _json({"answer": "a3", "contexts": [T[0]]})
    ),
    # failures
    4: lambda n: DROP,
    5: lambda n: _json({"answer": "late", "contexts": []}),  # after a delay > timeout
    6: lambda n: (500, "text/plain", b"internal kaboom"),
    7: lambda n: (200, "text/html", b"<html><body>Gateway login</body></html>"),
    8: lambda n: _json({"result": {"text": "wrong shape"}}),
    9: lambda n: _json({"answer": "a9", "contexts": T[0]}),
}
REASONS = {
    4: "connection_error",
    5: "timeout",
    6: "http_500",
    7: "non_json",
    8: "mapping_empty",
    9: "mapping_invalid",
}


@pytest.fixture
def fault_server() -> Iterator[ScriptedServer]:
    def script(body, headers, n):
        return REPLIES[int(body["question"].split()[1].rstrip("?"))](n)

    def delay(body):
        return 1.0 if body.get("question") == "question 5?" else 0.0

    with ScriptedServer(script, delay_s=delay) as srv:
        yield srv


def test_fault_injection_rows_fail_with_reasons_and_averages_cover_the_rest(tmp_path, fault_server):
    refs = {0: "d0", 1: "d1", 2: "d2", 3: "d0"}
    samples = [_sample(i, reference_doc_ids=[refs.get(i, "d0")]) for i in range(10)]
    dataset = EvalDataset("faults", samples, DOCS, "mem")
    target = HttpTarget(
        f"{fault_server.url}/ask",
        max_concurrency=3,
        retry=replace(TARGET_RETRY, timeout_s=0.3, max_retries=2, backoff_s=0.01),
    )
    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = MlflowTracker(uri=uri, experiment="faults", run_name="faults")
    with pytest.raises(RunFailedError, match="6 of 10 questions failed") as e:  # default 0.2
        run_experiment(
            dataset,
            target,
            [RetrievalMetrics(cutoffs=[1, 3], chunk_level=False), KeywordCoverage()],
            tracker,
            params={},
            config_yaml="",
            progress=False,
        )
    assert '"http_500": 1' in str(e.value) and '"timeout": 1' in str(e.value)

    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("faults").experiment_id])
    assert run.info.status == "FAILED"
    store = RunStore(uri)  # logged before the run failed (metrics + average_results):
    m = run_values(store, store.get_run(run.info.run_id))
    assert m["n_samples"] == 10 and m["n_failed"] == 6
    # q0: [d0,d1] ref d0 -> Hit@1 1, MRR 1; q1: ref d1 -> 0, 1/2; q2: [d1,d2] ref d2 -> 0, 1/2;
    # q3 (after a retried 503): [d0] ref d0 -> 1, 1
    assert m["Hit_at_1"] == pytest.approx(2 / 4) and m["Hit_at_1_n_valid"] == 4
    assert m["MRR_at_3"] == pytest.approx((1 + 0.5 + 0.5 + 1) / 4) and m["MRR_at_3_n_valid"] == 4
    assert m["Hit_at_3"] == 1.0
    assert m["latency_ms_p50"] > 0 and m["latency_ms_p95"] >= m["latency_ms_p50"]

    path = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id,
        artifact_path="per_query_results.csv",
        tracking_uri=uri,
        dst_path=str(tmp_path),
    )
    table = pd.read_csv(path).set_index("id")
    for i, reason in REASONS.items():
        row = table.loc[f"q{i}"]
        assert row["error"] == reason, (i, row["error"], row["error_message"])
        assert row["Hit@1.reason"] == "target_error" and pd.isna(row["Hit@1"])
        assert row["latency_ms"] > 0
    for i in range(4):
        assert pd.isna(table.loc[f"q{i}", "error"])
    assert "internal kaboom" in table.loc["q6", "error_message"]
    assert "Gateway login" in table.loc["q7", "error_message"]
    assert "['result']" in table.loc["q8", "error_message"]
    assert "disconnected" in table.loc["q4", "error_message"].lower()
    assert json.loads(table.loc["q0", "retrieved_doc_ids"]) == ["d0", "d1"]  # matched by text
    # retried: transport failures and 5xx (3 attempts each), 503 once; not retried: HTML, shape
    calls = {int(k.split()[1].rstrip("?")): v for k, v in fault_server.calls.items()}
    assert calls == {0: 1, 1: 1, 2: 1, 3: 2, 4: 3, 5: 3, 6: 3, 7: 1, 8: 1, 9: 1}
