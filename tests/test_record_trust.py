"""What a run leaves behind can be trusted (issue 27): one store per sweep whatever
``hydra.job.chdir`` says, a caveat naming only the models used, no stale error on a resumed
run and no run for a refused command, no secret copied anywhere, Unicode sentence ends, a
checked index, and a clear word for the smaller cases. Every input is made here."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import mlflow
import pytest
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from pytest_httpserver import HTTPServer

RUN_TIMEOUT_S = 300

DOCS = {
    "alpha": "The alpha office opens at nine. Visitors sign in at the front desk.",
    "beta": "The beta lab keeps samples cold. Freezers are checked every morning.",
    "gamma": "The gamma team ships parcels on Fridays. Labels are printed the day before.",
}
QUESTIONS = [
    ("q1", "When does the alpha office open?", "At nine.", "alpha"),
    ("q2", "How are beta samples kept?", "Cold, in freezers.", "beta"),
    ("q3", "When does the gamma team ship parcels?", "On Fridays.", "gamma"),
]


def make_dataset(folder: Path) -> tuple[Path, Path]:
    """A 3-question JSONL dataset and its 3-document Markdown corpus under ``folder``."""
    docs = folder / "docs"
    docs.mkdir(parents=True)
    for name, text in DOCS.items():
        (docs / f"{name}.md").write_text(f"# {name}\n\n{text}\n", encoding="utf-8")
    rows = [
        {"id": i, "user_input": q, "reference": a, "reference_doc_ids": [d]}
        for i, q, a, d in QUESTIONS
    ]
    path = folder / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, docs


def rag_exp(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m rag_experiments <args>`` in ``cwd`` with the worktree first on the path;
    nothing else set (each test says where its store and caches go)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "rag_experiments", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nSTDOUT:\n{done.stdout[-3000:]}\nSTDERR:\n{done.stderr[-3000:]}"


def runs_in(uri: str) -> list[mlflow.entities.Run]:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments")
    return list(client.search_runs([exp.experiment_id])) if exp else []


# --- 3. hydra.job.chdir=true: one store ------------------------------------------------------


@pytest.mark.slow
def test_a_chdir_sweep_keeps_parent_children_and_caches_in_one_store(tmp_path: Path) -> None:
    make_dataset(tmp_path / "data")
    done = rag_exp(
        tmp_path, "run", "-m", "hydra.job.chdir=true", "hydra.sweep.dir=multirun",
        "retriever.top_k=1,2", "dataset=jsonl", "dataset.path=data/eval.jsonl",
        "dataset.corpus=data/docs", "embedder=hash", "llm=fake", "judge=fake",
        "metrics=retrieval", "progress=false",
    )  # fmt: skip
    assert done.returncode == 0, explain(done)
    assert sorted(tmp_path.rglob("mlruns.db")) == [tmp_path / "mlruns.db"]
    assert not list((tmp_path / "multirun").rglob(".cache"))
    assert (tmp_path / ".cache").is_dir()
    runs = runs_in(f"sqlite:///{tmp_path}/mlruns.db")
    parents = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    children = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    assert len(parents) == 1 and len(children) == 2, explain(done)
    assert parents[0].info.status == "FINISHED"
    for child in children:
        assert child.data.tags[MLFLOW_PARENT_RUN_ID] == parents[0].info.run_id
        assert child.data.params["dataset.path"] == str(tmp_path / "data" / "eval.jsonl")
        assert child.data.params["paths.cache_dir"] == str(tmp_path / ".cache")
        assert child.data.metrics["n_samples"] == 3.0


def test_relative_paths_and_tracking_uris_are_rooted_at_the_start_folder(
    compose_cfg, tmp_path: Path
) -> None:
    from rag_experiments.config.paths import root_paths

    cfg = compose_cfg(
        "dataset=jsonl", "dataset.path=data/eval.jsonl", "dataset.corpus=data/docs",
        "paths.cache_dir=.cache", "tracking.uri=sqlite:///store/mlruns.db",
        "embedder=hash", "llm=embedded", "llm.model_path=models/m.gguf",
    )  # fmt: skip
    changed = root_paths(cfg, tmp_path)
    assert cfg.dataset.path == str(tmp_path / "data" / "eval.jsonl")
    assert cfg.dataset.corpus == str(tmp_path / "data" / "docs")
    assert cfg.paths.cache_dir == str(tmp_path / ".cache")
    assert cfg.paths.chroma_dir == str(tmp_path / ".cache" / "chroma")  # was ${paths.cache_dir}
    assert cfg.paths.llm_cache == str(tmp_path / ".cache" / "llm.sqlite")
    assert cfg.llm.model_path == str(tmp_path / "models" / "m.gguf")
    assert cfg.tracking.uri == f"sqlite:///{tmp_path}/store/mlruns.db"
    assert {"dataset.path", "paths.cache_dir", "tracking.uri"} <= set(changed)
    # absolute paths, URLs and server URIs stay as they are
    cfg = compose_cfg(f"paths.cache_dir={tmp_path}/abs", "tracking.uri=http://127.0.0.1:5000")
    root_paths(cfg, tmp_path / "elsewhere")
    assert cfg.paths.cache_dir == f"{tmp_path}/abs"
    assert cfg.tracking.uri == "http://127.0.0.1:5000"


# --- 4. the caveat names the models that answered and judged ---------------------------------


def make_recorded_dataset(folder: Path) -> tuple[Path, Path]:
    """:func:`make_dataset` with a recorded answer and its contexts on every row."""
    path, docs = make_dataset(folder)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for row, (_, _, answer, doc) in zip(rows, QUESTIONS, strict=True):
        row["recorded"] = {"response": answer, "retrieved_contexts": [DOCS[doc]]}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, docs


def only_run(tmp_path: Path) -> mlflow.entities.Run:
    (run,) = runs_in(f"sqlite:///{tmp_path}/mlruns.db")
    return run


@pytest.mark.slow
def test_a_recorded_run_judged_by_the_fake_has_no_note_about_the_unused_embedded_model(
    compose_cfg, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag_experiments.job import run_job

    path, docs = make_recorded_dataset(tmp_path / "data")
    # llm is left at its default, the embedded SmolLM2: the recorded target never calls it
    cfg = compose_cfg(
        "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}", "target=recorded",
        "judge=fake", "embedder=hash",
    )  # fmt: skip
    assert cfg.llm._target_.endswith("EmbeddedChat")
    run_job(cfg)
    run = only_run(tmp_path)
    assert run.info.status == "FINISHED"
    assert "mlflow.note.content" not in run.data.tags
    assert "SmolLM2" not in capsys.readouterr().out


def test_the_caveat_says_what_the_embedded_model_produced(compose_cfg) -> None:
    from rag_experiments.build import run_caveat, used_chat_roles

    def note(*overrides: str) -> str:
        return run_caveat(used_chat_roles(compose_cfg(*overrides)))

    assert note("target=recorded", "judge=embedded").startswith(
        "Judgements come from the embedded SmolLM2-135M model"
    )
    assert "Use judge=ollama/openai with a real model." in note("target=recorded")
    assert note("judge=fake").startswith("Answers come from the embedded SmolLM2-135M model")
    assert "Use llm=ollama/openai with a real model." in note("judge=fake")
    assert note().startswith("Answers and judgements come from the embedded SmolLM2-135M")
    assert "Use llm=ollama/openai and judge=ollama/openai" in note()
    assert note("target=http", "target.url=http://127.0.0.1:9/ask", "judge=fake") == ""
    assert note("metrics=retrieval") == ""  # no answer, no judge
    assert note("llm=fake", "judge=fake") == ""


# --- 5. refused commands leave no run; a resumed run drops its old error ----------------------


@pytest.mark.slow
def test_refused_commands_create_no_mlflow_run(compose_cfg, tmp_path: Path) -> None:
    from rag_experiments.errors import ConfigError, RagExpError
    from rag_experiments.job import run_job

    path, docs = make_dataset(tmp_path / "data")
    base = ["dataset=jsonl", f"dataset.corpus={docs}", "embedder=hash", "metrics=retrieval"]
    with pytest.raises(ConfigError, match="retriever.top_k must be >= 1"):
        run_job(compose_cfg(*base, f"dataset.path={path}", "retriever.top_k=0"))
    with pytest.raises(RagExpError, match="missing.jsonl"):
        run_job(compose_cfg(*base, f"dataset.path={tmp_path}/missing.jsonl"))
    assert runs_in(f"sqlite:///{tmp_path}/mlruns.db") == []
    run_job(compose_cfg(*base, f"dataset.path={path}"))  # the same store takes a good run
    assert only_run(tmp_path).info.status == "FINISHED"


class _Rag(BaseHTTPRequestHandler):
    """A RAG endpoint answering every question with the first sentence of document alpha."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def _json(self, payload: object) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._json({"status": "ok"})

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._json({"answer": "At nine.", "contexts": [DOCS["alpha"]], "doc_ids": ["alpha"]})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_a_failed_run_resumed_to_finished_drops_its_error_and_keeps_the_history(
    tmp_path: Path,
) -> None:
    path, docs = make_dataset(tmp_path / "data")
    port = free_port()
    args = [
        "run", "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}",
        "target=http", f"target.url=http://127.0.0.1:{port}/ask",
        f"target.health_url=http://127.0.0.1:{port}/health", "target.retries=0",
        "metrics=retrieval", "embedder=hash", "llm=fake", "judge=fake", "progress=false",
        f"tracking.uri=sqlite:///{tmp_path}/mlruns.db", f"paths.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    first = rag_exp(tmp_path, *args, f"hydra.run.dir={tmp_path}/job1")
    assert first.returncode == 1, explain(first)  # nothing listens: the preflight fails
    run = only_run(tmp_path)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    assert run.info.status == "FAILED" and "preflight" in run.data.tags["error"]
    assert "error.txt" in {a.path for a in client.list_artifacts(run.info.run_id)}
    old_error = run.data.tags["error"]

    server = ThreadingHTTPServer(("127.0.0.1", port), _Rag)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        second = rag_exp(
            tmp_path, *args, f"hydra.run.dir={tmp_path}/job2", f"resume={run.info.run_id}"
        )
    finally:
        server.shutdown()
        server.server_close()
    assert second.returncode == 0, explain(second)
    run = client.get_run(run.info.run_id)
    assert run.info.status == "FINISHED"
    assert "error" not in run.data.tags
    assert run.data.tags["resumed_after_error"] == old_error
    assert "error.txt" not in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert run.data.metrics["n_samples"] == 3.0 and run.data.metrics["n_failed"] == 0.0


# --- 6. secrets typed on the command line --------------------------------------------------------


def files_holding(root: Path, secrets: list[str]) -> list[str]:
    """Every file under ``root`` whose bytes hold one of ``secrets``."""
    hits = []
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        data = file.read_bytes()
        hits += [f"{file}: {s}" for s in secrets if s.encode() in data]
    return hits


def test_every_provider_schema_takes_an_api_key_that_is_redacted(
    compose_cfg, httpserver: HTTPServer
) -> None:
    from rag_experiments.build import build_embedder, build_role_chat
    from rag_experiments.common.redact import REDACTED, redact

    for overrides in (
        ["llm=openai", "llm.api_key=sk-test-1234"],
        ["llm=ollama", "llm.api_key=sk-test-1234"],
        ["judge=openai", "judge.api_key=sk-test-1234"],
        ["judge=ollama", "judge.api_key=sk-test-1234"],
        ["embedder=openai", "embedder.api_key=sk-test-1234"],
        ["embedder=ollama", "embedder.api_key=sk-test-1234"],
        ["target=http", "target.url=http://127.0.0.1:9/ask", "target.api_key=sk-test-1234"],
    ):
        cfg = compose_cfg(*overrides)  # in the schema: no `+` needed, no TypeError
        group = overrides[0].split("=")[0]
        assert cfg[group].api_key == "sk-test-1234" and "api_key_env" in cfg[group]
        plain = redact({group: dict(cfg[group])})
        assert plain[group]["api_key"] == REDACTED
    # the key is sent as a bearer token
    httpserver.expect_request("/v1/models").respond_with_json({"data": [{"id": "m"}]})
    httpserver.expect_request("/api/tags").respond_with_json(
        {"models": [{"name": "m:latest", "model": "m:latest", "digest": "abc"}]}
    )
    url = httpserver.url_for("").rstrip("/")
    judge = compose_cfg("judge=openai", f"judge.base_url={url}/v1", "judge.model=m",
                        "judge.api_key=sk-judge-1")  # fmt: skip
    build_role_chat(judge.judge, "judge").inner.check()
    embedder = compose_cfg("embedder=ollama", f"embedder.base_url={url}", "embedder.model=m",
                           "embedder.api_key=sk-embed-2", "paths.embedding_cache=null")  # fmt: skip
    build_embedder(embedder).check()
    sent = [request.headers.get("Authorization") for request, _ in httpserver.log]
    assert sent == ["Bearer sk-judge-1", "Bearer sk-embed-2"]


@pytest.mark.slow
def test_a_literal_secret_leaves_no_copy_in_the_job_folder_store_caches_or_console(
    tmp_path: Path,
) -> None:
    from rag_experiments.fakes.openai_server import FakeOpenAIServer

    path, docs = make_dataset(tmp_path / "data")
    secrets = ["sk-LLM-0123456789abcdef", "sk-JUDGE-fedcba9876543210"]
    with FakeOpenAIServer(latency_s=0.0) as server:
        args = [
            "run", "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}",
            "llm=openai", f"llm.base_url={server.url}", f"llm.api_key={secrets[0]}",
            "judge=openai", f"judge.base_url={server.url}", f"judge.api_key={secrets[1]}",
            "embedder=hash", "progress=false",
            f"tracking.uri=sqlite:///{tmp_path}/store/mlruns.db",
            f"paths.cache_dir={tmp_path}/cache",
        ]  # fmt: skip
        good = rag_exp(tmp_path, *args, f"hydra.run.dir={tmp_path}/job")
        bad = rag_exp(tmp_path, *args, "retriever.top_k=0", f"hydra.run.dir={tmp_path}/bad")
    assert good.returncode == 0, explain(good)
    assert bad.returncode == 1, explain(bad)
    assert "***REDACTED***" in (tmp_path / "job" / ".hydra" / "overrides.yaml").read_text()
    assert files_holding(tmp_path / "job", secrets) == []
    assert files_holding(tmp_path / "bad", secrets) == []
    assert files_holding(tmp_path / "store", secrets) == []
    assert files_holding(tmp_path / "cache", secrets) == []
    for done in (good, bad):
        assert not [s for s in secrets if s in done.stdout + done.stderr], explain(done)
    # one line, ours: Hydra's echo of the overrides (which held the keys) is not printed
    assert bad.stderr.splitlines() == ["rag-exp run: error: retriever.top_k must be >= 1, got 0."]


# --- 7. sentence ends of every script ------------------------------------------------------------

ZH = "第一条规定适用于所有员工。第二条规定访客必须登记！第三条规定是否适用于承包商？"
"""Three Chinese sentences (ending 。！？), no space anywhere: 16 + 13 + 14 characters."""


def test_sentences_end_at_unicode_terminals_with_or_without_a_space() -> None:
    from rag_experiments.text.sentences import ends_sentence, split_sentences

    assert split_sentences(ZH) == [
        "第一条规定适用于所有员工。",
        "第二条规定访客必须登记！",
        "第三条规定是否适用于承包商？",
    ]
    assert split_sentences("「你好。」他说。") == ["「你好。」", "他说。"]
    assert split_sentences('He left. "Why?" she asked. Pi is 3.14 here') == [
        "He left.",
        '"Why?"',
        "she asked.",
        "Pi is 3.14 here",
    ]
    assert split_sentences("क्या यह सच है? हाँ। ठीक है") == ["क्या यह सच है?", "हाँ।", "ठीक है"]
    assert split_sentences("  ") == [] and split_sentences("no end") == ["no end"]
    assert ends_sentence("承包商？") and ends_sentence('done."') and not ends_sentence("3.14 x")


def test_the_semantic_chunker_cuts_chinese_text_at_sentence_ends() -> None:
    from rag_experiments.chunking.semantic import SemanticChunker
    from rag_experiments.records import Document

    text = ZH * 3  # one 129-character line of 9 sentences, no space, no line break
    chunks = SemanticChunker(size=40, min_size=10).split(Document(id="zh", text=text))
    assert "".join(c.text for c in chunks) == text
    assert len(chunks) > 1
    for chunk in chunks:  # every cut falls after 。！？, never inside a sentence
        assert chunk.text[-1] in "。！？", [c.text for c in chunks]


def test_the_refusal_rule_reads_only_the_first_sentence_in_any_script() -> None:
    from rag_experiments.metrics.refusal import first_sentence, is_refusal

    answer = "申请表是AR-1。I don't know who signs it."
    assert first_sentence(answer) == "申请表是ar-1。"
    assert not is_refusal(answer)  # the first sentence answers
    assert is_refusal("I don't know。申请表是AR-1。")
    assert first_sentence("The figure is 3.5 days. I don't know more") == "the figure is 3.5 days."


# --- 8. a reused index is checked ----------------------------------------------------------------


def test_an_index_in_another_space_or_from_another_embedder_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import numpy as np

    from rag_experiments.embedding.hash import HashEmbedder
    from rag_experiments.index.chroma import ChromaIndex
    from rag_experiments.records import Chunk

    chunks = [Chunk(id=f"{d}#0", doc_id=d, text=t, position=0) for d, t in DOCS.items()]
    emb = HashEmbedder(dim=64)
    index = ChromaIndex(str(tmp_path / "chroma"))
    name = index.ensure(chunks, emb, "key", chunker_id="fixed:64")
    built = index.client.get_collection(name, embedding_function=None)
    meta = dict(built.metadata)
    # the same name and metadata, the same vectors, but L2 distances
    index.client.delete_collection(name)
    l2 = index.client.create_collection(
        name, configuration={"hnsw": {"space": "l2"}}, metadata=meta, embedding_function=None
    )
    vectors = emb.embed_documents([c.text for c in chunks])
    l2.add(ids=[c.id for c in chunks], embeddings=vectors, documents=[c.text for c in chunks])

    caplog.set_level(logging.INFO, logger="rag_experiments.index.chroma")
    fresh = ChromaIndex(str(tmp_path / "chroma"))
    assert fresh.ensure(chunks, emb, "key", chunker_id="fixed:64") == name
    assert fresh.builds == 1
    assert f"Rebuilding vector index {name}" in caplog.text and "'l2'" in caplog.text
    query = emb.embed_query("visitors sign in at the front desk")
    cosines = vectors @ query / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(query))
    for cid, _, _, score in fresh.query(name, query, k=3):
        assert score == pytest.approx(float(cosines[[c.id for c in chunks].index(cid)]), abs=1e-5)

    again = ChromaIndex(str(tmp_path / "chroma"))  # now in cosine space: reused
    assert again.ensure(chunks, emb, "key", chunker_id="fixed:64") == name and again.builds == 0
    caplog.clear()
    col = again.client.get_collection(name, embedding_function=None)
    col.modify(metadata={**col.metadata, "embedder_id": "hash:d32"})
    assert (
        ChromaIndex(str(tmp_path / "chroma")).ensure(chunks, emb, "key", chunker_id="fixed:64")
        == name
    )
    assert "it was built for embedder 'hash:d32'" in caplog.text
    caplog.clear()
    other = ChromaIndex(str(tmp_path / "chroma"))
    other.ensure(chunks, emb, "key", chunker_id="fixed:128")
    assert other.builds == 1 and "it was built for chunker 'fixed:64'" in caplog.text


# --- 9. a clear word for the smaller cases -------------------------------------------------------


@pytest.mark.slow
def test_a_top_k_larger_than_the_corpus_is_said(
    compose_cfg, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rag_experiments.job import run_job

    path, docs = make_dataset(tmp_path / "data")
    cfg = compose_cfg(
        "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}", "embedder=hash",
        "metrics=retrieval", "retriever.top_k=50",
    )  # fmt: skip
    with caplog.at_level("WARNING"):
        run_job(cfg)
    assert "retriever.top_k=50 but the corpus has only 3 chunks" in caplog.text


def test_invalid_utf8_in_a_corpus_file_is_said_with_the_file_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rag_experiments.data.corpus import load_corpus_jsonl
    from rag_experiments.text.extract import extract_file

    md = tmp_path / "latin1.md"
    md.write_bytes("# Caf\u00e9\n\nLe caf\u00e9 ouvre \u00e0 neuf heures.\n".encode("latin-1"))
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_bytes(
        b'{"_id": "a", "title": "", "text": "fine"}\n{"_id": "b", "title": "", "text": "caf\xe9"}\n'
    )
    with caplog.at_level("WARNING"):
        text = extract_file(md).text
        docs = load_corpus_jsonl(jsonl)
    assert text.count("\ufffd") == 3
    assert f"{md}: 3 byte sequence(s) are not valid UTF-8 (the first at byte 5)" in caplog.text
    assert docs[1].text == "caf\ufffd"
    assert f"{jsonl}: 1 line(s) hold bytes that are not valid UTF-8 (first: line 2)" in caplog.text


WRONG_TYPES = [
    "judge.responses.FaithfulnessOutput={claims: 7}",
    "judge.responses.ContextVerdicts={verdicts: 3}",
    "judge.responses.GeneratedQuestions={questions: 5, noncommittal: maybe}",
    "judge.responses.AnswerGrades={accuracy: high, completeness: [], relevance: {}}",
]
"""Every scripted reply of the fake judge with fields of the wrong type."""


@pytest.mark.slow
def test_a_judge_whose_every_reply_has_wrong_types_fails_the_run_after_logging(
    compose_cfg, tmp_path: Path
) -> None:
    from rag_experiments.errors import RunFailedError
    from rag_experiments.job import run_job

    path, docs = make_dataset(tmp_path / "data")
    cfg = compose_cfg(
        "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}", "embedder=hash",
        "llm=fake", "judge=fake", *WRONG_TYPES,
    )  # fmt: skip
    with pytest.raises(RunFailedError, match="the judge gave no usable verdict") as info:
        run_job(cfg)
    # the advice is a new run: resuming with another judge is refused (the params differ)
    assert str(info.value).endswith(
        "start a new run with a judge that follows the JSON schema (judge=…, judge.model=…): "
        "resume=<run id> continues a run only with the config it started with, so it cannot "
        "change the judge"
    )
    run = only_run(tmp_path)
    assert run.info.status == "FAILED" and "no usable verdict" in run.data.tags["error"]
    metrics = run.data.metrics
    assert metrics["n_samples"] == 3.0  # everything computed was logged first
    assert metrics["faithfulness_n_valid"] == 0.0 and metrics["judge.errors.parse_error"] > 0
    assert metrics["keyword_faithfulness"] >= 0.0  # the metrics without a judge are there
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    assert "judge_audit.jsonl" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_serve_answers_only_loopback_host_headers() -> None:
    from rag_experiments.data.base import EvalDataset
    from rag_experiments.targets.http_server import TargetServer, create_app
    from rag_experiments.targets.recorded import RecordedTarget

    target = RecordedTarget(doc_ids_from_text=False)
    target.prepare(EvalDataset(name="empty", samples=[]))
    client = TargetServer(target, host="127.0.0.1", port=0).wsgi_app().test_client()
    assert client.get("/health", headers={"Host": "127.0.0.1:8000"}).status_code == 200
    assert client.get("/health", headers={"Host": "localhost:8000"}).status_code == 200
    assert client.get("/health", headers={"Host": "evil.example:8000"}).status_code == 400
    rebinding = client.post("/ask", json={"question": "q"}, headers={"Host": "evil.example"})
    assert rebinding.status_code == 400
    # bound to every interface (--host 0.0.0.0) any name may reach it, as with rag-exp review
    open_app = create_app(target, loopback_only=False).test_client()
    assert open_app.get("/health", headers={"Host": "box.lan:8000"}).status_code == 200


@pytest.mark.slow
def test_a_resumed_run_reports_the_generator_usage_of_the_killed_attempt(tmp_path: Path) -> None:
    path, docs = make_dataset(tmp_path / "data")
    args = [
        "run", "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}",
        "llm=fake", "judge=fake", "judge.delay_s=1.0", "embedder=hash", "progress=false",
        f"tracking.uri=sqlite:///{tmp_path}/mlruns.db", f"paths.cache_dir={tmp_path}/cache",
    ]  # fmt: skip
    job = tmp_path / "job"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), *filter(None, [env.get("PYTHONPATH")])]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_experiments", *args, f"hydra.run.dir={job}"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        answers = job / "responses.jsonl"
        while not (answers.exists() and len(answers.read_text().splitlines()) == 3):
            assert proc.poll() is None and time.monotonic() < deadline, "no 3 answers stored"
            time.sleep(0.05)
    finally:
        proc.kill()  # SIGKILL while the slow judge is still at work
        proc.wait()
    resumed = rag_exp(tmp_path, *args, f"hydra.run.dir={tmp_path}/job2", f"resume={job}")
    assert resumed.returncode == 0, explain(resumed)
    run = only_run(tmp_path)
    assert run.info.status == "FINISHED" and run.data.tags["resumed"] == "true"
    # every answer came from the killed attempt: its 3 generator calls are the run's
    assert run.data.metrics["generator.llm_calls"] == 3.0
    assert "generator.llm_cache_hit_rate" in run.data.metrics
    assert run.data.metrics["generator.prompt_tokens"] > 0


@pytest.mark.slow
def test_an_optuna_study_with_a_failed_trial_exits_0_and_its_parent_finishes(
    tmp_path: Path,
) -> None:
    path, docs = make_dataset(tmp_path / "data")
    done = rag_exp(
        tmp_path, "run", "-m", "hydra/sweeper=rag_optuna", "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler.seed=0", "hydra.sweeper.n_jobs=1",
        "retriever.top_k=choice(0,5)", "objective=nDCG@10", "metrics=retrieval",
        "dataset=jsonl", f"dataset.path={path}", f"dataset.corpus={docs}", "embedder=hash",
        "llm=fake", "judge=fake", "progress=false", f"hydra.sweep.dir={tmp_path}/sweep",
        f"tracking.uri=sqlite:///{tmp_path}/mlruns.db", f"paths.cache_dir={tmp_path}/cache",
    )  # fmt: skip
    assert done.returncode == 0, explain(done)
    runs = runs_in(f"sqlite:///{tmp_path}/mlruns.db")
    (parent,) = [r for r in runs if MLFLOW_PARENT_RUN_ID not in r.data.tags]
    children = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    status = {c.data.params["retriever.top_k"]: c.info.status for c in children}
    assert set(status.values()) == {"FAILED", "FINISHED"} and status["0"] == "FAILED"
    assert parent.info.status == "FINISHED"  # as the exit code says
    assert "retriever.top_k must be >= 1" in parent.data.tags["sweep.failed_children"]
    assert "failed trial(s)" in done.stdout + done.stderr
