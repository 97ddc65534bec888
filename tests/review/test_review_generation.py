"""Generation behind the review app: the generator's progress and cancel hooks, the fake's
extractive mode, the form → config composition, the model check before any work, and the
background job (progress, cancel, a never-silent empty result)."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from rag_experiments.chunking.semantic import SemanticChunker
from rag_experiments.embedding.hash import HashEmbedder
from rag_experiments.errors import ConfigError, LLMError, ReviewError
from rag_experiments.generate.checkpoint import Checkpoint
from rag_experiments.generate.docs import load_docs
from rag_experiments.generate.filters import QA_FILTERS, first_rejection
from rag_experiments.generate.generator import (
    DatasetGenerator,
    GenerationProgress,
    GenerationSettings,
)
from rag_experiments.generate.prompts import QAPair, UnanswerableQuestion, qa_messages
from rag_experiments.llm.fake import FakeChat
from rag_experiments.locations import CONF_DIR
from rag_experiments.review.app import TOKEN_HEADER, create_app
from rag_experiments.review.options import (
    GenerateRequest,
    GenerationOptions,
    compose_generate_config,
)
from rag_experiments.review.preflight import check_model
from rag_experiments.review.workspace import Workspace

PARAGRAPH = (
    "Requests for {topic} are reviewed by the {role} within {days} working days. The {role} "
    "records each decision about {topic} in the {register} register, and an escalation goes "
    "to the director when the deadline for {topic} is missed or the request is incomplete."
)
TOPICS = [
    ("laptops", "asset officer", 3, "hardware"),
    ("badges", "security desk", 2, "access"),
    ("backups", "storage team", 5, "recovery"),
    ("licences", "procurement clerk", 4, "purchasing"),
]


def _write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, (topic, role, days, register) in enumerate(TOPICS):
        (folder / f"policy-{i}.md").write_text(
            f"# {topic.title()}\n\n"
            + PARAGRAPH.format(topic=topic, role=role, days=days, register=register)
            + "\n",
            encoding="utf-8",
        )
    return folder


def _generator(chat: Any, **settings: Any) -> DatasetGenerator:
    base: dict[str, Any] = {
        "n": 2,
        "n_unanswerable": 0,
        "min_chunk_words": 10,
        "max_concurrency": 1,
        "types": ("procedural", "compliance"),
    }
    base.update(settings)
    return DatasetGenerator(
        chat,
        embedder=HashEmbedder(dim=256),
        chunker=SemanticChunker(size=800, min_size=200),
        settings=GenerationSettings(**base),
        progress=False,
    )


# --- generator hooks -------------------------------------------------------------------------


def test_on_progress_reports_accepted_rejected_and_remaining_per_type(tmp_path: Path) -> None:
    source = load_docs(_write_docs(tmp_path / "docs"))
    seen: list[GenerationProgress] = []
    summary = _generator(FakeChat(extractive=True)).run(
        source, tmp_path / "out", on_progress=seen.append
    )
    # n=2 over 2 types, attempt_factor 2: 4 attempts planned (2 per type); the first two
    # (one per type) are accepted and the run stops.
    assert [(p.attempts_done, p.accepted, p.remaining) for p in seen] == [
        (0, {}, {"procedural": 2, "compliance": 2}),
        (1, {"procedural": 1}, {"procedural": 1, "compliance": 2}),
        (2, {"procedural": 1, "compliance": 1}, {"procedural": 1, "compliance": 1}),
    ]
    last = seen[-1]
    assert last.attempts_planned == 4 and last.n_wanted == 2 and last.n_accepted == 2
    assert last.rejected == {} and last.errors == 0 and last.phase == "answerable"
    assert last.rejected_by_reason == {}
    assert summary.accepted_by_type == last.accepted and not summary.interrupted


def test_cancel_stops_like_ctrl_c_and_a_rerun_resumes(tmp_path: Path) -> None:
    source = load_docs(_write_docs(tmp_path / "docs"))
    cancel = threading.Event()

    def stop_after_first(progress: GenerationProgress) -> None:
        if progress.n_accepted == 1:
            cancel.set()

    chat = FakeChat(extractive=True)
    stopped = _generator(chat, n=4).run(
        source, tmp_path / "out", on_progress=stop_after_first, cancel=cancel
    )
    assert stopped.interrupted and stopped.n_accepted == 1 and chat.calls == 1
    assert len(Checkpoint(tmp_path / "out").load().samples) == 1  # on disk
    resumed = _generator(FakeChat(extractive=True), n=4).run(source, tmp_path / "out")
    assert not resumed.interrupted and resumed.n_accepted == 4 and resumed.n_resumed == 1


# --- the fake's extractive mode --------------------------------------------------------------


def test_extractive_fake_answers_from_the_passage_and_passes_the_filters() -> None:
    passage = PARAGRAPH.format(topic="laptops", role="asset officer", days=3, register="hardware")
    chat = FakeChat(extractive=True)
    messages = qa_messages("procedural", [passage])
    reply = chat.complete(messages, QAPair)
    pair = reply.parsed
    assert isinstance(pair, QAPair)
    assert pair.answer in passage and len(pair.answer.split()) >= 12  # one whole sentence
    assert pair.question.startswith("What does the guidance say about")
    assert (
        first_rejection(
            {
                "question": pair.question,
                "answer": pair.answer,
                "question_type": "procedural",
                "answerable": True,
                "contexts": [passage],
            },
            QA_FILTERS,
        )
        is None
    )
    assert chat.complete(messages, QAPair).text == reply.text  # deterministic
    two = chat.complete(
        qa_messages("multi_hop", [passage, passage.replace("laptops", "desks")]), QAPair
    ).parsed
    assert isinstance(two, QAPair) and "desks" in two.answer and "laptops" in two.answer
    unanswerable = chat.complete(
        [{"role": "user", "content": f"Passage:\n{passage}\n\nWrite a question."}],
        UnanswerableQuestion,
    ).parsed
    assert isinstance(unanswerable, UnanswerableQuestion)
    assert unanswerable.question.endswith("on overseas secondments?")


def test_the_fake_without_extractive_mode_is_unchanged() -> None:
    with pytest.raises(LLMError, match="no scripted response for QAPair"):
        FakeChat().complete(qa_messages("procedural", ["Some passage."]), QAPair)
    scripted = FakeChat(responses={"QAPair": {"question": "Q?", "answer": "A."}}, extractive=True)
    assert scripted.complete(qa_messages("procedural", ["x"]), QAPair).parsed == QAPair(
        question="Q?", answer="A."
    )  # a script wins over extraction
    script = json.dumps({"responses": {}, "text": None}, sort_keys=True, default=str)
    assert FakeChat().describe()["digest"] == hashlib.sha256(script.encode()).hexdigest()[:16]
    assert FakeChat(extractive=True).describe()["digest"] != FakeChat().describe()["digest"]


# --- form → config ---------------------------------------------------------------------------


@pytest.mark.slow
def test_the_form_composes_the_generate_config(tmp_path: Path) -> None:
    space = Workspace(tmp_path / "ws")
    options = GenerationOptions.from_args(CONF_DIR, ["llm=ollama", "embedder=hash"])
    assert options.default_llm == "ollama" and options.overrides == ["embedder=hash"]
    assert set(options.llm_options) == {"embedded", "fake", "ollama", "openai"}
    assert options.defaults["ollama"] == {
        "model": "llama3.1:8b",
        "base_url": "http://127.0.0.1:11434",
    }
    assert options.defaults["embedded"] == {"model_path": ""} and options.defaults["fake"] == {}

    request = GenerateRequest(
        n=5,
        n_unanswerable=1,
        types=["procedural"],
        llm="ollama",
        model="qwen2.5:7b",
        base_url="http://127.0.0.1:9999",
    )
    cfg = compose_generate_config(request, options, space)
    assert cfg.llm.model == "qwen2.5:7b" and cfg.llm.base_url == "http://127.0.0.1:9999"
    assert cfg.judge.model == "qwen2.5:7b" and cfg.judge._target_.endswith("OllamaChat")
    assert cfg.embedder._target_.endswith("HashEmbedder")
    assert (cfg.n, cfg.n_unanswerable, list(cfg.types)) == (5, 1, ["procedural"])
    assert cfg.docs == str(space.uploads_dir) and cfg.out == str(space.generation_dir)
    assert cfg.run_name == "review-ws" and cfg.progress is False

    fake = compose_generate_config(GenerateRequest(llm="fake"), options, space)
    assert fake.llm.extractive is True
    assert fake.judge.responses.AnswerCheck == {"answered": False}
    with pytest.raises(ReviewError, match="not one of"):
        compose_generate_config(GenerateRequest(llm="gpt"), options, space)
    with pytest.raises(ValueError, match="types"):
        GenerateRequest(types=["trivia"])
    with pytest.raises(ValueError, match="http"):
        GenerateRequest(base_url="file:///etc/passwd")


# --- the model check -------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _node(target: str, **values: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create({"_target_": f"rag_experiments.llm.{target}", **values})


def test_the_model_check_names_the_problem_and_the_fix(
    httpserver: HTTPServer, tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ReviewError, match=f"cannot reach {url}/api/tags .*ollama serve"):
        check_model(_node("ollama.OllamaChat", model="llama3.1:8b", base_url=url))
    with pytest.raises(ReviewError, match="no generator model name"):
        check_model(_node("ollama.OllamaChat", model=" ", base_url=url))
    with pytest.raises(ReviewError, match="llama_cpp.server"):
        check_model(_node("openai_compat.OpenAICompatChat", model="m", base_url=url + "/v1"))

    httpserver.expect_request("/api/tags").respond_with_json(
        {
            "models": [
                {"name": "llama3.1:8b", "model": "llama3.1:8b"},
                {"name": "qwen2.5:latest", "model": "qwen2.5:latest"},
            ]
        }
    )
    base = httpserver.url_for("").rstrip("/")
    check_model(_node("ollama.OllamaChat", model="llama3.1:8b", base_url=base))
    check_model(_node("ollama.OllamaChat", model="qwen2.5", base_url=base))  # :latest
    with pytest.raises(ReviewError, match="ollama pull mistral"):
        check_model(_node("ollama.OllamaChat", model="mistral", base_url=base))
    httpserver.expect_request("/v1/models").respond_with_json({"data": [{"id": "m"}]})
    check_model(_node("openai_compat.OpenAICompatChat", model="m", base_url=base + "/v1"))
    # a key variable that is named but not set is refused as the model itself would refuse it
    n_requests = len(httpserver.log)
    with pytest.raises(ConfigError, match="RX_UNSET_KEY_FOR_TEST .llm.api_key_env. is not set"):
        check_model(
            _node(
                "openai_compat.OpenAICompatChat",
                model="m",
                base_url=base + "/v1",
                api_key_env="RX_UNSET_KEY_FOR_TEST",
            )
        )
    assert len(httpserver.log) == n_requests  # refused before any request

    with pytest.raises(ReviewError, match="does not exist"):
        check_model(_node("embedded.EmbeddedChat", model_path=str(tmp_path / "none.gguf")))
    check_model(_node("embedded.EmbeddedChat", model_path=None))  # the bundled GGUF
    check_model(_node("fake.FakeChat"))


# --- the background job through the app ------------------------------------------------------


@pytest.fixture
def app_client(tmp_path: Path) -> Callable[..., tuple[Any, dict[str, str]]]:
    """``app_client(*overrides)``: an app with the test docs uploaded; returns the client and
    the token header."""

    def _make(*overrides: str) -> tuple[Any, dict[str, str]]:
        app = create_app(
            tmp_path / "ws",
            overrides=[
                "embedder=hash",
                "min_chunk_words=10",
                f"paths.cache_dir={tmp_path}/cache",
                f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
                *overrides,
            ],
        )
        client = app.test_client()
        headers = {TOKEN_HEADER: app.config["REVIEW_TOKEN"]}
        docs = _write_docs(tmp_path / "docs")
        files = [(io.BytesIO(p.read_bytes()), p.name) for p in sorted(docs.iterdir())]
        assert client.post("/upload", data={"files": files}, headers=headers).status_code == 200
        return client, headers

    return _make


def _wait(client: Any, done: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = client.get("/progress").json
        if done(body):
            return body
        time.sleep(0.05)
    raise AssertionError(f"timed out; last progress: {body}")


def test_an_unset_or_unreachable_model_is_refused_before_any_job_starts(
    app_client: Callable[..., tuple[Any, dict[str, str]]],
) -> None:
    client, headers = app_client()
    url = f"http://127.0.0.1:{_free_port()}"
    down = client.post(
        "/generate",
        headers=headers,
        json={"llm": "ollama", "model": "llama3.1:8b", "base_url": url},
    )
    assert down.status_code == 400
    assert down.json["message"].startswith(f"cannot reach {url}/api/tags")
    unset = client.post(
        "/generate", headers=headers, json={"llm": "openai", "model": "", "base_url": url + "/v1"}
    )
    assert unset.status_code == 400 and "no generator model name" in unset.json["message"]
    bad = client.post("/generate", headers=headers, json={"llm": "fake", "n": 0})
    assert bad.status_code == 400 and "n:" in bad.json["message"]
    progress = client.get("/progress").json
    assert progress["job"]["state"] == "idle" and progress["n_cards"] == 0  # nothing started


@pytest.mark.slow
def test_cancel_stops_the_job_and_the_accepted_pairs_stay(
    app_client: Callable[..., tuple[Any, dict[str, str]]], tmp_path: Path
) -> None:
    client, headers = app_client("llm=fake", "llm.delay_s=0.2", "max_concurrency=1")
    started = client.post("/generate", headers=headers, json={"llm": "fake", "n": 8})
    assert started.status_code == 202 and started.json["state"] == "running"
    assert client.post("/generate", headers=headers, json={"llm": "fake"}).status_code == 409
    _wait(client, lambda body: body["n_cards"] >= 1)
    assert client.post("/cancel", headers=headers).json["cancelled"] is True
    body = _wait(client, lambda body: body["job"]["state"] != "running")
    job = body["job"]
    assert job["state"] == "cancelled" and job["message"].startswith("Cancelled;")
    assert 1 <= job["n_accepted"] < 8
    samples = Checkpoint(tmp_path / "ws" / "generation").load().samples
    cards = client.get("/cards").json["cards"]
    assert [c["id"] for c in cards] == [s.id for s in samples] and len(cards) == job["n_accepted"]
    assert job["mlflow_url"].startswith("http://127.0.0.1:5000/#/experiments/")
    restarted = create_app(tmp_path / "ws", overrides=["embedder=hash"]).test_client()
    again = restarted.get("/progress").json  # the outcome and link survive a restart
    assert again["job"]["state"] == "cancelled" and again["job"]["mlflow_url"] == job["mlflow_url"]
    assert again["n_cards"] == len(cards)


@pytest.mark.slow
def test_a_generation_that_accepts_nothing_says_so_with_the_reasons(
    app_client: Callable[..., tuple[Any, dict[str, str]]],
) -> None:
    client, headers = app_client(
        "llm=fake", "+llm.responses.QAPair={question:'Why?',answer:'Because.'}"
    )
    assert (
        client.post(
            "/generate",
            headers=headers,
            json={"llm": "fake", "n": 2, "n_unanswerable": 0, "types": ["procedural"]},
        ).status_code
        == 202
    )
    job = _wait(client, lambda body: body["job"]["state"] != "running")["job"]
    assert job["state"] == "done" and job["n_accepted"] == 0
    # 4 attempts (n=2 x attempt_factor 2): the first is too short, the others too
    assert job["rejects_by_reason"] == {"question_too_short": 4}
    assert job["message"].startswith(
        "No pair was accepted. Rejected attempts by reason: question_too_short 4."
    )
    # the page saw the reasons while the job ran, and what it was doing before the first
    # attempt (the log lines of the job's thread), not only "Generating …"
    assert job["progress"]["rejected_by_reason"] == {"question_too_short": 4}
    assert job["stage"] and job["stage"] != "Generating …"


def test_the_review_form_defaults_to_the_clis_unanswerable_questions(
    app_client: Callable[..., tuple[Any, dict[str, str]]],
) -> None:
    from rag_experiments.generate.config import GenerateConf

    assert GenerateRequest().n_unanswerable == GenerateConf.n_unanswerable == 4
    client, _ = app_client("llm=fake")
    page = client.get("/").get_data(as_text=True)
    assert 'name="n_unanswerable" value="4"' in page


@pytest.mark.slow
def test_uploads_that_cannot_be_read_are_named_on_the_page(
    app_client: Callable[..., tuple[Any, dict[str, str]]],
) -> None:
    client, headers = app_client("llm=fake")
    fake_pdf = {"files": (io.BytesIO(b"this is text, not a PDF"), "scan.pdf")}
    assert client.post("/upload", data=fake_pdf, headers=headers).status_code == 200
    assert (
        client.post(
            "/generate", headers=headers, json={"llm": "fake", "n": 1, "types": ["procedural"]}
        ).status_code
        == 202
    )
    job = _wait(client, lambda body: body["job"]["state"] != "running")["job"]
    assert job["state"] == "done"
    assert "Not read (1 file(s), left out of the corpus): scan.pdf: " in job["message"]
    assert job["message"].endswith("Remove or fix them and upload again.")
