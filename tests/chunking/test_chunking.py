"""Tests for the chunkers (rag_experiments.chunking)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rag_experiments.chunking import FixedChunker, NoChunker, SemanticChunker
from rag_experiments.errors import ConfigError
from rag_experiments.protocols import Chunker
from rag_experiments.records import Chunk, Document
from rag_experiments.text import normalize_text

REAL_DOCS = Path(__file__).resolve().parents[3] / "shared" / "real" / "docs"

FIXED_CONFIGS = [(512, 64), (100, 0), (50, 49), (10, 3), (1, 0)]
SEMANTIC_CONFIGS = [(800, 200), (100, 30), (50, 0), (10, 5)]


def _generated_texts(n: int = 40, seed: int = 7) -> list[str]:
    """Documents mixing headings, title lines, prose, single and blank-line breaks, very long
    words and unpunctuated long lines; whitespace runs stay short."""
    rng = random.Random(seed)
    vocabulary = [
        "policy",
        "Access",
        "the",
        "a",
        "request",
        "approve",
        "x",
        "manager",
        "IT",
        "incident",
        "log",
        "éclair",
        "ﬁle",
        "3.2",
        "e-mail",
        "(see",
        "below)",
    ]

    def sentence() -> str:
        words = [rng.choice(vocabulary) for _ in range(rng.randint(1, 25))]
        return " ".join(words) + rng.choice([".", ".", "?", "!", "", ":"])

    texts = []
    for _ in range(n):
        blocks = []
        for _ in range(rng.randint(0, 12)):
            kind = rng.random()
            if kind < 0.15:
                blocks.append("#" * rng.randint(1, 3) + " " + sentence().rstrip(".?!:"))
            elif kind < 0.25:
                blocks.append(rng.choice(["Scope", "3.1 Roles", "Who Approves?"]))
            elif kind < 0.3:
                blocks.append("z" * rng.randint(50, 2000))
            elif kind < 0.35:
                blocks.append(" ".join(rng.choice(vocabulary) for _ in range(400)))
            else:
                blocks.append(" ".join(sentence() for _ in range(rng.randint(1, 8))))
            blocks.append(rng.choice(["\n", "\n", "\n\n", " \n", "\n\t\n"]))
        texts.append(rng.choice(["", " ", "\n"]) + "".join(blocks))
    return texts


GENERATED = _generated_texts()


def _doc(text: str, **metadata: object) -> Document:
    return Document(id="doc", text=text, title="Title", metadata=dict(metadata))


def _check_common(doc: Document, chunks: list[Chunk]) -> None:
    """Ids, positions and offsets of any chunker's output."""
    for position, chunk in enumerate(chunks):
        assert chunk.id == f"doc#{position}"
        assert chunk.position == position
        assert chunk.doc_id == "doc"
        assert 0 <= chunk.start < chunk.end <= len(doc.text)
        assert chunk.text == doc.text[chunk.start : chunk.end]
        assert chunk.text.strip()
        assert chunk.metadata["title"] == "Title"
    assert [c.start for c in chunks] == sorted(c.start for c in chunks)


# -- protocol and configuration -------------------------------------------------------------


def test_chunkers_implement_the_protocol_with_distinct_config_ids() -> None:
    chunkers = [NoChunker(), FixedChunker(), FixedChunker(256, 0), SemanticChunker()]
    assert all(isinstance(c, Chunker) for c in chunkers)
    assert [c.config_id for c in chunkers] == [
        "none",
        "fixed-size512-overlap64",
        "fixed-size256-overlap0",
        "semantic-size800-min200",
    ]


@pytest.mark.parametrize(
    ("size", "overlap"), [(100, 100), (100, 150), (100, -1), (0, 0), (100.0, 10), (True, 0)]
)
def test_fixed_rejects_bad_config(size: object, overlap: object) -> None:
    with pytest.raises(ConfigError):
        FixedChunker(size, overlap)  # type: ignore[arg-type]


@pytest.mark.parametrize(("size", "min_size"), [(200, 200), (200, 300), (200, -1), (0, 0)])
def test_semantic_rejects_bad_config(size: int, min_size: int) -> None:
    with pytest.raises(ConfigError):
        SemanticChunker(size, min_size)


@pytest.mark.parametrize("chunker", [NoChunker(), FixedChunker(), SemanticChunker()])
@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n"])
def test_blank_document_gives_no_chunks(chunker: Chunker, text: str) -> None:
    assert chunker.split(_doc(text)) == []


# -- NoChunker ------------------------------------------------------------------------------


def test_no_chunker_one_stripped_chunk() -> None:
    doc = _doc("  hello world \n", source="/x.md")
    [chunk] = NoChunker().split(doc)
    assert (chunk.text, chunk.start, chunk.end) == ("hello world", 2, 13)
    assert chunk.metadata == {"title": "Title", "source": "/x.md"}


# -- FixedChunker ---------------------------------------------------------------------------


def test_fixed_hand_computed_windows() -> None:
    # size 10, overlap 2, word-boundary search in the last 10 // 5 = 2 characters.
    # Window [0, 10) ends before "c" but text[9] is a space → cut at 9.
    # Next window starts at 9 - 2 = 7: [7, 17) has no space at 15..17 → hard cut at 17.
    # Next starts at 15 and reaches the end.
    chunks = FixedChunker(10, 2).split(_doc("aaaa bbbb cccc dddd"))
    assert [(c.start, c.end, c.text) for c in chunks] == [
        (0, 9, "aaaa bbbb"),
        (7, 17, "bb cccc dd"),
        (15, 19, "dddd"),
    ]


@pytest.mark.parametrize(("size", "overlap"), FIXED_CONFIGS)
def test_fixed_covers_every_non_whitespace_character(size: int, overlap: int) -> None:
    chunker = FixedChunker(size, overlap)
    for text in GENERATED:
        doc = _doc(text)
        chunks = chunker.split(doc)
        _check_common(doc, chunks)
        assert all(len(c.text) <= size for c in chunks)
        covered = [False] * len(text)
        for chunk in chunks:
            covered[chunk.start : chunk.end] = [True] * (chunk.end - chunk.start)
        assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))


@pytest.mark.parametrize(("size", "overlap"), [c for c in FIXED_CONFIGS if c[0] >= 10])
def test_fixed_tiles_normalised_text_with_exact_overlap(size: int, overlap: int) -> None:
    # Normalised text has no whitespace run longer than "\n\n", so no window is blank and
    # the windows tile the text exactly.
    chunker = FixedChunker(size, overlap)
    for text in GENERATED:
        text = normalize_text(text)
        chunks = chunker.split(_doc(text))
        if not text:
            assert chunks == []
            continue
        assert chunks[0].start == 0 and chunks[-1].end == len(text)
        for previous, following in zip(chunks, chunks[1:], strict=False):
            assert following.start == previous.end - overlap
            assert following.start > previous.start


def test_fixed_prefers_word_boundaries_in_last_fifth() -> None:
    text = " ".join(["word"] * 200)  # a space every 5 characters
    chunks = FixedChunker(100, 10).split(_doc(text))
    for chunk in chunks[:-1]:
        assert text[chunk.end] == " "  # never cut inside a word
        assert len(chunk.text) >= 80


# -- SemanticChunker ------------------------------------------------------------------------


def _check_semantic(doc: Document, chunks: list[Chunk], size: int) -> None:
    _check_common(doc, chunks)
    for previous, following in zip(chunks, chunks[1:], strict=False):
        assert previous.end <= following.start  # no overlap
    # Every non-whitespace character lies in exactly one chunk: the gaps are whitespace.
    cursor, gaps = 0, []
    for chunk in chunks:
        gaps.append(doc.text[cursor : chunk.start])
        cursor = chunk.end
    gaps.append(doc.text[cursor:])
    assert "".join(gaps).strip() == ""
    assert all(len(c.text) <= size for c in chunks[:-1])
    if chunks:
        assert len(chunks[-1].text) <= 1.2 * size


@pytest.mark.parametrize(("size", "min_size"), SEMANTIC_CONFIGS)
def test_semantic_loses_no_text_and_respects_sizes(size: int, min_size: int) -> None:
    chunker = SemanticChunker(size, min_size)
    for text in GENERATED:
        doc = _doc(text)
        _check_semantic(doc, chunker.split(doc), size)


def test_semantic_splits_docx_style_text_at_line_ends() -> None:
    # DOCX text: one paragraph per line, no blank lines; each line is 151 characters.
    lines = [f"Paragraph {i} " + "word " * 27 + "end." for i in range(10)]
    text = "\n".join(lines)
    doc = _doc(text)

    chunks = SemanticChunker(400, 100).split(doc)

    _check_semantic(doc, chunks, 400)
    assert [c.text for c in chunks] == ["\n".join(lines[i : i + 2]) for i in range(0, 10, 2)]


def test_semantic_headings_start_chunks_once_min_size_is_reached() -> None:
    body = ("Staff submit a request. " * 13).strip()  # 311 characters
    text = f"# Intro\n{body}\n# Details\n{body}\n## Sub\nShort closing note."
    doc = _doc(text)

    chunks = SemanticChunker(800, 200).split(doc)

    _check_semantic(doc, chunks, 800)
    # "# Details" starts a chunk (the first has 319 >= 200 characters); "## Sub" would too,
    # but its chunk is shorter than min_size and is merged back.
    assert [c.text.split("\n")[0] for c in chunks] == ["# Intro", "# Details"]
    assert chunks[1].text.endswith("## Sub\nShort closing note.")


def test_semantic_heading_does_not_split_a_chunk_below_min_size() -> None:
    text = "# A\nOne line.\n# B\nAnother line."
    assert len(SemanticChunker(800, 200).split(_doc(text))) == 1
    assert len(SemanticChunker(800, 5).split(_doc(text))) == 2


def test_semantic_short_title_line_rule() -> None:
    follows_sentence = (
        "The intro ends with a full stop.\nScope and Purpose\n"
        "This longer line follows the title line and explains the scope."
    )
    wrapped = follows_sentence.replace("full stop.", "line that wraps")
    chunker = SemanticChunker(800, 0)

    titled = chunker.split(_doc(follows_sentence))
    assert [c.text.split("\n")[0] for c in titled] == [
        "The intro ends with a full stop.",
        "Scope and Purpose",
    ]
    # After a line that does not end a sentence, the short line is part of a paragraph.
    assert len(chunker.split(_doc(wrapped))) == 1


def test_semantic_long_line_is_cut_at_sentence_ends() -> None:
    text = " ".join(f"Sentence number {i:02d} says something." for i in range(40))
    doc = _doc(text)
    chunks = SemanticChunker(200, 50).split(doc)
    _check_semantic(doc, chunks, 200)
    assert len(chunks) > 5
    assert all(c.text.endswith("something.") for c in chunks)


def test_semantic_hard_cuts_a_word_longer_than_size() -> None:
    chunks = SemanticChunker(800, 200).split(_doc("x" * 2000))
    assert [len(c.text) for c in chunks] == [800, 800, 400]


def test_semantic_merges_short_trailing_chunk_up_to_120_percent() -> None:
    first = " ".join(["word"] * 18) + "."  # 90 characters
    merged = SemanticChunker(100, 30).split(_doc(first + "\n\nTail sentence."))
    assert [c.text for c in merged] == [first + "\n\nTail sentence."]  # 106 <= 120

    longer = " ".join(["word"] * 20)[:99] + "."  # 100 characters
    tail = "A twenty-five char tail.."
    kept = SemanticChunker(100, 30).split(_doc(longer + "\n\n" + tail))
    assert [c.text for c in kept] == [longer, tail]  # 127 > 120: not merged


# -- page metadata --------------------------------------------------------------------------


def test_chunk_pages_come_from_page_starts() -> None:
    doc = _doc("x" * 100, page_starts=[0, 50], source="/m.pdf")
    fixed = FixedChunker(40, 0).split(doc)
    assert [(c.start, c.metadata["page"]) for c in fixed] == [(0, 1), (40, 1), (80, 2)]
    assert fixed[0].metadata == {"title": "Title", "page": 1, "source": "/m.pdf"}
    assert NoChunker().split(doc)[0].metadata["page"] == 1
    assert "page" not in NoChunker().split(_doc("no pages"))[0].metadata


@pytest.mark.skipif(not REAL_DOCS.is_dir(), reason="../shared/real is absent")
@pytest.mark.real_data
def test_semantic_on_a_real_pdf() -> None:
    from rag_experiments.text import extract_file

    extracted = extract_file(REAL_DOCS / "NIST.SP.800-40r3.pdf")
    doc = _doc(extracted.text, page_starts=extracted.page_starts)

    chunks = SemanticChunker(800, 200).split(doc)

    _check_semantic(doc, chunks, 800)
    pages = [c.metadata["page"] for c in chunks]
    assert pages == sorted(pages) and pages[0] == 1 and pages[-1] >= 25
    assert 60 < len(chunks) < 150  # ~60k characters in chunks of at most 800
