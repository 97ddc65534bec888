"""The grading app of ``rag-exp review --run`` through Flask's test client, on a fake store:
blind until submitted, labels on disk as given and replayed into MLflow on a restart, the
review app's protections (token, Host)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rag_experiments.review import grading as grading_module
from rag_experiments.review.app import TOKEN_HEADER
from rag_experiments.review.grading import create_grading_app
from rag_experiments.tracking.record import PerQueryRow
from rag_experiments.tracking.store import RunRecord

RUN = "0123456789abcdef0123456789abcdef"


class FakeStore:
    """What the grading app uses of :class:`RunStore`: six rows judged 1 1 1 0 0 0."""

    uri = "sqlite:///fake.db"

    def __init__(self) -> None:
        self.uploads: list[tuple[str, Path, str]] = []

    def read_rows(self, run_id: str) -> list[PerQueryRow]:
        return [
            PerQueryRow(
                id=f"q{i}",
                question_type="factual" if i % 2 else "procedural",
                user_input=f"question {i}",
                response=f"answer {i}",
                reference=f"reference {i}",
                retrieved_contexts=[f"context {i}"],
                values={"faithfulness": 1.0 if i < 3 else 0.0},
            )
            for i in range(6)
        ]

    def log_artifacts(self, run_id: str, folder: Path, path: str) -> None:
        self.uploads.append((run_id, Path(folder), path))

    def get_run(self, run_id: str) -> RunRecord:
        return RunRecord(run_id, "1", "e", "", "FINISHED", None, None, {}, {}, {}, "")


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(grading_module, "log_human_label", lambda *a: calls.append(a) or "ok")
    return calls


def _post(client: Any, app: Any, body: dict, token: bool = True) -> Any:
    headers = {TOKEN_HEADER: app.config["REVIEW_TOKEN"]} if token else {}
    return client.post("/label", json=body, headers=headers)


def test_blind_until_submitted_then_judge_and_agreement(tmp_path: Path, logged: list) -> None:
    store = FakeStore()
    app = create_grading_app(store, RUN, tmp_path, n=4, seed=1)  # type: ignore[arg-type]
    client = app.test_client()
    page = client.get("/")
    assert page.status_code == 200 and b"grade.js" in page.data
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    items = client.get("/items?grader=ana").json["items"]
    assert len(items) == 4 and all("judge" not in it for it in items)
    assert set(items[0]) >= {"question", "contexts", "answer", "reference"}
    first = items[0]["id"]
    reply = _post(client, app, {"grader": "ana", "id": first, "labels": {"faithfulness": 1}})
    assert reply.status_code == 200
    judge = 1 if int(first[1:]) < 3 else 0
    assert reply.json["judge"] == {"faithfulness": judge}
    (row,) = reply.json["agreement"]
    assert (row["a"], row["b"], row["n"], row["raw"]) == ("ana", "judge", 1, float(judge == 1))
    after = {it["id"]: it for it in client.get("/items?grader=ana").json["items"]}
    assert after[first]["judge"] == {"faithfulness": judge}
    assert after[first]["labels"] == {"faithfulness": 1.0}
    # another grader still sees that row blind
    assert all("judge" not in it for it in client.get("/items?grader=bob").json["items"])
    # the label is on disk as given, put on the trace and the file logged on the run
    path = tmp_path / RUN / "labels.jsonl"
    (line,) = [json.loads(x) for x in path.read_text().splitlines()]
    assert {k: line[k] for k in ("id", "metric", "value", "grader", "run_id")} == {
        "id": first, "metric": "faithfulness", "value": 1.0, "grader": "ana", "run_id": RUN,
    }  # fmt: skip
    assert logged == [(store.uri, RUN, first, "faithfulness", 1.0, "ana")]
    assert store.uploads == [(RUN, path.parent, "grading")]


def test_refusals_and_the_protections(tmp_path: Path, logged: list) -> None:
    app = create_grading_app(FakeStore(), RUN, tmp_path, n=4)  # type: ignore[arg-type]
    client = app.test_client()
    sid = client.get("/items?grader=ana").json["items"][0]["id"]
    ok = {"grader": "ana", "id": sid, "labels": {"faithfulness": 1}}
    assert _post(client, app, ok, token=False).status_code == 403
    assert client.get("/", headers={"Host": "evil.example:80"}).status_code == 400
    for body, message in (
        ({**ok, "grader": ""}, "give your name"),
        ({**ok, "id": "nope"}, "not in this grading sample"),
        ({**ok, "labels": {}}, "give a verdict for each of faithfulness"),
        ({**ok, "labels": {"faithfulness": 2}}, "verdicts are 1"),
        ({**ok, "labels": {"faithfulness": True}}, "verdicts are 1"),
    ):
        reply = _post(client, app, body)
        assert reply.status_code == 400 and message in reply.json["message"], body
    assert not (tmp_path / RUN / "labels.jsonl").exists()


def test_a_restart_replays_the_file_once(tmp_path: Path, logged: list) -> None:
    app = create_grading_app(FakeStore(), RUN, tmp_path, n=3)  # type: ignore[arg-type]
    client = app.test_client()
    ids = [it["id"] for it in client.get("/items?grader=ana").json["items"]]
    for sid in ids:
        _post(client, app, {"grader": "ana", "id": sid, "labels": {"faithfulness": 0}})
    assert len(logged) == 3
    logged.clear()
    again = create_grading_app(FakeStore(), RUN, tmp_path, n=3)  # type: ignore[arg-type]
    # the new process does not know what reached MLflow: it replays every label in force
    # (the tracking helper keeps a label already there as it is)
    assert sorted(c[2] for c in logged) == sorted(ids)
    items = again.test_client().get("/items?grader=ana").json["items"]
    assert all(it["judge"] is not None for it in items)  # all submitted: judge shown
