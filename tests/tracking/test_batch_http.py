"""The one gzip'd JSON POST of both batch clients (:mod:`rag_experiments.tracking.batch_http`),
against a real HTTP server on 127.0.0.1: the body the server reads back, the headers, and
MLflow's retry behaviour (5xx retried up to ``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, then raised;
4xx answered as is)."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.exceptions import MlflowException
from mlflow.utils.rest_utils import MlflowHostCreds

from rag_experiments.tracking.batch_http import encode_gzip_json, post_gzip_json

PATH = "/ajax-api/3.0/rag-exp/traces/batch"


class _Server:
    """Answers each POST with the next status of :attr:`statuses` (200 when none is left) and
    records ``(path, headers, gunzipped body)``."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.seen: list[tuple[str, dict[str, str], bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                server.seen.append((self.path, dict(self.headers), gzip.decompress(raw)))
                status = server.statuses.pop(0) if server.statuses else 200
                body = json.dumps({"status": status}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.store = SimpleNamespace(get_host_creds=lambda: MlflowHostCreds(self.url))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Server]:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")  # retries without waiting
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    s = _Server()
    thread = threading.Thread(target=s.httpd.serve_forever, daemon=True)
    thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def test_the_server_reads_back_the_payload_with_gzip_json_headers(server: _Server) -> None:
    payload = {"run_id": "r1", "metrics": [["nDCG_at_10", 0.5, 1_000, 0]], "note": "ünï"}
    response = post_gzip_json(server.store, PATH, encode_gzip_json(payload))
    assert response.status_code == 200
    [(path, headers, body)] = server.seen
    assert path == PATH
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == payload
    assert "ünï".encode() in body  # UTF-8 as is, not \\u escapes


def test_a_5xx_is_retried_with_the_same_body_and_raised_when_retries_run_out(
    server: _Server,
) -> None:
    data = encode_gzip_json({"x": 1})
    server.statuses = [503, 500]
    assert post_gzip_json(server.store, PATH, data).status_code == 200
    assert [body for _, _, body in server.seen] == [b'{"x": 1}'] * 3  # two retries, then 200
    server.seen.clear()
    server.statuses = [503, 503, 503]  # MAX_RETRIES=2: three attempts, all failing
    with pytest.raises(MlflowException, match="API request to"):
        post_gzip_json(server.store, PATH, data)
    assert len(server.seen) == 3


def test_a_4xx_is_answered_as_is_without_a_retry(server: _Server) -> None:
    server.statuses = [413]
    response = post_gzip_json(server.store, PATH, encode_gzip_json({"x": 1}))
    assert response.status_code == 413 and response.json() == {"status": 413}
    assert len(server.seen) == 1
