"""``rag-exp generate`` through Hydra with fake models: the dataset, the MLflow run in
experiment ``datasets``, and ``rag-exp run`` loading the result with the docs folder."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from mlflow import MlflowClient
from omegaconf import DictConfig

from rag_experiments.cli import main
from rag_experiments.data.corpus import load_corpus_folder
from rag_experiments.generate.app import generate_dataset
from rag_experiments.locations import CONF_DIR
from rag_experiments.records import QUESTION_TYPES
from tests.run_helpers import evaluate_retrieval

PARAGRAPH = (
    "Requests for {topic} are reviewed by the {role} within {days} working days. The {role} "
    "records each decision in the {topic} register, and an escalation goes to the director "
    "when the deadline is missed or the request is incomplete."
)
# Fixed scripted outputs (every call gets the same one): the first is accepted, later ones
# are exact duplicates. The answer's words occur in every policy paragraph.
QUESTION = "Who reviews requests and records each decision in the register?"
ANSWER = (
    "Requests are reviewed within working days and each decision is recorded in the "
    "register by the reviewer."
)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i, (topic, role) in enumerate(
        [("laptops", "asset officer"), ("badges", "security desk"), ("backups", "storage team")]
    ):
        (folder / f"policy-{i}.md").write_text(
            f"# {topic.title()} policy\n\n" + PARAGRAPH.format(topic=topic, role=role, days=i + 2),
            encoding="utf-8",
        )
    (folder / "scan.tiff").write_bytes(b"II*\x00")
    return folder


def _overrides(tmp_path: Path, docs: Path, out: Path) -> list[str]:
    return [
        f"docs={docs}",
        f"out={out}",
        "n=2",
        "n_unanswerable=1",
        "min_chunk_words=10",
        "llm=fake",
        "judge=fake",
        "embedder=hash",
        "progress=false",
        f"+llm.responses.QAPair={{question:'{QUESTION}',answer:'{ANSWER}'}}",
        "+llm.responses.UnanswerableQuestion={question:'Which travel budget pays for trips?'}",
        "+judge.responses.AnswerCheck={answered:false}",
        f"paths.cache_dir={tmp_path}/cache",
        f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
        f"hydra.run.dir={tmp_path}/hydra",
    ]


@pytest.mark.slow
def test_generate_command_writes_dataset_logs_mlflow_and_run_loads_it(
    docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "datasets" / "demo"
    assert main(["generate", *_overrides(tmp_path, docs, out)]) == 0
    printed = capsys.readouterr().out
    assert "accepted 1 of 2 requested pairs, 1 of 1 unanswerable" in printed
    assert "scan.tiff: unsupported_extension" in printed
    assert f"dataset.corpus={docs.resolve()}" in printed

    rows = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [r["answerable"] for r in rows] == [True, False]
    assert rows[0]["user_input"] == QUESTION and rows[0]["reference"] == ANSWER
    assert rows[0]["reference_doc_ids"][0] in {d.id for d in load_corpus_folder(docs)[0]}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["corpus"] == str(docs.resolve()) and manifest["generator"]["provider"] == "fake"

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("datasets")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "demo" and run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["n_accepted"] == 1 and metrics["n_unanswerable"] == 1
    # 4 answerable attempts (2 x n over 3 chunks): 3 repeat the first; the unanswerable
    # target (1) is met by the first of its 2 attempts, so the second result is not used
    assert metrics["rejected/duplicate_exact"] == 3 and metrics["n_attempts"] == 5
    assert metrics["n_skipped_files"] == 1
    assert run.data.params["docs_password"] is not None
    paths = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "skipped_files.json", "dataset"} <= paths
    local = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id,
        tracking_uri=uri,
        artifact_path="dataset/eval.jsonl",
        dst_path=str(tmp_path / "dl"),
    )
    assert Path(local).read_text() == (out / "eval.jsonl").read_text()

    # resuming a finished output makes no new attempt
    assert main(["generate", *_overrides(tmp_path, docs, out)]) == 0
    assert "2 samples were there from an earlier run" in capsys.readouterr().out

    # `rag-exp run` evaluates it against the docs folder
    evaluation = evaluate_retrieval(tmp_path, out / "eval.jsonl", docs, "eval-generated")
    assert evaluation.data.metrics["n_samples"] == 2
    assert evaluation.data.metrics["n_unanswerable"] == 1


def test_generate_command_reports_a_missing_out(
    docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "generate",
            f"docs={docs}",
            "llm=fake",
            f"hydra.run.dir={tmp_path}/h",
            f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
        ]
    )
    assert code == 1  # one line, no traceback (rag_experiments.cli.main)
    assert "rag-exp generate: error: out is required" in capsys.readouterr().err


def _compose_generate(*overrides: str) -> DictConfig:
    import rag_experiments.generate.app  # noqa: F401  (registers generate_schema)

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="generate", overrides=list(overrides))
    GlobalHydra.instance().clear()
    return cfg


def test_generate_config_is_typed_and_logs_to_the_datasets_experiment() -> None:
    cfg = _compose_generate("docs=d", "out=o", "tracking=server")
    assert cfg.tracking.experiment == "datasets" and cfg.tracking.uri.startswith("http")
    assert cfg.n == 40 and list(cfg.types) == list(QUESTION_TYPES)
    assert cfg.attempt_factor == 2.0 and cfg.dedup_threshold == 0.95
    assert cfg.llm._target_.endswith("EmbeddedChat") and cfg.chunker._target_.endswith(
        "SemanticChunker"
    )
    with pytest.raises(ConfigCompositionException, match="nn"):
        _compose_generate("docs=d", "out=o", "nn=3")


def test_template_mode_through_the_config(tmp_path: Path) -> None:
    table = tmp_path / "people.jsonl"
    table.write_text(
        '{"name": "Ada", "role": "analyst", "team": "risk"}\n'
        '{"name": "Bo", "role": "auditor", "team": null}\n',
        encoding="utf-8",
    )
    cfg = _compose_generate(
        f"docs={table}",
        f"out={tmp_path}/out",
        "mode=template",
        "template.key_column=name",
        "n=0",
        "+template.types.role=role_responsibility",
    )
    summary = generate_dataset(cfg)
    rows = [json.loads(line) for line in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    assert sorted(r["user_input"] for r in rows) == [
        "What is the role of Ada?",
        "What is the role of Bo?",
        "What is the team of Ada?",
    ]
    assert summary.accepted_by_type == {"role_responsibility": 2, "lookup": 1}
    assert summary.corpus == str(tmp_path / "out" / "corpus.jsonl")
