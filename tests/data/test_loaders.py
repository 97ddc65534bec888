"""Tests of the evaluation-dataset loaders (our JSONL, BEIR, peer formats) and the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rag_experiments.data.base import EvalDataset
from rag_experiments.data.beir import BeirDataset
from rag_experiments.data.jsonl import SCHEMA_PATH, JsonlDataset, RowLog, write_jsonl
from rag_experiments.data.peer import KeywordsJsonlDataset, SeedJsonDataset
from rag_experiments.errors import ConfigError, DatasetError, RowProblem
from rag_experiments.records import QUESTION_TYPES, RecordedAnswer, Sample

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "real" / "ir" / "scifact"


# --- helpers ---------------------------------------------------------------------------------
def _write(path: Path, text: str, newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


def _jsonl(path: Path, rows: list[Any], newline: str = "\n") -> Path:
    return _write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), newline)


def _corpus(path: Path, ids: list[str]) -> Path:
    """A BEIR corpus JSONL with one tiny document per id."""
    return _jsonl(path, [{"_id": i, "title": f"T {i}", "text": f"text of {i}"} for i in ids])


def _where(error: DatasetError) -> list[tuple[str, int, str]]:
    return [(Path(p.path).name, p.line, p.field) for p in error.problems]


# --- our JSONL format ------------------------------------------------------------------------
def test_jsonl_reads_good_rows_exactly(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl", ["doc-a", "doc-b"])
    data = _write(
        tmp_path / "policy_qa.jsonl",
        json.dumps({"id": "q1", "user_input": "Who approves access?"}) + "\n"
        "\n"  # blank lines are ignored
        + json.dumps(
            {
                "id": "q2",
                "user_input": "Quand ?",
                "reference": "Sous 5 jours.",
                "reference_doc_ids": ["doc-b"],
                "reference_contexts": ["within 5 days"],
                "keywords": ["5 days"],
                "question_type": "timeline_sla",
                "answerable": True,
                "relevance": {"doc-b": 2, "doc-a": 0},
                "metadata": {"page": 3},
            },
            ensure_ascii=False,
        )
        + "\n"
        + json.dumps(
            {
                "id": "q3",
                "user_input": "Out of scope?",
                "answerable": False,
                "question_type": "my own label",
            }
        )
        + "\n",
    )
    ds = JsonlDataset(path=str(data), corpus=str(corpus)).load()

    assert isinstance(ds, EvalDataset)
    assert ds.name == "policy_qa"
    assert ds.source == str(data)
    assert ds.samples == [
        Sample(id="q1", user_input="Who approves access?"),
        Sample(
            id="q2",
            user_input="Quand ?",
            reference="Sous 5 jours.",
            reference_doc_ids=["doc-b"],
            reference_contexts=["within 5 days"],
            keywords=["5 days"],
            question_type="timeline_sla",
            answerable=True,
            relevance={"doc-b": 2, "doc-a": 0},
            metadata={"page": 3},
        ),
        Sample(id="q3", user_input="Out of scope?", answerable=False, question_type="my own label"),
    ]
    assert sorted(d.id for d in ds.corpus) == ["doc-a", "doc-b"]


def test_jsonl_without_corpus_has_empty_corpus_and_name_override(tmp_path: Path) -> None:
    data = _jsonl(
        tmp_path / "a.jsonl", [{"id": "q1", "user_input": "x", "reference_doc_ids": ["anything"]}]
    )
    ds = JsonlDataset(path=str(data), name="custom").load()
    assert ds.name == "custom"
    assert ds.corpus == []
    assert ds.samples[0].reference_doc_ids == ["anything"]  # not checked without a corpus


def test_jsonl_three_bad_rows_give_one_error_listing_exactly_them(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "bad.jsonl",
        '{"id": "q1", "user_input": "fine"}\n'
        '{"id": "q2", "user_input": "missing brace"\n'
        '{"id": "q3", "user_input": "y", "reference_doc_ids": ["a", "b", 7]}\n'
        '{"id": "q1", "user_input": "same id again"}\n',
    )
    with pytest.raises(DatasetError) as info:
        JsonlDataset(path=str(data)).load()
    error = info.value
    assert _where(error) == [
        ("bad.jsonl", 2, ""),
        ("bad.jsonl", 3, "reference_doc_ids.2"),
        ("bad.jsonl", 4, "id"),
    ]
    text = str(error)
    first_line = text.splitlines()[0]
    assert "3 of 4 rows" in first_line and str(SCHEMA_PATH) in first_line
    assert f"{data}:3:reference_doc_ids.2: Input should be a valid string" in text
    # line 2 is 42 characters long and lacks its closing brace: json stops at column 43
    assert f"{data}:2: invalid JSON at column 43 (Expecting ',' delimiter)" in text
    assert "duplicate id 'q1' (first used on line 1)" in text


def test_jsonl_unknown_and_extra_fields_and_unknown_doc_ids(tmp_path: Path) -> None:
    _corpus(tmp_path / "c" / "corpus.jsonl", ["d1"])
    data = _jsonl(
        tmp_path / "x.jsonl",
        [
            {"id": "q1", "user_input": "a", "reference_doc_ids": ["d1", "d9"]},
            {"id": "q2", "user_input": "b", "relevance": {"d1": 1, "zz": 0}},
            {"id": "q3", "questoin": "typo"},
            ["not", "an", "object"],
        ],
    )
    with pytest.raises(DatasetError) as info:
        JsonlDataset(path=str(data), corpus=str(tmp_path / "c")).load()
    assert sorted(_where(info.value)) == [
        ("x.jsonl", 1, "reference_doc_ids.1"),
        ("x.jsonl", 2, "relevance.zz"),
        ("x.jsonl", 3, "questoin"),
        ("x.jsonl", 3, "user_input"),
        ("x.jsonl", 4, ""),
    ]
    by_field = {p.field: p.message for p in info.value.problems}
    assert "'d9' is not in the corpus" in by_field["reference_doc_ids.1"]
    assert by_field["questoin"].startswith("unknown field; the fields are id, user_input")


def test_jsonl_missing_file_bad_corpus_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        JsonlDataset(path=str(tmp_path / "nope.jsonl")).load()
    data = _jsonl(tmp_path / "ok.jsonl", [{"id": "q1", "user_input": "x"}])
    with pytest.raises(DatasetError, match="corpus .* does not exist"):
        JsonlDataset(path=str(data), corpus=str(tmp_path / "missing")).load()
    empty = _write(tmp_path / "empty.jsonl", "\n\n")
    with pytest.raises(DatasetError, match="holds no samples"):
        JsonlDataset(path=str(empty)).load()


def test_jsonl_corpus_folder_of_documents(tmp_path: Path) -> None:
    _write(tmp_path / "docs" / "hr" / "leave.md", "# Leave\n\nAsk your manager 5 days ahead.\n")
    _write(tmp_path / "docs" / "intro.txt", "Welcome to the handbook.\n")
    data = _jsonl(
        tmp_path / "qa.jsonl",
        [
            {"id": "q1", "user_input": "How early?", "reference_doc_ids": ["hr/leave"]},
        ],
    )
    ds = JsonlDataset(path=str(data), corpus=str(tmp_path / "docs")).load()
    assert sorted(d.id for d in ds.corpus) == ["hr/leave", "intro"]
    assert ds.skipped == {}
    with pytest.raises(DatasetError) as info:
        JsonlDataset(
            path=str(
                _jsonl(
                    tmp_path / "b.jsonl",
                    [{"id": "q1", "user_input": "x", "reference_doc_ids": ["hr/leave.md"]}],
                )
            ),
            corpus=str(tmp_path / "docs"),
        ).load()
    assert _where(info.value) == [("b.jsonl", 1, "reference_doc_ids.0")]


def test_write_jsonl_round_trips_in_model_order(tmp_path: Path) -> None:
    samples = [
        Sample(
            id="q1",
            user_input="Qu'est-ce qu'un délai ?",
            reference="Cinq jours ouvrés.",
            reference_doc_ids=["d1"],
            relevance={"d1": 2},
            metadata={"page": 2},
        ),
        Sample(id="q2", user_input="Second?", answerable=False),
        Sample(
            id="q3",
            user_input="Third?",
            recorded=RecordedAnswer(response=None, retrieved_contexts=["c"], latency_ms=2.5),
        ),
    ]
    out = write_jsonl(samples, tmp_path / "sub" / "out.jsonl")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert "délai" in lines[0]  # ensure_ascii=False
    # `recorded` is written only when a sample has a recorded answer
    assert list(json.loads(lines[0])) == [f for f in Sample.model_fields if f != "recorded"]
    assert list(json.loads(lines[2])) == list(Sample.model_fields)
    assert JsonlDataset(path=str(out)).load().samples == samples


def test_digest_is_stable_and_changes_with_one_sample(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl", ["d1", "d2"])
    rows = [
        {"id": f"q{i}", "user_input": f"question {i}", "reference_doc_ids": ["d1"]}
        for i in range(3)
    ]
    data = _jsonl(tmp_path / "d.jsonl", rows)
    first = JsonlDataset(path=str(data), corpus=str(corpus)).load()
    second = JsonlDataset(path=str(data), corpus=str(corpus)).load()
    assert first.digest == second.digest
    assert len(first.digest) == 16

    rows[1]["user_input"] = "question 1, reworded"
    changed = JsonlDataset(path=str(_jsonl(tmp_path / "d.jsonl", rows)), corpus=str(corpus)).load()
    assert changed.corpus_digest == first.corpus_digest
    assert changed.digest != first.digest


# --- the JSON Schema -------------------------------------------------------------------------
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def test_schema_file_is_alone_and_describes_sample() -> None:
    assert [p.name for p in SCHEMA_PATH.parent.iterdir()] == ["sample.schema.json"]
    schema = _schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False
    assert list(schema["properties"]) == list(Sample.model_fields)
    assert sorted(schema["required"]) == sorted(
        name for name, f in Sample.model_fields.items() if f.is_required()
    )
    assert schema["properties"]["question_type"]["examples"] == list(QUESTION_TYPES)
    generated = Sample.model_json_schema()["properties"]
    for name, prop in schema["properties"].items():
        if "default" in prop:  # the hand-written defaults are the model's defaults
            assert prop["default"] == Sample.model_fields[name].get_default(
                call_default_factory=True
            ), name
        if name == "recorded":  # an optional object: its fields are RecordedAnswer's
            assert prop["type"] == ["object", "null"]
            assert list(prop["properties"]) == list(RecordedAnswer.model_fields)
            continue
        assert prop.get("type") == generated[name].get("type", ["string", "null"]), name


GOOD_ROWS: list[dict[str, Any]] = [
    {"id": "q1", "user_input": "minimal"},
    {
        "id": "q1",
        "user_input": "full",
        "reference": "r",
        "reference_doc_ids": ["a", "b"],
        "reference_contexts": ["c"],
        "keywords": ["k"],
        "question_type": "multi_hop",
        "answerable": False,
        "relevance": {"a": 2, "b": 0},
        "metadata": {"n": [1, {"x": None}]},
    },
    {"id": "q1", "user_input": "any label", "question_type": "not one of the 8"},
    {"id": "q1", "user_input": "null type", "question_type": None},
    {"id": " ", "user_input": "an id of one space is still an id"},
    {
        "id": "q1",
        "user_input": "recorded",
        "recorded": {
            "response": "a",
            "retrieved_contexts": ["c"],
            "retrieved_ids": ["d#0"],
            "retrieved_doc_ids": ["d"],
            "latency_ms": 12,
        },
    },
    {"id": "q1", "user_input": "no response", "recorded": {"response": None}},
    {"id": "q1", "user_input": "null recorded", "recorded": None},
    {
        "id": "q1",
        "user_input": "structured citations",
        "recorded": {
            "response": "A. B.",
            "citations": [
                {"statement": "A.", "chunk_id": "d#0"},
                {"statement": "B", "doc_id": "d", "text": "quote", "chunk_id": None},
            ],
        },
    },
    {"id": "q1", "user_input": "cites nothing", "recorded": {"citations": []}},
]
BAD_ROWS: list[dict[str, Any]] = [
    {"user_input": "no id"},
    {"id": "q1"},
    {"id": "", "user_input": "empty id"},
    {"id": "q1", "user_input": ""},
    {"id": "q1", "user_input": " \t "},
    {"id": "q1", "user_input": "x", "extra": 1},
    {"id": 5, "user_input": "int id"},
    {"id": "q1", "user_input": "x", "answerable": "true"},
    {"id": "q1", "user_input": "x", "answerable": 1},
    {"id": "q1", "user_input": "x", "relevance": {"a": "2"}},
    {"id": "q1", "user_input": "x", "relevance": {"a": True}},
    {"id": "q1", "user_input": "x", "reference_doc_ids": ["a", 1]},
    {"id": "q1", "user_input": "x", "keywords": "not a list"},
    {"id": "q1", "user_input": "x", "question_type": 3},
    {"id": "q1", "user_input": "x", "metadata": []},
    {"id": "q1", "user_input": "x", "reference": None},
    {"id": "q1", "user_input": "x", "recorded": {"answer": "a"}},
    {"id": "q1", "user_input": "x", "recorded": {"response": 5}},
    {"id": "q1", "user_input": "x", "recorded": {"retrieved_contexts": "c"}},
    {"id": "q1", "user_input": "x", "recorded": {"latency_ms": -1}},
    {"id": "q1", "user_input": "x", "recorded": {"latency_ms": "12"}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": "c1"}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": [{"statement": "A"}]}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": [{"statement": "A", "text": None}]}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": [{"statement": " ", "text": "t"}]}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": [{"statement": "A", "chunk_id": 1}]}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": [{"statement": "A", "url": "u"}]}},
    {"id": "q1", "user_input": "x", "recorded": {"citations": [{"text": "t"}]}},
]


@pytest.mark.parametrize(
    ("row", "valid"), [(r, True) for r in GOOD_ROWS] + [(r, False) for r in BAD_ROWS]
)
def test_schema_and_loader_agree(row: dict[str, Any], valid: bool, tmp_path: Path) -> None:
    by_schema = jsonschema.Draft202012Validator(_schema()).is_valid(row)
    by_loader = RowLog(tmp_path / "x.jsonl").add_sample(1, row) is not None
    assert by_schema == by_loader == valid


# --- peer formats ----------------------------------------------------------------------------
def test_seed_json_maps_fields_and_keeps_extras(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "seed.json",
        json.dumps(
            [
                {
                    "question": "Who signs?",
                    "ground_truth": "The CISO.",
                    "type": "role_responsibility",
                    "context": "The CISO signs.",
                    "source": "policy.pdf",
                    "page": 4,
                },
                {"question": "Lunch menu?", "ground_truth": "", "answerable": False},
            ]
        ),
    )
    ds = SeedJsonDataset(path=str(data)).load()
    assert ds.name == "seed"
    assert ds.samples == [
        Sample(
            id="q0001",
            user_input="Who signs?",
            reference="The CISO.",
            question_type="role_responsibility",
            metadata={"context": "The CISO signs.", "source": "policy.pdf", "page": 4},
        ),
        Sample(id="q0002", user_input="Lunch menu?", reference="", answerable=False),
    ]


def test_seed_json_three_bad_items_reported_by_item_index(tmp_path: Path) -> None:
    data = _write(
        tmp_path / "seed.json",
        json.dumps(
            [
                "just a string",
                {"question": "No answer given?"},
                {"question": 5, "ground_truth": "g"},
                {"question": "fine", "ground_truth": "g", "type": "procedural"},
            ]
        ),
    )
    with pytest.raises(DatasetError) as info:
        SeedJsonDataset(path=str(data)).load()
    assert _where(info.value) == [
        ("seed.json", 1, ""),
        ("seed.json", 2, "ground_truth"),
        ("seed.json", 3, "question"),
    ]
    first_line = str(info.value).splitlines()[0]
    assert "3 of 4 items" in first_line and "1-based item index" in first_line


def test_seed_json_not_an_array(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="expected a JSON array"):
        SeedJsonDataset(path=str(_write(tmp_path / "s.json", '{"question": "x"}'))).load()
    with pytest.raises(DatasetError, match="not valid JSON: .* line 2"):
        SeedJsonDataset(path=str(_write(tmp_path / "s.json", '[\n{"question": }]'))).load()


def test_keywords_jsonl_maps_fields_ids_and_sources(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl", ["policy", "hr/leave"])
    data = _jsonl(
        tmp_path / "kw.jsonl",
        [
            {
                "id": "k1",
                "question": "MFA?",
                "keywords": ["MFA", "VPN"],
                "reference_answer": "Use MFA.",
                "category": "security",
                "source": "policy.pdf",
            },
            {
                "question": "Leave?",
                "keywords": [],
                "source": ["hr\\leave.docx", "policy.md"],
                "difficulty": "easy",
            },
            {"id": 7, "question": "Given ids?", "keywords": ["x"], "reference_doc_ids": ["policy"]},
        ],
    )
    ds = KeywordsJsonlDataset(path=str(data), corpus=str(corpus)).load()
    assert ds.samples == [
        Sample(
            id="k1",
            user_input="MFA?",
            keywords=["MFA", "VPN"],
            reference="Use MFA.",
            question_type="security",
            reference_doc_ids=["policy"],
            metadata={"source": "policy.pdf"},
        ),
        Sample(
            id="q0002",
            user_input="Leave?",
            reference_doc_ids=["hr/leave", "policy"],
            metadata={"source": ["hr\\leave.docx", "policy.md"], "difficulty": "easy"},
        ),
        Sample(id="7", user_input="Given ids?", keywords=["x"], reference_doc_ids=["policy"]),
    ]


def test_keywords_jsonl_three_bad_rows(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "corpus.jsonl", ["policy"])
    data = _write(
        tmp_path / "kw.jsonl",
        '{"question": "no keywords"}\n'
        '{"question": "ok", "keywords": ["a"], "source": "ghost.pdf"}\n'
        "\n"
        '{"question": "ok", "keywords": "a, b"}\n'
        '{"question": "fine", "keywords": ["a"], "source": "policy.pdf"}\n',
    )
    with pytest.raises(DatasetError) as info:
        KeywordsJsonlDataset(path=str(data), corpus=str(corpus)).load()
    assert _where(info.value) == [
        ("kw.jsonl", 1, "keywords"),
        ("kw.jsonl", 4, "keywords"),
        ("kw.jsonl", 2, "source.0"),
    ]
    assert "3 of 4 rows" in str(info.value).splitlines()[0]


# --- BEIR ------------------------------------------------------------------------------------
def _beir(root: Path, qrels: str, *, newline: str = "\n") -> Path:
    _corpus(root / "corpus.part00.jsonl", ["d1", "d2"])
    _corpus(root / "corpus.part01.jsonl", ["d3", "d4"])
    _jsonl(
        root / "queries.jsonl",
        [
            {"_id": "q1", "text": "first query", "metadata": {}},
            {"_id": "q2", "text": "second query"},
            {"_id": "q3", "text": "only a zero grade"},
            {"_id": "q4", "text": "no qrels in this split"},
        ],
    )
    _write(root / "qrels" / "test.tsv", qrels, newline)
    return root


def test_beir_sharded_corpus_header_and_crlf(tmp_path: Path) -> None:
    root = _beir(
        tmp_path / "mini",
        "query-id\tcorpus-id\tscore\nq2\td3\t2\nq1\td1\t1\nq1\td2\t0\nq3\td4\t0\nq2\td1\t1\n\n",
        newline="\r\n",
    )
    ds = BeirDataset(path=str(root)).load()
    assert ds.name == "mini"
    assert ds.source == str(root)
    assert sorted(d.id for d in ds.corpus) == ["d1", "d2", "d3", "d4"]
    assert ds.samples == [
        Sample(
            id="q2",
            user_input="second query",
            reference="",
            reference_doc_ids=["d3", "d1"],
            relevance={"d3": 2, "d1": 1},
            question_type=None,
            answerable=True,
        ),
        Sample(
            id="q1",
            user_input="first query",
            reference="",
            reference_doc_ids=["d1"],
            relevance={"d1": 1, "d2": 0},
            question_type=None,
            answerable=True,
        ),
    ]


def test_beir_qrels_without_header(tmp_path: Path) -> None:
    root = _beir(tmp_path / "mini", "q1\td1\t1\nq2\td2\t1\n")
    assert [s.id for s in BeirDataset(path=str(root), name="x").load().samples] == ["q1", "q2"]


def test_beir_unknown_ids_and_bad_rows_in_one_error(tmp_path: Path) -> None:
    root = _beir(
        tmp_path / "mini",
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tnope\t1\nq9\td2\t1\nq2\td3\thigh\nq2\td3\n",
    )
    with pytest.raises(DatasetError) as info:
        BeirDataset(path=str(root)).load()
    assert _where(info.value) == [
        ("test.tsv", 3, "corpus-id"),
        ("test.tsv", 4, "query-id"),
        ("test.tsv", 5, "score"),
        ("test.tsv", 6, ""),
    ]
    assert "doc 'nope' is not in the corpus" in str(info.value)


def test_beir_missing_split_and_bad_max_queries(tmp_path: Path) -> None:
    root = _beir(tmp_path / "mini", "q1\td1\t1\n")
    with pytest.raises(DatasetError, match="Splits found: test"):
        BeirDataset(path=str(root), split="dev").load()
    with pytest.raises(ConfigError):
        BeirDataset(path=str(root), max_queries=0).load()


def test_beir_max_queries_is_a_seeded_subset_in_qrels_order(tmp_path: Path) -> None:
    root = tmp_path / "many"
    _corpus(root / "corpus.jsonl", ["d1"])
    _jsonl(root / "queries.jsonl", [{"_id": f"q{i}", "text": f"query {i}"} for i in range(20)])
    _write(root / "qrels" / "test.tsv", "".join(f"q{i}\td1\t1\n" for i in range(20)))
    order = [f"q{i}" for i in range(20)]

    picks = [
        [s.id for s in BeirDataset(path=str(root), max_queries=5, seed=seed).load().samples]
        for seed in (0, 0, 1)
    ]
    assert picks[0] == picks[1]  # deterministic
    assert picks[0] != picks[2]  # the seed matters
    for ids in picks:
        assert len(ids) == 5
        assert ids == [q for q in order if q in ids]  # qrels order kept
    assert len(BeirDataset(path=str(root), max_queries=50).load().samples) == 20


@pytest.mark.real_data
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="shared SciFact data is absent")
def test_beir_real_scifact_counts() -> None:
    ds = BeirDataset(path=str(SCIFACT)).load()
    assert ds.name == "scifact"
    assert len(ds.corpus) == 5183
    assert len(ds.samples) == 300
    assert sum(len(s.reference_doc_ids) for s in ds.samples) == 339
    assert all(s.reference == "" and s.answerable for s in ds.samples)


# --- configuration ---------------------------------------------------------------------------
def test_loaders_build_from_hydra_style_config(tmp_path: Path) -> None:
    from hydra.utils import instantiate

    data = _jsonl(tmp_path / "a.jsonl", [{"id": "q1", "user_input": "x"}])
    loader = instantiate(
        {"_target_": "rag_experiments.data.jsonl.JsonlDataset", "path": str(data), "corpus": None}
    )
    assert loader.load().samples == [Sample(id="q1", user_input="x")]


def test_row_problem_rendering_is_file_line_field(tmp_path: Path) -> None:
    log = RowLog(tmp_path / "f.jsonl")
    log.rows = 1
    log.problem(1, "id", "bad")
    assert log.problems == [RowProblem(str(tmp_path / "f.jsonl"), 1, "id", "bad")]
    with pytest.raises(DatasetError, match=r"f\.jsonl:1:id: bad"):
        log.raise_if_any("see the schema")


def _strata_dataset(counts: dict[tuple[str, bool], int]):
    from rag_experiments.data.base import EvalDataset
    from rag_experiments.records import Sample

    samples = [
        Sample(id=f"{t}{'+' if ok else '-'}{i}", user_input="q?", question_type=t, answerable=ok)
        for (t, ok), k in counts.items()
        for i in range(k)
    ]
    return EvalDataset("x", samples)


def test_subset_is_proportional_seeded_and_ordered():
    from collections import Counter

    # a: 8 answerable + 2 not, b: 6, c: 3 + 1 (17 answerable, 3 not, N = 20)
    ds = _strata_dataset({("a", True): 8, ("a", False): 2, ("b", True): 6, ("c", True): 3,
                          ("c", False): 1})  # fmt: skip
    sub = ds.subset(8, seed=1)
    # by hand: answerability 8*17/20 = 6.8 -> 6, 8*3/20 = 1.2 -> 1, the seat left to .8:
    # 7 + 1. Answerable over types: 7*8/17 = 3.29, 7*6/17 = 2.47, 7*3/17 = 1.24 -> 3, 2, 1
    # and the seat left to b (.47): 3, 3, 1. Unanswerable: 1*2/3 = .67 (a), .33 (c) -> a.
    assert Counter((s.question_type, s.answerable) for s in sub.samples) == {
        ("a", True): 3, ("b", True): 3, ("c", True): 1, ("a", False): 1,
    }  # fmt: skip
    order = [s.id for s in ds.samples]
    assert [order.index(s.id) for s in sub.samples] == sorted(
        order.index(s.id) for s in sub.samples
    )
    assert [s.id for s in ds.subset(8, seed=1).samples] == [s.id for s in sub.samples]
    assert len({tuple(s.id for s in ds.subset(8, seed=k).samples) for k in range(5)}) > 1
    assert sub.digest != ds.digest and ds.subset(100) is ds


def test_subset_gives_every_type_a_seat_when_n_reaches_the_number_of_types():
    from collections import Counter

    # d has 1 of 21 questions: its quota 4*1/21 = .19 gets no seat by the remainders
    ds = _strata_dataset({("a", True): 8, ("a", False): 2, ("b", True): 6, ("c", True): 3,
                          ("c", False): 1, ("d", True): 1})  # fmt: skip
    # by hand: answerability 4*18/21 = 3.43, 4*3/21 = .57 -> 3 + 1; answerable 3*8/18 = 1.33,
    # 3*6/18 = 1, 3*3/18 = .5, 3*1/18 = .17 -> a, b, c; unanswerable 2/3 vs 1/3 -> a. Type d
    # has none: it takes the seat of a's answerable stratum (a keeps its unanswerable one).
    for seed in range(3):
        sub = ds.subset(4, seed=seed)
        assert Counter((s.question_type, s.answerable) for s in sub.samples) == {
            ("a", False): 1, ("b", True): 1, ("c", True): 1, ("d", True): 1,
        }  # fmt: skip
    # fewer seats than types: no minimum, the remainders decide (d's .1 loses)
    assert "d" not in {s.question_type for s in ds.subset(3).samples}


def test_max_samples_8_of_the_bundled_sample_spreads_types_and_answerability():
    """The bundled sample: 8 types, 9 of 69 questions unanswerable. ``make run``'s 8
    questions are one per type, 7 answerable and 1 unanswerable (quota 8*9/69 = 1.04), for any
    seed; 16 give 2 unanswerable (2.09) and every type."""
    from collections import Counter

    from rag_experiments.data.base import EvalDataset
    from rag_experiments.locations import PROJECT_ROOT
    from rag_experiments.records import Sample

    lines = (PROJECT_ROOT / "datasets" / "sample" / "eval.jsonl").read_text().splitlines()
    ds = EvalDataset("sample", [Sample.model_validate(json.loads(x)) for x in lines if x])
    types = {s.question_type for s in ds.samples}
    assert len(types) == 8 and sum(not s.answerable for s in ds.samples) == 9
    for seed in range(5):
        sub = ds.subset(8, seed=seed)
        assert Counter(s.question_type for s in sub.samples) == {t: 1 for t in types}
        assert sum(not s.answerable for s in sub.samples) == 1
        sub16 = ds.subset(16, seed=seed)
        assert {s.question_type for s in sub16.samples} == types
        assert sum(not s.answerable for s in sub16.samples) == 2


def test_row_counts_are_the_files_rows_whatever_the_encoding(tmp_path: Path) -> None:
    """A UTF-16 file of 4 rows said "5 of 4 rows are invalid"; one line of bad UTF-8 among 4
    said "1 of 3 rows". UTF-16 with its byte order mark is read; a bad line counts as a row."""
    rows = [{"id": f"q{i}", "user_input": f"question {i}?"} for i in range(4)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    for encoding in ("utf-16", "utf-16-be"):  # utf-16 writes the BOM; add it for big-endian
        path = tmp_path / f"{encoding}.jsonl"
        bom = b"\xfe\xff" if encoding == "utf-16-be" else b""
        path.write_bytes(bom + text.encode(encoding))
        ds = JsonlDataset(path=str(path)).load()
        assert [s.id for s in ds.samples] == ["q0", "q1", "q2", "q3"]
    bad = tmp_path / "bad_utf8.jsonl"
    lines = [json.dumps(r).encode() for r in rows]
    lines[2] = b'{"id": "q2", "user_input": "caf\xe9?"}'  # Latin-1 é: not UTF-8
    bad.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DatasetError) as info:
        JsonlDataset(path=str(bad)).load()
    assert _where(info.value) == [("bad_utf8.jsonl", 3, "")]
    assert str(info.value).startswith(f"1 of 4 rows in {bad} are invalid")
