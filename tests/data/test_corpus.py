"""Tests for corpus loading (rag_experiments.data.corpus)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import docx
import pytest
from fpdf import FPDF

from rag_experiments.data.corpus import load_corpus_folder, load_corpus_jsonl
from rag_experiments.errors import DatasetError, RowProblem

REAL = Path(__file__).resolve().parents[3] / "shared" / "real"


# -- folders --------------------------------------------------------------------------------


def _write_pdf(path: Path, pages: list[str]) -> None:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for text in pages:
        pdf.add_page()
        pdf.cell(text=text)
    pdf.output(str(path))


@pytest.fixture
def corpus_folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "it-access-policy.md").write_text(
        "Intro line.\n\n# Access Policy\n\nUsers request access.\n", encoding="utf-8"
    )
    (root / "sub" / "guide.txt").write_text("Plain guide text.\n", encoding="utf-8")
    document = docx.Document()
    document.add_heading("Onboarding", level=1)
    document.add_paragraph("Day one tasks.")
    document.save(str(root / "onboarding.docx"))
    _write_pdf(root / "manual.pdf", ["Page one.", "Page two."])
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 garbage")
    (root / "data.csv").write_text("a,b\n", encoding="utf-8")
    (root / ".hidden.md").write_text("# Hidden\n", encoding="utf-8")
    (root / ".git" / "config.txt").write_text("ignored\n", encoding="utf-8")
    (root / "~$onboarding.docx").write_bytes(b"lock")
    return root


def test_folder_documents_ids_titles_and_metadata(corpus_folder: Path) -> None:
    docs, skipped = load_corpus_folder(corpus_folder)

    assert [d.id for d in docs] == ["it-access-policy", "manual", "onboarding", "sub/guide"]
    by_id = {d.id: d for d in docs}
    assert by_id["it-access-policy"].title == "Access Policy"  # first heading, not first line
    assert by_id["onboarding"].title == "Onboarding"  # DOCX heading written as "# "
    assert by_id["sub/guide"].title == "guide"  # no heading: file stem
    assert by_id["manual"].title == "manual"

    manual = by_id["manual"]
    assert manual.text == "Page one.\n\nPage two."
    assert manual.metadata == {
        "source": str(corpus_folder / "manual.pdf"),
        "page_starts": [0, 11],
        "n_pages": 2,
    }
    assert manual.page_at(12) == 2
    assert by_id["sub/guide"].metadata == {"source": str(corpus_folder / "sub" / "guide.txt")}
    assert by_id["onboarding"].text == "# Onboarding\nDay one tasks."


def test_folder_skips_bad_files_with_reasons_and_warnings(
    corpus_folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rag_experiments.data.corpus"):
        _, skipped = load_corpus_folder(corpus_folder)

    assert sorted(skipped) == ["broken.pdf", "data.csv"]  # hidden and lock files are ignored
    assert skipped["broken.pdf"].startswith("unreadable: ")
    assert skipped["data.csv"].startswith("unsupported_extension: ")
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.name == "rag_experiments.data.corpus" and r.levelno == logging.WARNING
    ]
    assert len(warned) == 2
    assert any("broken.pdf" in message for message in warned)


def test_folder_not_recursive_ignores_subfolders(corpus_folder: Path) -> None:
    docs, _ = load_corpus_folder(corpus_folder, recursive=False)
    assert "sub/guide" not in [d.id for d in docs]
    assert len(docs) == 3


def test_folder_password_opens_encrypted_pdfs(tmp_path: Path) -> None:
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    pdf.add_page()
    pdf.cell(text="Locked content.")
    pdf.set_encryption(owner_password="o", user_password="secret")
    pdf.output(str(tmp_path / "locked.pdf"))

    docs, skipped = load_corpus_folder(tmp_path)
    assert docs == [] and skipped["locked.pdf"].startswith("encrypted: ")
    assert "docs_password" in skipped["locked.pdf"]

    docs, skipped = load_corpus_folder(tmp_path, password="secret")
    assert [d.text for d in docs] == ["Locked content."] and skipped == {}


def test_folder_duplicate_ids_raise_naming_both_files(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Alpha.\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("Alpha again.\n", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_corpus_folder(tmp_path)
    assert "'a.md'" in str(info.value) and "'a.txt'" in str(info.value)


def test_folder_missing_raises(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_corpus_folder(tmp_path / "nope")


# -- BEIR JSONL -----------------------------------------------------------------------------


def _jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_jsonl_single_file(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"_id": "d1", "title": "T1", "text": "Text one.", "metadata": {"year": 2020}},
            {"_id": 7, "title": None, "text": ""},
        ],
    )
    with path.open("a", encoding="utf-8") as handle:
        handle.write("\n   \n")  # blank lines are skipped

    docs = load_corpus_jsonl(path)

    assert [(d.id, d.title, d.text) for d in docs] == [("d1", "T1", "Text one."), ("7", "", "")]
    assert docs[0].metadata == {"year": 2020, "source": str(path)}


def test_jsonl_folder_prefers_corpus_jsonl_else_reads_shards_in_name_order(
    tmp_path: Path,
) -> None:
    _jsonl(tmp_path / "corpus.part01.jsonl", [{"_id": "b", "text": "B"}])
    _jsonl(tmp_path / "corpus.part00.jsonl", [{"_id": "a", "text": "A"}])
    _jsonl(tmp_path / "queries.jsonl", [{"_id": "q", "text": "not a document"}])
    assert [d.id for d in load_corpus_jsonl(tmp_path)] == ["a", "b"]

    _jsonl(
        tmp_path / "corpus.jsonl",
        [{"_id": "a", "text": "A"}, {"_id": "b", "text": "B"}, {"_id": "c", "text": "C"}],
    )
    assert [d.id for d in load_corpus_jsonl(tmp_path)] == ["a", "b", "c"]


def test_jsonl_normalize_option(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "c.jsonl", [{"_id": "x", "title": "\ufb01t", "text": "a  b\x00"}])
    assert load_corpus_jsonl(path)[0].text == "a  b\x00"
    doc = load_corpus_jsonl(path, normalize=True)[0]
    assert (doc.title, doc.text) == ("fit", "a b")


def test_jsonl_reports_every_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"_id": "ok", "text": "fine"}),
                "{not json",
                json.dumps({"title": "no id", "text": "x"}),
                json.dumps({"_id": "n", "text": 42}),
                json.dumps({"_id": "ok", "text": "again"}),
                json.dumps(["a", "list"]),
                json.dumps({"_id": "m", "text": "t", "metadata": "str"}),
            ]
        )
        + "\n",
        encoding="utf-8",
    )

    with pytest.raises(DatasetError) as info:
        load_corpus_jsonl(path)

    problems = info.value.problems
    assert [(p.line, p.field) for p in problems] == [
        (2, ""),
        (3, "_id"),
        (4, "text"),
        (5, "_id"),
        (6, ""),
        (7, "metadata"),
    ]
    assert all(isinstance(p, RowProblem) and p.path == str(path) for p in problems)
    assert "invalid JSON" in problems[0].message
    assert problems[1].message == "missing _id"
    assert problems[2].message == "text must be a string"
    assert "duplicate _id 'ok'" in problems[3].message and ":1" in problems[3].message
    assert f"{path}:4:text: text must be a string" in str(info.value)


def test_jsonl_missing_path_or_shards_raise(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_corpus_jsonl(tmp_path / "absent.jsonl")
    with pytest.raises(DatasetError, match="corpus"):
        load_corpus_jsonl(tmp_path)


@pytest.mark.skipif(not (REAL / "ir" / "scifact").is_dir(), reason="../shared/real is absent")
@pytest.mark.real_data
def test_real_scifact_shards() -> None:
    docs = load_corpus_jsonl(REAL / "ir" / "scifact")
    assert len(docs) == 5183
    assert len({d.id for d in docs}) == 5183
    assert sum(len(d.text) for d in docs) > 7_000_000
