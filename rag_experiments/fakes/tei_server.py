"""A fake Text Embeddings Inference server on 127.0.0.1 that serves a local classification
model folder (:func:`~rag_experiments.fakes.tiny_verifier.make_tiny_verifier`), for tests and
dry runs of ``verifier=tei``.

The shapes are TEI's (``router/src/http/types.rs`` and ``server.rs`` of
huggingface/text-embeddings-inference):

- ``POST /predict`` ``{"inputs": [[a, b], …] | [a, b] | "a", "truncate"?, "raw_scores"?}`` →
  per input ``[{"score", "label"}, …]`` best first (a batch: a list of those); scores are the
  softmax over the labels (a sigmoid for a one-logit model) unless ``raw_scores``;
- ``POST /rerank`` ``{"query", "texts", "truncate"?, "raw_scores"?}`` → ``[{"index",
  "score"}, …]`` best first, each text scored as the pair ``(query, text)``;
- ``GET /health`` → 200; ``GET /info`` → ``{"model_id", "model_type"}``.

A batch larger than ``max_client_batch_size`` gets 413, a body of another shape 422 (as TEI).
The server counts requests and keeps their bodies. Run one for a dry run with
``python -m rag_experiments.fakes.tei_server MODEL_FOLDER [--port N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from rag_experiments.fakes.local_server import LocalServer


class FakeTeiServer(LocalServer):
    """TEI's ``/predict`` and ``/rerank`` over a local model folder, or over a logits function
    (tests that need no torch).

    Args:
        model: The model folder (``save_pretrained`` output), or None with ``logits_fn``.
        max_client_batch_size: Most inputs or texts per request (TEI's default 32).
        port: Port to listen on (0 = a free one).
        logits_fn: ``(first, second) -> logits`` of one input, used instead of a model.
        id2label: The labels of ``logits_fn``'s outputs.

    Attributes:
        requests: Requests to ``/predict`` and ``/rerank``.
        bodies: Their JSON bodies, in arrival order.
    """

    def __init__(
        self,
        model: str | None = None,
        max_client_batch_size: int = 32,
        port: int = 0,
        logits_fn: Callable[[str, str], list[float]] | None = None,
        id2label: dict[int, str] | None = None,
    ) -> None:
        self.model_id = str(model or "fake-logits")
        self.logits_fn = logits_fn
        if logits_fn is None:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            self._torch = torch
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_id)
            self.model = AutoModelForSequenceClassification.from_pretrained(self.model_id).eval()
            id2label = dict(self.model.config.id2label)
        self.id2label = {int(k): str(v) for k, v in (id2label or {0: "LABEL_0"}).items()}
        self.max_client_batch_size = max_client_batch_size
        self.port = port
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def start(self) -> FakeTeiServer:
        """Listen on ``port`` (0: a free one) of 127.0.0.1 and serve in a daemon thread."""
        if self.port == 0:
            return super().start()
        from rag_experiments.fakes import local_server

        self._httpd = local_server._Server(("127.0.0.1", self.port), self._handler())
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        return _make_handler(self)

    def logits(self, pairs: list[tuple[str, ...]], truncate: bool) -> list[list[float]]:
        """The model's logits of each input (a pair or one text)."""
        if self.logits_fn is not None:
            return [list(self.logits_fn(p[0], p[-1])) for p in pairs]
        firsts = [p[0] for p in pairs]
        seconds = [p[1] for p in pairs] if all(len(p) == 2 for p in pairs) else None
        enc = self.tokenizer(
            firsts, seconds, truncation=bool(truncate), padding=True, return_tensors="pt"
        )
        with self._lock, self._torch.inference_mode():
            return self.model(**enc).logits.float().tolist()

    @staticmethod
    def scores(logits: list[float], raw: bool) -> list[float]:
        """TEI's scores: raw logits, a sigmoid of one logit, or the softmax of several."""
        if raw:
            return list(logits)
        if len(logits) == 1:
            return [1.0 / (1.0 + math.exp(-logits[0]))]
        top = max(logits)
        exps = [math.exp(v - top) for v in logits]
        return [e / sum(exps) for e in exps]

    def predict(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The answer to a ``/predict`` body: ``(status, json)``."""
        inputs = body.get("inputs")
        single = isinstance(inputs, str) or (
            isinstance(inputs, list) and inputs and all(isinstance(x, str) for x in inputs)
        )
        batch = [[inputs] if isinstance(inputs, str) else inputs] if single else inputs
        if (
            not isinstance(batch, list)
            or not batch
            or not all(isinstance(x, list) and 1 <= len(x) <= 2 for x in batch)
        ):
            return 422, {
                "error": "inputs must be a string, a pair or a batch",
                "error_type": "Validation",
            }
        if len(batch) > self.max_client_batch_size:
            return 413, {"error": f"batch size {len(batch)} > {self.max_client_batch_size}"}
        raw = bool(body.get("raw_scores", False))
        out = []
        for row in self.logits([tuple(x) for x in batch], bool(body.get("truncate", False))):
            preds = [
                {"score": s, "label": self.id2label.get(i, str(i))}
                for i, s in enumerate(self.scores(row, raw))
            ]
            out.append(sorted(preds, key=lambda p: -p["score"]))
        return 200, out[0] if single else out

    def rerank(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The answer to a ``/rerank`` body: ``(status, json)``."""
        query, texts = body.get("query"), body.get("texts")
        if not isinstance(query, str) or not isinstance(texts, list) or not texts:
            return 422, {"error": "query must be a string and texts a non-empty list"}
        if len(texts) > self.max_client_batch_size:
            return 413, {"error": f"batch size {len(texts)} > {self.max_client_batch_size}"}
        raw = bool(body.get("raw_scores", False))
        rows = self.logits([(query, t) for t in texts], bool(body.get("truncate", False)))
        ranks = [{"index": i, "score": self.scores(r[:1], raw)[0]} for i, r in enumerate(rows)]
        return 200, sorted(ranks, key=lambda r: -r["score"])


def _make_handler(server: FakeTeiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            return

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/info":
                kind = "reranker" if len(server.id2label) == 1 else "classifier"
                self._send(200, {"model_id": server.model_id, "model_type": {kind: {}}})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            routes = {"/predict": server.predict, "/rerank": server.rerank}
            if self.path not in routes:
                self._send(404, {"error": "not found"})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(422, {"error": "body is not JSON"})
                return
            with server._lock:
                server.requests += 1
                server.bodies.append(body)
            self._send(*routes[self.path](body if isinstance(body, dict) else {}))

    return Handler


def main() -> None:
    """``python -m rag_experiments.fakes.tei_server MODEL_FOLDER [--port N]``: serve until
    interrupted, printing the root URL."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    server = FakeTeiServer(args.model, port=args.port).start()
    print(server.root, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
