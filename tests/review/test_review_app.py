"""The review app through Flask's test client: safe uploads (names, size, types), escaping,
edits persisted across a restart, save validation, /stats by hand, the security headers."""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from rag_experiments.data.jsonl import write_jsonl
from rag_experiments.errors import ConfigError, ReviewError
from rag_experiments.records import Sample
from rag_experiments.review.app import TOKEN_HEADER, create_app
from rag_experiments.review.state import ReviewState
from rag_experiments.review.workspace import Workspace

CONTEXT = (
    "The security manager approves every request for remote access to the finance "
    "system within two working days and records the decision in the access register."
)
GOOD_Q = "Who approves requests for remote access to the finance system?"
GOOD_A = (
    "The security manager approves every request for remote access to the finance "
    "system within two working days."
)
SCRIPT = "<script>alert(1)</script>"


def _sample(sid: str, question: str, answer: str = GOOD_A, **extra: Any) -> Sample:
    fields: dict[str, Any] = {
        "reference_contexts": [CONTEXT],
        "reference_doc_ids": ["policy"],
        "question_type": "role_responsibility",
        "metadata": {"source": "policy.pdf", "page": 2},
    }
    fields.update(extra)
    return Sample(id=sid, user_input=question, reference=answer, **fields)


class Client:
    """The test client with the page's token on every request that changes something."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.http: FlaskClient = app.test_client()
        self.headers = {TOKEN_HEADER: app.config["REVIEW_TOKEN"]}

    def get(self, url: str) -> Any:
        return self.http.get(url)

    def post(self, url: str, **kwargs: Any) -> Any:
        return self.http.post(url, headers=self.headers, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> Any:
        return self.http.patch(url, headers=self.headers, **kwargs)


@pytest.fixture
def make_client(tmp_path: Path) -> Callable[..., Client]:
    """``make_client(samples=None, generated=None, **create_app kwargs)`` on workspace
    ``tmp_path/ws``: ``samples`` as a loaded dataset (cards of origin ``dataset``),
    ``generated`` as the workspace's generation output (origin ``generation``)."""

    def _make(
        samples: list[Sample] | None = None, generated: list[Sample] | None = None, **kwargs: Any
    ) -> Client:
        dataset = None
        if samples is not None:
            dataset = write_jsonl(samples, tmp_path / "in.jsonl")
        if generated is not None:
            write_jsonl(generated, tmp_path / "ws" / "generation" / "eval.jsonl")
        kwargs.setdefault(
            "overrides",
            [
                "embedder=hash",
                f"paths.cache_dir={tmp_path}/cache",
                f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
            ],
        )
        return Client(create_app(tmp_path / "ws", dataset=dataset, **kwargs))

    return _make


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# --- uploads ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["../../etc/x.pdf", "..\\..\\etc\\x.pdf", "sub/x.pdf", "x..pdf", "/etc/x.pdf"]
)
def test_an_upload_name_holding_a_path_is_refused_and_nothing_is_written(
    make_client: Callable[..., Client], tmp_path: Path, name: str
) -> None:
    client = make_client()
    before = _files(tmp_path)
    response = client.post("/upload", data={"files": (io.BytesIO(b"%PDF-1.4 x"), name)})
    assert response.status_code == 400
    assert "must not contain" in response.json["message"]
    assert _files(tmp_path) == before  # nothing written, inside or outside the workspace
    assert not (tmp_path / "etc").exists() and not Path("/etc/x.pdf").exists()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("tool.exe", "only .pdf, .docx, .md"),
        ("notes.txt", "only .pdf, .docx, .md"),
        ("???", "no usable characters"),
        (".pdf", "only .pdf, .docx, .md"),
    ],
)  # "pdf" once safe
def test_a_wrong_type_or_an_empty_name_is_refused(
    make_client: Callable[..., Client], name: str, why: str
) -> None:
    client = make_client()
    response = client.post("/upload", data={"files": (io.BytesIO(b"data"), name)})
    assert response.status_code == 400 and why in response.json["message"]
    assert client.app.extensions["rag_exp_review"]["workspace"].uploads() == []


def test_uploads_get_safe_unique_names_inside_the_workspace(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    first = client.post(
        "/upload",
        data={
            "files": [
                (io.BytesIO(b"# A\n"), "My Policy.md"),
                (io.BytesIO(b"# B\n"), "My Policy.md"),
            ]
        },
    )
    assert first.status_code == 200
    assert first.json["stored"] == ["My_Policy.md", "My_Policy-2.md"]
    space: Workspace = client.app.extensions["rag_exp_review"]["workspace"]
    assert [p.name for p in space.uploads()] == ["My_Policy-2.md", "My_Policy.md"]
    assert all(p.parent == space.uploads_dir for p in space.uploads())
    assert (space.uploads_dir / "My_Policy.md").read_bytes() == b"# A\n"


def test_awkward_names_are_stored_under_usable_names_and_never_share_a_document_id(
    make_client: Callable[..., Client],
) -> None:
    """Non-ASCII and over-long names, and names whose stem (the corpus document id) is taken
    by another upload of any extension."""
    client = make_client()
    long_name = "x" * 300 + ".md"
    response = client.post(
        "/upload",
        data={
            "files": [
                (io.BytesIO(b"# A\n"), "中文.md"),
                (io.BytesIO(b"# B\n"), long_name),
                (io.BytesIO(b"# C\n"), "x.md"),
                (io.BytesIO(b"# D\n"), "x.MD"),
                (io.BytesIO(b"# E\n"), "policy.md"),
                (io.BytesIO(b"# F\n"), "policy.docx"),
            ]
        },
    )
    assert response.status_code == 200
    assert response.json["stored"] == [
        "upload.md",
        "x" * 100 + ".md",
        "x.md",
        "x-2.MD",
        "policy.md",
        "policy-2.docx",
    ]
    space: Workspace = client.app.extensions["rag_exp_review"]["workspace"]
    stems = [p.stem for p in space.uploads()]
    assert len(stems) == len(set(stems)) == 6


def test_deeply_nested_json_is_a_400_not_a_500(make_client: Callable[..., Client]) -> None:
    client = make_client([_sample("q1", GOOD_Q)])
    body = "[" * 100_000 + "]" * 100_000
    response = client.patch("/cards/q1", data=body, content_type="application/json")
    assert response.status_code == 400 and "nests too deeply" in response.json["message"]


def test_an_output_folder_or_a_file_as_workspace_is_a_clear_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a folder"):
        create_app(tmp_path / "ws", out=tmp_path)
    (tmp_path / "afile").write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot use .* as the review workspace"):
        create_app(tmp_path / "afile")


class _LazyMultipart(io.RawIOBase):
    """A seekable multipart body with one file of ``size`` zero bytes, made while it is read
    (never held in memory); ``consumed`` counts the bytes read from it."""

    def __init__(self, boundary: str, filename: str, size: int) -> None:
        self.head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; '
            f'filename="{filename}"\r\nContent-Type: application/pdf\r\n\r\n'
        ).encode()
        self.tail = f"\r\n--{boundary}--\r\n".encode()
        self.size = size
        self.length = len(self.head) + size + len(self.tail)
        self.pos = 0
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = (
            offset if whence == 0 else (self.pos + offset if whence == 1 else self.length + offset)
        )
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = max(0, min(len(view), self.length - self.pos))
        done = 0
        while done < n:
            pos = self.pos + done
            if pos < len(self.head):
                chunk = self.head[pos : pos + n - done]
            elif pos < len(self.head) + self.size:
                chunk = bytes(min(n - done, len(self.head) + self.size - pos))
            else:
                start = pos - len(self.head) - self.size
                chunk = self.tail[start : start + n - done]
            view[done : done + len(chunk)] = chunk
            done += len(chunk)
        self.pos += n
        self.consumed += n
        return n


def test_a_100_mb_upload_is_refused_with_413_before_it_is_read(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()  # default limit: 50 MB
    body = _LazyMultipart("xyzBOUNDARYxyz", "big.pdf", 100 * 2**20)
    response = client.post(
        "/upload", input_stream=body, content_type="multipart/form-data; boundary=xyzBOUNDARYxyz"
    )
    assert response.status_code == 413
    assert "larger than the limit of 50 MB" in response.json["message"]
    assert body.consumed < 2**20  # refused from Content-Length, not after reading 100 MB
    assert client.app.extensions["rag_exp_review"]["workspace"].uploads() == []


def test_the_per_file_limit_is_checked_while_streaming(tmp_path: Path) -> None:
    space = Workspace(tmp_path / "ws")
    with pytest.raises(ReviewError) as caught:
        space.save_upload("big.pdf", io.BytesIO(b"x" * (3 * 2**20)), max_bytes=2 * 2**20)
    assert caught.value.status == 413 and "big.pdf" in str(caught.value)
    assert space.uploads() == [] and list((space.root / "tmp").iterdir()) == []
    stored = space.save_upload("ok.pdf", io.BytesIO(b"x" * 10), max_bytes=10)
    assert stored == space.uploads_dir / "ok.pdf" and stored.read_bytes() == b"x" * 10


def test_no_route_reads_outside_the_package_or_workspace(
    make_client: Callable[..., Client],
) -> None:
    client = make_client()
    for url in (
        "/static/../app.py",
        "/static/%2e%2e/app.py",
        "/static/..%2fapp.py",
        "/static/review.js/../../app.py",
    ):
        assert client.get(url).status_code == 404
    assert client.get("/static/review.js").status_code == 200


# --- request guards and headers --------------------------------------------------------------


def test_changes_need_the_page_token_and_a_loopback_host(
    make_client: Callable[..., Client],
) -> None:
    client = make_client([_sample("q1", GOOD_Q)])
    no_token = client.http.patch("/cards/q1", json={"status": "approved"})
    assert no_token.status_code == 403 and "X-Review-Token" in no_token.json["message"]
    wrong = client.http.patch(
        "/cards/q1", json={"status": "approved"}, headers={TOKEN_HEADER: "guess"}
    )
    assert wrong.status_code == 403
    rebound = client.http.get("/cards", headers={"Host": "attacker.example:8765"})
    assert rebound.status_code == 400  # DNS rebinding: Host is not a loopback name
    page = client.get("/")
    assert page.status_code == 200
    assert client.app.config["REVIEW_TOKEN"] in page.get_data(as_text=True)
    assert page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert client.app.debug is False


def test_a_script_in_a_pair_is_shown_escaped_and_returned_as_data(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(
        [
            _sample(
                "x1",
                f"{SCRIPT} Who approves remote access?",
                answer=f"Answer {SCRIPT}",
                reference_contexts=[f"Context {SCRIPT}"],
                metadata={"source": f"{SCRIPT}.pdf"},
            )
        ]
    )
    html = client.get("/").get_data(as_text=True)
    assert SCRIPT not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 4  # question, answer,
    # excerpt, source
    card = client.get("/cards").json["cards"][0]
    assert card["user_input"] == f"{SCRIPT} Who approves remote access?"
    assert card["reference_contexts"] == [f"Context {SCRIPT}"]
    script = (
        Path(__file__).parents[2] / "rag_experiments" / "review" / "static" / "review.js"
    ).read_text(encoding="utf-8")
    assert not re.search(
        r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write", script
    )  # the page writes text with textContent/value only


# --- cards: edit, persist, save --------------------------------------------------------------


def test_edits_are_persisted_and_seen_by_a_new_app_on_the_same_workspace(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    client = make_client([_sample("q1", GOOD_Q), _sample("q2", GOOD_Q.replace("Who", "Which"))])
    edited = "Which manager approves remote access to the finance system?"
    response = client.patch("/cards/q1", json={"user_input": edited, "status": "approved"})
    assert response.status_code == 200
    assert response.json["card"]["edited"] is True
    saved = json.loads((tmp_path / "ws" / "review_state.json").read_text(encoding="utf-8"))
    assert saved["cards"][0]["user_input"] == edited and saved["cards"][0]["status"] == "approved"

    again = make_client([_sample("q1", GOOD_Q)])  # a restart, same workspace and dataset
    cards = {c["id"]: c for c in again.get("/cards").json["cards"]}
    assert cards["q1"]["user_input"] == edited and cards["q1"]["status"] == "approved"
    assert cards["q1"]["original"]["user_input"] == GOOD_Q and len(cards) == 2
    back = again.patch("/cards/q1", json={"user_input": GOOD_Q})
    assert back.json["card"]["edited"] is False  # edited back to the original text

    assert again.patch("/cards/nope", json={"status": "approved"}).status_code == 404
    bad = again.patch("/cards/q1", json={"status": "maybe", "colour": "red"})
    assert bad.status_code == 400
    assert "status" in bad.json["message"] and "colour" in bad.json["message"]
    assert again.patch("/cards/q1", data="not json").status_code == 400
    bogus = again.patch("/cards/q1", json={"question_type": "bogus_type"})
    assert (
        bogus.status_code == 400
        and "'bogus_type' is not one of procedural" in bogus.json["message"]
    )
    assert again.patch("/cards/q1", json={"question_type": "timeline_sla"}).status_code == 200


def test_save_writes_only_approved_cards_with_edits_and_reports_failures_per_card(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    out = tmp_path / "reviewed.jsonl"
    client = make_client(
        generated=[
            _sample("q1", GOOD_Q),
            _sample(
                "q2",
                "How long does the security manager take to approve remote access?",
                question_type="timeline_sla",
            ),
            _sample("q3", "Which register records remote access decisions?"),
            _sample("q4", "Is it?", answer="Yes."),
        ],
        out=out,
    )
    assert client.post("/save").status_code == 400  # nothing approved yet
    edited = "Which manager approves every remote access request to the finance system?"
    client.patch("/cards/q1", json={"user_input": edited, "status": "approved"})
    client.patch("/cards/q2", json={"status": "approved"})
    client.patch("/cards/q3", json={"status": "rejected"})
    client.patch("/cards/q4", json={"status": "approved"})

    failed = client.post("/save")
    assert failed.status_code == 422 and failed.json["ok"] is False
    assert list(failed.json["failures"]) == ["q4"]
    problems = failed.json["failures"]["q4"]
    # "Is it?" (6 characters, no content word, opens with "Is"), answer "Yes." (1 word, not
    # in the passage): every filter that applies, not only the first
    assert {p.split(":")[0] for p in problems} == {
        "question_too_short",
        "answer_too_short",
        "too_few_content_words",
        "yes_no_question",
        "question_not_in_context",
        "answer_not_in_context",
    }
    assert not out.exists()

    client.patch("/cards/q4", json={"status": "rejected"})
    saved = client.post("/save")
    assert saved.status_code == 200 and saved.json["n_written"] == 2
    assert saved.json["path"] == str(out)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2"]
    assert rows[0]["user_input"] == edited and rows[0]["reference_contexts"] == [CONTEXT]
    assert rows[0]["metadata"]["review"]["edited"] is True
    assert rows[0]["metadata"]["review"]["original"]["user_input"] == GOOD_Q
    assert rows[1]["metadata"] == {
        "source": "policy.pdf",
        "page": 2,
        "review": {"status": "approved", "edited": False},
    }


def test_loaded_dataset_cards_skip_the_generators_heuristics_but_not_the_format(
    make_client: Callable[..., Client], tmp_path: Path
) -> None:
    """A human-written dataset (like the bundled sample) need not use the words of its passage
    or the generator's types; the format and the answerable flag are still checked."""
    out = tmp_path / "reviewed.jsonl"
    loose = "What does the team do about a suspected breach?"  # 0 words of CONTEXT
    client = make_client(
        [
            _sample("d1", loose, question_type="my_own_type"),
            _sample("d2", GOOD_Q.replace("Who", "Which")),
        ],
        out=out,
    )
    assert client.patch("/cards/d1", json={"question_type": "procedural"}).status_code == 200
    back = client.patch("/cards/d1", json={"question_type": "my_own_type"})
    assert back.status_code == 200  # a dataset's own type stays selectable
    client.patch("/cards/d1", json={"status": "approved"})
    saved = client.post("/save")
    assert saved.status_code == 200 and saved.json["n_written"] == 1
    assert json.loads(out.read_text(encoding="utf-8"))["question_type"] == "my_own_type"
    # flipping the flag does not make an answerable pair a valid unanswerable one
    client.patch("/cards/d2", json={"status": "approved", "answerable": False})
    refused = client.post("/save")
    assert refused.status_code == 422
    assert [p.split(":")[0] for p in refused.json["failures"]["d2"]] == ["unanswerable_with_source"]
    assert json.loads(out.read_text(encoding="utf-8"))["id"] == "d1"  # earlier file intact


def test_an_answerable_card_without_any_source_is_refused(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(
        [
            _sample(
                "u1",
                GOOD_Q,
                answer="The documents do not say.",
                reference_contexts=[],
                reference_doc_ids=[],
                answerable=False,
            )
        ]
    )
    client.patch("/cards/u1", json={"status": "approved", "answerable": True})
    refused = client.post("/save")
    assert refused.status_code == 422
    assert [p.split(":")[0] for p in refused.json["failures"]["u1"]] == [
        "answerable_without_source"
    ]


def test_save_refuses_an_exact_duplicate_among_the_approved(
    make_client: Callable[..., Client],
) -> None:
    client = make_client([_sample("q1", GOOD_Q), _sample("q2", GOOD_Q.upper())])
    for sid in ("q1", "q2"):
        client.patch(f"/cards/{sid}", json={"status": "approved"})
    response = client.post("/save")
    assert response.status_code == 422
    assert response.json["failures"] == {"q2": ["duplicate_exact: same question as q1"]}


def test_stats_match_counts_and_averages_computed_by_hand(
    make_client: Callable[..., Client],
) -> None:
    client = make_client(
        [
            Sample(
                id="a",
                user_input="one two three four",
                reference="a b c d e f",
                question_type="procedural",
            ),
            Sample(
                id="b",
                user_input="one two",
                reference="",
                question_type="compliance",
                answerable=False,
            ),
            Sample(
                id="c",
                user_input="one two three four five six",
                reference="x y",
                question_type="procedural",
            ),
        ]
    )
    client.patch("/cards/a", json={"status": "approved"})
    client.patch("/cards/b", json={"status": "rejected"})
    stats = client.get("/stats").json
    assert stats["total"] == 3
    assert stats["by_type"] == {"procedural": 2, "compliance": 1}
    assert stats["avg_question_words"] == pytest.approx((4 + 2 + 6) / 3)  # 4.0
    assert stats["avg_question_chars"] == pytest.approx((18 + 7 + 27) / 3)
    assert stats["avg_answer_words"] == pytest.approx((6 + 2) / 2)  # b has no reference
    assert stats["by_status"] == {"pending": 1, "approved": 1, "rejected": 1}
    assert stats["approved_by_type"] == {"procedural": 1} and stats["edited"] == 0
    client.patch("/cards/c", json={"user_input": "one two three"})
    stats = client.get("/stats").json
    assert stats["avg_question_words"] == pytest.approx((4 + 2 + 3) / 3)
    assert stats["edited"] == 1


def test_an_unreadable_state_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "review_state.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ReviewError, match="another --workspace"):
        ReviewState(path)


def test_the_command_serves_a_dataset_on_loopback_and_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx

    from rag_experiments.cli import main
    from rag_experiments.review.server import review_command

    with pytest.raises(SystemExit) as help_exit:
        main(["review", "--help"])
    assert help_exit.value.code == 0 and "--max-upload-mb" in capsys.readouterr().out
    with pytest.raises(SystemExit) as missing:
        review_command([f"dataset={tmp_path}/nope.jsonl"])
    assert missing.value.code == 2
    assert f"dataset={tmp_path}/nope.jsonl: no such file" in capsys.readouterr().err

    dataset = write_jsonl([_sample("q1", GOOD_Q)], tmp_path / "in.jsonl")
    stop = threading.Event()
    codes: list[int] = []
    args = [
        "--port",
        "0",
        "--workspace",
        str(tmp_path / "ws"),
        f"dataset={dataset}",
        "embedder=hash",
        f"paths.cache_dir={tmp_path}/cache",
    ]
    thread = threading.Thread(target=lambda: codes.append(review_command(args, stop)))
    thread.start()
    try:
        printed = ""
        for _ in range(200):
            printed += capsys.readouterr().out
            if "open http://" in printed:
                break
            time.sleep(0.05)
        url = re.search(r"open (http://\S+)", printed).group(1)  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health").json()["cards"] == 1
        assert httpx.get(f"{url}/cards").json()["cards"][0]["user_input"] == GOOD_Q
    finally:
        stop.set()
        thread.join(timeout=10)
    assert codes == [0] and "stopped" in capsys.readouterr().out


def test_a_generated_pair_with_the_id_of_a_reviewed_one_gets_its_own_card(tmp_path: Path) -> None:
    state = ReviewState(tmp_path / "state.json")
    assert state.add_samples([_sample("gen-0001", GOOD_Q)], "dataset") == 1
    other = "Which register records remote access decisions?"
    assert state.add_samples([_sample("gen-0001", other)], "generation") == 1
    assert state.add_samples([_sample("gen-0001", other)], "generation") == 0  # already there
    cards = state.cards()
    assert [c.id for c in cards] == ["gen-0001", "generation-gen-0001"]
    assert cards[1].sample_fields()["id"] == "generation-gen-0001"  # unique when saved
    assert [c.id for c in ReviewState(tmp_path / "state.json").cards()] == [c.id for c in cards]
