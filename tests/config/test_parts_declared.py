"""A new retriever and a new dataset format are each a class and a YAML file, with no edit to
the package.

The test writes, into a tmp project folder, what a user writes: a module ``my_parts.py`` with
a retriever class (``PickRetriever``: the chunks of document ``first`` first, then the others
by chunk id) and a dataset loader class (``TsvDataset``: questions and documents as two
tab-separated files), and ``conf/retriever/pick.yaml`` / ``conf/dataset/tsv.yaml`` naming them
by ``_target_`` only (no schema dataclass, no defaults list). Their schemas are derived from
the classes' constructors (:mod:`rag_experiments.config.derive`). They are then found in
``rag-exp run --help``, in the generated config reference (``docs/gen_ref.py``), in the
composed config (typed: a misspelled or mistyped key is refused), and a real run uses them.

Values by hand: the retriever ranks d2, d1, d3 for every question (``first: d2``, then by
id). q1's relevant document is d2 (rank 1: reciprocal rank 1), q2's is d3 (rank 3: 1/3), so
MRR@10 = (1 + 1/3) / 2 = 2/3 and Hit@1 = (1 + 0) / 2 = 0.5.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore

from rag_experiments.cli import main
from rag_experiments.config.derive import DERIVED
from rag_experiments.locations import PROJECT_ROOT

MODULE = "my_parts"

SOURCE = '''
"""A user's parts: a retriever and a dataset format."""

from __future__ import annotations

from pathlib import Path

from rag_experiments.data.base import EvalDataset
from rag_experiments.records import Chunk, Document, Sample
from rag_experiments.retrieval.base import Hit, RetrievalResult, RetrieverBase


class PickRetriever(RetrieverBase):
    """The chunks of document ``first`` first, then every other chunk by id."""

    sources = ("pick",)

    def __init__(self, first: str, top_k: int = 5, depth: int | None = None) -> None:
        super().__init__(top_k, depth)
        self.first = first
        self.chunks: list[Chunk] = []

    def prepare(self, chunks: list[Chunk], corpus_key: str) -> None:
        self.chunks = list(chunks)

    def retrieve(self, query: str) -> RetrievalResult:
        ranked = sorted(self.chunks, key=lambda c: (c.doc_id != self.first, c.id))
        hits = [
            Hit(c.id, c.doc_id, c.text, 1.0 / rank, {"pick": rank})
            for rank, c in enumerate(ranked[: self.ranking_depth], start=1)
        ]
        return RetrievalResult.from_hits(hits, self.top_k)


class TsvDataset:
    """Questions (id, question, reference, relevant doc id) and documents (id, text) as two
    tab-separated files."""

    def __init__(self, path: str, corpus: str, name: str = "tsv") -> None:
        self.path, self.corpus, self.name = path, corpus, name

    def load(self) -> EvalDataset:
        rows = [line.split("\\t") for line in Path(self.path).read_text().splitlines()]
        docs = [line.split("\\t") for line in Path(self.corpus).read_text().splitlines()]
        return EvalDataset(
            name=self.name,
            samples=[
                Sample(id=i, user_input=q, reference=r, reference_doc_ids=[d])
                for i, q, r, d in rows
            ],
            corpus=[Document(id=i, text=t) for i, t in docs],
            source=self.path,
        )
'''

QUESTIONS = "q1\tWhy do dogs bark?\tAt strangers.\td2\nq2\tWhen do birds sing?\tAt dawn.\td3\n"
CORPUS = "d1\tCats purr when content.\nd2\tDogs bark at strangers.\nd3\tBirds sing at dawn.\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's project folder (the current folder): the module, the two YAML files and the
    data. ``sys.path`` and ``sys.modules`` are restored afterwards."""
    folder = tmp_path / "project"
    (folder / "conf" / "retriever").mkdir(parents=True)
    (folder / "conf" / "dataset").mkdir(parents=True)
    (folder / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE), encoding="utf-8")
    (folder / "conf" / "retriever" / "pick.yaml").write_text(
        f"# Document `first` first, then the rest.\n_target_: {MODULE}.PickRetriever\nfirst: d2\n"
    )
    (folder / "conf" / "dataset" / "tsv.yaml").write_text(
        f"_target_: {MODULE}.TsvDataset\npath: questions.tsv\ncorpus: corpus.tsv\n"
    )
    (folder / "questions.tsv").write_text(QUESTIONS)
    (folder / "corpus.tsv").write_text(CORPUS)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))  # `rag-exp` appends the project folder
    yield folder
    sys.modules.pop(MODULE, None)
    ConfigStore.instance().repo.pop(DERIVED, None)  # the derived schemas stored for it


def _options(text: str, group: str) -> list[str]:
    line = next(x for x in text.splitlines() if x.startswith(f"{group}: "))
    return line.split(": ", 1)[1].split(", ")


def test_the_new_parts_are_listed_by_run_help(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "pick" in _options(out, "retriever") and "bm25" in _options(out, "retriever")
    assert "tsv" in _options(out, "dataset") and "jsonl" in _options(out, "dataset")


def test_the_new_parts_compose_typed_by_their_classes(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    args = ["run", "retriever=pick", "dataset=tsv", "llm=fake", "judge=fake", "embedder=hash"]
    # every constructor parameter is a key, with the class's default (top_k, depth, name)
    assert main([*args, "retriever.depth=7", "--cfg", "job"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["retriever"] == {
        "_target_": f"{MODULE}.PickRetriever",
        "first": "d2",
        "top_k": 5,
        "depth": 7,
    }
    assert cfg["dataset"] == {
        "_target_": f"{MODULE}.TsvDataset",
        "path": "questions.tsv",
        "corpus": "corpus.tsv",
        "name": "tsv",
    }
    # a misspelled key is refused, with the derived schema's closest key
    assert main([*args, "retriever.frist=d1"]) == 1
    err = capsys.readouterr().err
    assert "retriever.frist is not a config key" in err and "did you mean retriever.first" in err
    assert main([*args, "+dataset.corpse=x"]) == 1
    assert "did you mean dataset.corpus" in capsys.readouterr().err
    # so is a value of the wrong type (top_k: int)
    assert main([*args, "retriever.top_k=many"]) == 1
    assert "retriever.top_k" in capsys.readouterr().err
    # a typo inside the YAML file itself too
    (project / "conf" / "retriever" / "pick.yaml").write_text(
        f"_target_: {MODULE}.PickRetriever\nfirst: d2\ntopk: 3\n"
    )
    assert main([*args, "--cfg", "job"]) == 1
    assert "topk" in capsys.readouterr().err


@pytest.mark.slow
def test_the_new_parts_are_in_the_generated_config_reference(project: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_ref", PROJECT_ROOT / "docs" / "gen_ref.py")
    gen_ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_ref)
    out = project.parent / "site"
    assert gen_ref.main([str(out), "--config-dir", str(project / "conf")]) == 0
    page = (out / gen_ref.CONFIG_PAGE).read_text(encoding="utf-8")
    pick = page.split("### `retriever=pick`", 1)[1].split("\n### ", 1)[0]
    assert "Document `first` first, then the rest." in pick  # the YAML's header comment
    assert "Derived from the constructor of ``my_parts.PickRetriever``" in pick  # its schema
    for row in ("| `retriever.first` | `d2` |", "| `retriever.top_k` | `5` |"):
        assert row in pick, row
    assert "| `retriever.depth` | `null` |" in pick
    tsv = page.split("### `dataset=tsv`", 1)[1].split("\n### ", 1)[0]
    assert "| `dataset.name` | `tsv` |" in tsv and "| `dataset.corpus` | `corpus.tsv` |" in tsv
    groups = page.split("## Groups", 1)[1].split("\n## ", 1)[0]
    assert "[`pick`](#opt-retriever-pick)" in groups and "[`tsv`](#opt-dataset-tsv)" in groups


@pytest.mark.slow
def test_a_run_uses_the_new_retriever_and_dataset(project: Path) -> None:
    import mlflow

    from rag_experiments.tracking.store import read_table

    uri = f"sqlite:///{project}/mlruns.db"
    code = main(
        [
            "run",
            "retriever=pick",
            "dataset=tsv",
            "llm=fake",
            "judge=fake",
            "embedder=hash",
            "metrics=retrieval",
            "chunker=none",
            f"tracking.uri={uri}",
            "progress=false",
            "run_name=pick-tsv",
        ]
    )
    assert code == 0
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment], "tags.`mlflow.runName` = 'pick-tsv'")
    table = read_table(client, run.info.run_id).set_index("id")
    assert list(table.index) == ["q1", "q2"]
    for qid in ("q1", "q2"):  # the retriever's ranking, whatever the question
        assert list(_cell(table.loc[qid, "retrieved_doc_ids"])) == ["d2", "d1", "d3"]
    assert table.loc["q1", "MRR@10"] == pytest.approx(1.0)
    assert table.loc["q2", "MRR@10"] == pytest.approx(1 / 3)
    assert table["MRR@10"].mean() == pytest.approx(2 / 3)
    assert list(table["Hit@1"]) == [1.0, 0.0]
    assert run.data.params["retriever._target_"] == f"{MODULE}.PickRetriever"
    assert run.data.params["dataset._target_"] == f"{MODULE}.TsvDataset"


def _cell(value: object) -> list[str]:
    import json

    return json.loads(value) if isinstance(value, str) else list(value)  # type: ignore[arg-type]


def test_every_export_format_is_declared_by_its_writer_and_read_by_a_dataset_option() -> None:
    from rag_experiments.commands.export import WRITERS
    from rag_experiments.data.jsonl import write_jsonl
    from rag_experiments.data.peer import write_deepeval, write_ragas
    from rag_experiments.data.writers import ExportFormat, writes
    from rag_experiments.locations import CONF_DIR

    assert {name: f.write for name, f in WRITERS.items()} == {
        "deepeval": write_deepeval,
        "jsonl": write_jsonl,
        "ragas": write_ragas,
    }
    for name in WRITERS:  # `rag-exp run dataset=<format>` reads the file back
        assert (CONF_DIR / "dataset" / f"{name}.yaml").is_file(), name
    assert isinstance(WRITERS["ragas"], ExportFormat) and ".csv" in WRITERS["ragas"].help
    with pytest.raises(ValueError, match="declared twice"):
        writes("jsonl", "another JSONL")(write_ragas)


def test_a_config_typed_by_a_derived_schema_pickles_into_a_fresh_process(project: Path) -> None:
    """A multirun launcher pickles each job's config; the derived schema is made again from
    the same ``./conf`` where it is unpickled."""
    import pickle

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from rag_experiments.config import derive, register
    from rag_experiments.locations import CONF_DIR

    sys.path.append(str(project))
    register()  # the current folder's ./conf
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("config", [f"hydra.searchpath=[file://{project}/conf]", "retriever=pick"])
    finally:
        GlobalHydra.instance().clear()
    data = pickle.dumps(cfg)
    schema = OmegaConf.get_type(cfg.retriever)
    assert schema.__module__ == derive.__name__
    delattr(derive, schema.__name__)  # as in a process that has not derived it yet
    derive._MADE.clear()
    back = pickle.loads(data)
    assert OmegaConf.get_type(back.retriever).__name__ == schema.__name__
    assert (back.retriever.first, back.retriever.top_k) == ("d2", 5)
