"""Integrity checks of the bundled sample dataset (``datasets/sample``).

The corpus is read through the project's own loader (:func:`load_corpus_folder`), so these tests
also pin that PDF (pypdf), DOCX (python-docx, tables and a nested table) and Markdown extraction
keep every reference passage of ``eval.jsonl`` findable.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import unicodedata
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from rag_experiments.data.corpus import load_corpus_folder
from rag_experiments.records import QUESTION_TYPES, Document, Sample

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "datasets" / "sample"
DOCS_DIR = SAMPLE_DIR / "docs"
EVAL_FILE = SAMPLE_DIR / "eval.jsonl"

MIN_PER_TYPE = 5
MIN_UNANSWERABLE = 5
YES_NO_OPENERS = {
    "is",
    "are",
    "can",
    "could",
    "does",
    "do",
    "did",
    "should",
    "will",
    "must",
    "may",
    "has",
    "have",
    "was",
    "were",
}


def squash(text: str) -> str:
    """NFKC, then every run of whitespace collapsed to one space (the comparison form)."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    lines = EVAL_FILE.read_text(encoding="utf-8").splitlines()
    return [Sample.model_validate(json.loads(line)) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def corpus() -> tuple[list[Document], dict[str, str]]:
    return load_corpus_folder(DOCS_DIR)


@pytest.fixture(scope="module")
def squashed_texts(corpus: tuple[list[Document], dict[str, str]]) -> dict[str, str]:
    docs, _ = corpus
    return {doc.id: squash(doc.text) for doc in docs}


DISTRACTORS = {
    "committee-minutes",
    "field-station-notices",
    "it-access-policy-2019",
    "staff-newsletter",
}
"""The sample's distractor documents: no question's reference."""


def _load_builder() -> ModuleType:
    """Import ``datasets/sample/build_docs.py`` (not a package) as a module."""
    spec = importlib.util.spec_from_file_location("sample_build_docs", SAMPLE_DIR / "build_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_docs_folder_holds_one_file_per_source_in_its_format() -> None:
    formats = _load_builder().FORMATS
    files = sorted(p.name for p in DOCS_DIR.iterdir() if p.is_file())
    assert files == sorted(f"{doc_id}.{fmt}" for doc_id, fmt in formats.items())
    # the 12 procedures, 4 per format, and the distractor documents (Markdown)
    assert Counter(formats.values()) == {"md": 4 + len(DISTRACTORS), "pdf": 4, "docx": 4}
    assert "it-access-policy.pdf" in files


def test_corpus_loads_every_file_without_skipping(
    corpus: tuple[list[Document], dict[str, str]],
) -> None:
    docs, skipped = corpus
    assert skipped == {}
    assert len(docs) == len(_load_builder().FORMATS)
    assert "it-access-policy" in {d.id for d in docs}
    by_id = {d.id: d for d in docs}
    # The multi-page PDF keeps its page offsets; the first page starts at 0.
    it_policy = by_id["it-access-policy"]
    assert it_policy.metadata["n_pages"] >= 2
    assert it_policy.metadata["page_starts"][0] == 0
    # DOCX and Markdown titles come from their first heading.
    assert by_id["vendor-management"].title == "Vendor Management Procedure"
    assert by_id["remote-work"].title == "Remote Work and Equipment Policy"
    for doc in docs:
        words = len(doc.text.split())
        low = 150 if doc.id in DISTRACTORS else 300
        assert low <= words <= 1000, (doc.id, words)


def test_no_question_is_answered_by_a_distractor_document() -> None:
    """The distractors share the questions' words (so chunking choices move doc-level
    ranking, issue 41) but no question's reference is in them."""
    rows = [json.loads(line) for line in (SAMPLE_DIR / "eval.jsonl").open(encoding="utf-8")]
    referenced = {d for row in rows for d in row["reference_doc_ids"]}
    assert referenced.isdisjoint(DISTRACTORS)
    assert len(referenced) == len(_load_builder().FORMATS) - len(DISTRACTORS)


def test_vendor_management_nested_table_is_extracted(squashed_texts: dict[str, str]) -> None:
    text = squashed_texts["vendor-management"]
    # The extractor writes a nested table inside its cell as "[row ; row]".
    assert "Tier 1 vendors must pass every check below. [Check | Requirement ; " in text
    assert "with a Tier 2 vendor every 12 months.]" in text


def test_samples_validate_with_unique_ids(samples: list[Sample]) -> None:
    ids = [s.id for s in samples]
    assert len(ids) == len(set(ids))
    assert all(s.question_type in QUESTION_TYPES for s in samples)


def test_counts_per_question_type(samples: list[Sample]) -> None:
    answerable = Counter(s.question_type for s in samples if s.answerable)
    for qtype in QUESTION_TYPES:
        assert answerable[qtype] >= MIN_PER_TYPE, qtype
    assert sum(answerable.values()) >= 40
    assert sum(1 for s in samples if not s.answerable) >= MIN_UNANSWERABLE


def test_answerable_samples_are_complete(samples: list[Sample]) -> None:
    for s in samples:
        if not s.answerable:
            continue
        assert len(s.reference.split()) >= 12, s.id
        assert s.reference_doc_ids, s.id
        assert len(set(s.reference_doc_ids)) == len(s.reference_doc_ids), s.id
        assert s.reference_contexts, s.id
        assert 3 <= len(s.keywords) <= 6, s.id
        if s.question_type == "multi_hop":
            assert len(s.reference_doc_ids) == 2, s.id
        else:
            assert len(s.reference_doc_ids) == 1, s.id


def test_unanswerable_samples_point_nowhere(samples: list[Sample]) -> None:
    for s in samples:
        if s.answerable:
            continue
        assert s.reference_doc_ids == [], s.id
        assert s.reference_contexts == [], s.id
        assert s.keywords == [], s.id


def test_questions_are_not_yes_no(samples: list[Sample]) -> None:
    for s in samples:
        opener = s.user_input.split()[0].lower()
        assert opener not in YES_NO_OPENERS, (s.id, s.user_input)
        assert s.user_input.rstrip().endswith("?"), s.id


def test_reference_doc_ids_exist(samples: list[Sample], squashed_texts: dict[str, str]) -> None:
    for s in samples:
        for doc_id in s.reference_doc_ids:
            assert doc_id in squashed_texts, (s.id, doc_id)


def test_reference_contexts_are_verbatim(
    samples: list[Sample], squashed_texts: dict[str, str]
) -> None:
    missing = []
    for s in samples:
        for context in s.reference_contexts:
            if not any(squash(context) in squashed_texts[d] for d in s.reference_doc_ids):
                missing.append((s.id, context))
    assert missing == []


def test_multi_hop_needs_a_context_from_each_document(
    samples: list[Sample], squashed_texts: dict[str, str]
) -> None:
    for s in samples:
        if s.question_type != "multi_hop" or not s.answerable:
            continue
        for doc_id in s.reference_doc_ids:
            assert any(squash(c) in squashed_texts[doc_id] for c in s.reference_contexts), (
                s.id,
                doc_id,
            )


def test_keywords_appear_in_reference_contexts(samples: list[Sample]) -> None:
    for s in samples:
        joined = squash(" ".join(s.reference_contexts)).lower()
        for keyword in s.keywords:
            assert squash(keyword).lower() in joined, (s.id, keyword)


def test_committed_docs_match_a_fresh_build(
    tmp_path: Path, corpus: tuple[list[Document], dict[str, str]]
) -> None:
    """The files in docs/ are up to date with source/ (compared by extracted text, so a new
    fpdf2 or python-docx version that changes bytes but not text does not fail this)."""
    builder = _load_builder()
    written = builder.build(tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in DOCS_DIR.iterdir())
    fresh, skipped = load_corpus_folder(tmp_path)
    assert skipped == {}
    committed, _ = corpus
    assert {d.id: d.text for d in fresh} == {d.id: d.text for d in committed}


def test_build_is_deterministic(tmp_path: Path) -> None:
    builder = _load_builder()
    first = {p.name: p.read_bytes() for p in builder.build(tmp_path / "a")}
    second = {p.name: p.read_bytes() for p in builder.build(tmp_path / "b")}
    assert first == second
