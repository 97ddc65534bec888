"""Tests for text normalisation and file extraction (rag_experiments.text)."""

from __future__ import annotations

import random
from pathlib import Path

import docx
import pytest
from fpdf import FPDF
from fpdf.enums import EncryptionMethod

from rag_experiments.errors import ExtractionError
from rag_experiments.text import ExtractedText, extract_file, normalize_text

REAL = Path(__file__).resolve().parents[3] / "shared" / "real"
REAL_DOCS = REAL / "docs"
needs_real = pytest.mark.skipif(not REAL_DOCS.is_dir(), reason="../shared/real is absent")
DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


# -- normalize_text -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("the \ufb01le is of\ufb02ine", "the file is offline"),  # NFKC ligatures
        ("nul\x00byte and bell\x07", "nulbyte and bell"),
        ("a\r\nb\rc", "a\nb\nc"),
        ("page\x0cbreak", "page\nbreak"),
        ("manage-\nment", "management"),
        ("manage-  \n  ment", "management"),
        ("manage\u00ad\nment", "management"),  # soft hyphen at a line break
        ("soft\u00adhyphen", "softhyphen"),
        ("Wi-\nFi", "Wi-\nFi"),  # uppercase after the break: kept
        ("COVID-\n19", "COVID-\n19"),  # digit after the break: kept
        ("a follow-up task", "a follow-up task"),  # hyphen inside a line: kept
        ("e-\nmail", "email"),  # documented limitation
        ("a  \t b", "a b"),
        ("non\u00a0breaking\u2003space", "non breaking space"),
        ("line   \n   next", "line\nnext"),
        ("a\n\n\n\nb", "a\n\nb"),
        ("a\n \t \n  \nb", "a\n\nb"),
        ("\ufeff\n\n  text  \n\n", "text"),
        ("zero\u200bwidth", "zerowidth"),
        ("", ""),
    ],
)
def test_normalize_text_rules(raw: str, expected: str) -> None:
    assert normalize_text(raw) == expected


def test_normalize_text_is_idempotent_on_generated_strings() -> None:
    alphabet = list("aZé -.\n\n\r\t1") + [
        "\x00",
        "\x07",
        "\u00ad",
        "\ufb01",
        "\u00a0",
        "\u0301",
        "\u00b4",
        "\u2028",
        "\u200b",
        "\ufeff",
        "\u2010",
        "\u2011",
        "\u3000",
        "\u1100",
        "\u1161",
    ]
    rng = random.Random(1234)
    for _ in range(2000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        once = normalize_text(raw)
        assert normalize_text(once) == once, repr(raw)
        assert "\x00" not in once and "\r" not in once and "\n\n\n" not in once
        assert once == once.strip()


# -- DOCX -----------------------------------------------------------------------------------


def _docx_with_nested_table(path: Path) -> None:
    document = docx.Document()
    document.add_heading("Access Policy", level=0)  # style "Title"
    document.add_paragraph("Intro text.")
    document.add_heading("Scope", level=2)
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "A"
    table.cell(0, 1).text = "B"
    table.cell(1, 0).text = "C"
    outer = table.cell(1, 1)
    outer.paragraphs[0].text = "before"
    nested = outer.add_table(rows=1, cols=2)
    nested.cell(0, 0).text = "N1"
    nested.cell(0, 1).text = "N2"
    outer.add_paragraph("after")
    document.add_paragraph("")  # empty paragraphs leave no line
    document.add_paragraph("After table.")
    document.save(str(path))


def test_docx_paragraphs_headings_and_nested_tables_in_document_order(tmp_path: Path) -> None:
    path = tmp_path / "policy.docx"
    _docx_with_nested_table(path)

    result = extract_file(path)

    assert result.text == (
        "# Access Policy\nIntro text.\n## Scope\nA | B\nC | before [N1 | N2] after\nAfter table."
    )
    assert result.page_starts is None and result.n_pages is None
    assert result.metadata["format"] == "docx"


def test_docx_merged_cells_are_written_once(tmp_path: Path) -> None:
    document = docx.Document()
    table = document.add_table(rows=2, cols=3)
    merged = table.cell(0, 0).merge(table.cell(0, 1))
    merged.text = "Wide"
    table.cell(0, 2).text = "X"
    for col, value in enumerate(["1", "2", "3"]):
        table.cell(1, col).text = value
    path = tmp_path / "merged.docx"
    document.save(str(path))

    assert extract_file(path).text == "Wide | X\n1 | 2 | 3"


def test_docx_vertically_merged_cell_repeats_on_each_row(tmp_path: Path) -> None:
    document = docx.Document()
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).merge(table.cell(1, 0)).text = "Category"
    table.cell(0, 1).text = "first"
    table.cell(1, 1).text = "second"
    path = tmp_path / "vmerge.docx"
    document.save(str(path))

    assert extract_file(path).text == "Category | first\nCategory | second"


def test_empty_docx_raises_empty_document(tmp_path: Path) -> None:
    path = tmp_path / "empty.docx"
    document = docx.Document()
    document.add_paragraph("   ")
    document.save(str(path))

    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "empty_document"
    assert info.value.path == str(path)


def test_damaged_docx_raises_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "broken.docx"
    path.write_bytes(b"this is not a zip file")
    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "unreadable"


# -- Markdown / text / other ----------------------------------------------------------------


def test_markdown_and_text_are_read_as_utf8_and_normalised(tmp_path: Path) -> None:
    md = tmp_path / "guide.md"
    md.write_bytes("\ufeff# Guide\r\n\r\n\r\nThe \ufb01rst step.\r\n".encode())
    txt = tmp_path / "notes.txt"
    txt.write_bytes(b"caf\xc3\xa9 and a bad byte \xff here")

    assert extract_file(md) == ExtractedText(
        text="# Guide\n\nThe first step.", metadata={"format": "md"}
    )
    assert extract_file(txt).text == "café and a bad byte \ufffd here"


def test_blank_text_file_raises_empty_document(tmp_path: Path) -> None:
    path = tmp_path / "blank.txt"
    path.write_text(" \n\n \t\n", encoding="utf-8")
    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "empty_document"


@pytest.mark.parametrize("name", ["table.csv", "slides.pptx", "README"])
def test_other_extensions_raise_unsupported_extension(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "unsupported_extension"


def test_missing_file_raises_not_found(tmp_path: Path) -> None:
    with pytest.raises(ExtractionError) as info:
        extract_file(tmp_path / "absent.pdf")
    assert info.value.reason == "not_found"


# -- PDF (built with fpdf2) -----------------------------------------------------------------


def _pdf(path: Path, pages: list[list[str]], **encryption: object) -> Path:
    """Write a PDF with one page per entry, one text line per string (Helvetica)."""
    pdf = FPDF()
    pdf.set_font("Helvetica", size=12)
    for lines in pages:
        pdf.add_page()
        for line in lines:
            pdf.cell(text=line)
            pdf.ln()
    if encryption:
        pdf.set_encryption(**encryption)
    pdf.output(str(path))
    return path


def test_pdf_pages_joined_with_blank_line_and_page_starts_recorded(tmp_path: Path) -> None:
    path = _pdf(
        tmp_path / "guide.pdf",
        [["Patch manage-", "ment is a process."], [], ["Third page."]],
    )

    result = extract_file(path)

    page1 = "Patch management is a process."
    assert result.text == page1 + "\n\nThird page."
    # The empty page 2 starts where page 3 starts.
    assert result.page_starts == [0, len(page1) + 2, len(page1) + 2]
    assert result.n_pages == 3
    assert result.metadata["format"] == "pdf"


@pytest.mark.skipif(not DEJAVU.is_file(), reason="DejaVu font not installed")
def test_pdf_ligatures_become_plain_letters(tmp_path: Path) -> None:
    pdf = FPDF()
    pdf.add_font("DejaVu", fname=str(DEJAVU))
    pdf.set_font("DejaVu", size=12)
    pdf.add_page()
    pdf.cell(text="The \ufb01le is of\ufb01cial.")
    path = tmp_path / "ligature.pdf"
    pdf.output(str(path))

    assert extract_file(path).text == "The file is official."


@pytest.mark.parametrize(
    "method", [EncryptionMethod.RC4, EncryptionMethod.AES_128, EncryptionMethod.AES_256]
)
def test_locked_pdf_needs_the_user_password(tmp_path: Path, method: EncryptionMethod) -> None:
    path = _pdf(
        tmp_path / "locked.pdf",
        [["Secret text."]],
        owner_password="owner",
        user_password="user",
        encryption_method=method,
    )

    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "encrypted"
    assert "docs_password" in str(info.value)
    with pytest.raises(ExtractionError) as wrong:
        extract_file(path, password="nope")
    assert wrong.value.reason == "encrypted"
    assert extract_file(path, password="user").text == "Secret text."


def test_pdf_encrypted_without_user_password_opens(tmp_path: Path) -> None:
    path = _pdf(
        tmp_path / "permissions-only.pdf",
        [["Open text."]],
        owner_password="owner",
        encryption_method=EncryptionMethod.AES_128,
    )
    assert extract_file(path).text == "Open text."
    assert extract_file(path, password="irrelevant").text == "Open text."


def test_pdf_without_text_raises_no_text_layer(tmp_path: Path) -> None:
    pdf = FPDF()
    pdf.add_page()
    pdf.rect(10, 10, 50, 50)
    path = tmp_path / "drawing.pdf"
    pdf.output(str(path))

    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "no_text_layer"
    assert "ocrmypdf" in str(info.value)


def test_damaged_pdf_raises_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "broken.pdf"
    path.write_bytes(b"%PDF-1.4\nnot really a pdf")
    with pytest.raises(ExtractionError) as info:
        extract_file(path)
    assert info.value.reason == "unreadable"


# -- real documents (../shared/real) --------------------------------------------------------


@needs_real
@pytest.mark.real_data
def test_real_nist_pdf_has_pages_and_normalised_text() -> None:
    result = extract_file(REAL_DOCS / "NIST.SP.800-40r3.pdf")

    assert result.n_pages == 26
    assert result.page_starts is not None and len(result.page_starts) == 26
    assert result.page_starts[0] == 0
    assert result.page_starts == sorted(result.page_starts)
    assert all(result.text[s - 2 : s] == "\n\n" for s in result.page_starts[1:])
    assert 55_000 < len(result.text) < 65_000  # pypdf reported 61,605 raw chars
    assert normalize_text(result.text) == result.text
    assert "Patch Management" in result.text


@needs_real
@pytest.mark.real_data
def test_real_docx_tables_and_headings() -> None:
    monitoring = extract_file(
        REAL_DOCS / "FedRAMP-Tailored-LI-SaaS-Continuous-Monitoring-Guide.docx"
    )
    attestation = extract_file(
        REAL_DOCS / "FedRAMP-Tailored-LI-SaaS-Self-Attestation-Requirements.docx"
    )

    assert "\n\n" not in monitoring.text
    lines = monitoring.text.split("\n")
    assert "# Overview" in lines and "## Change Control" in lines
    assert "6/19/2017 | Initial Document | 1.0 | FedRAMP PMO" in lines
    # Mostly tables: 62x5 control rows, one line each.
    assert sum(" | " in line for line in attestation.text.split("\n")) >= 60
    assert any(
        line.startswith("1. | AC-1 | Access Control Policy")
        for line in attestation.text.split("\n")
    )


@needs_real
@pytest.mark.real_data
@pytest.mark.parametrize(
    ("name", "password", "reason"),
    [
        ("encrypted/libreoffice-writer-password.pdf", None, "encrypted"),
        ("encrypted/pypdf_r6-both-passwords.pdf", None, "encrypted"),
        ("encrypted/pypdf_r6-both-passwords.pdf", "wrong", "encrypted"),
        ("encrypted/skew-encrypted_scan.pdf", None, "encrypted"),
        ("encrypted/skew-encrypted_scan.pdf", "password", "no_text_layer"),
        ("scanned/c02-22_huckfinn_scan.pdf", None, "no_text_layer"),
    ],
)
def test_real_pdfs_that_cannot_be_read(name: str, password: str | None, reason: str) -> None:
    with pytest.raises(ExtractionError) as info:
        extract_file(REAL_DOCS / name, password=password)
    assert info.value.reason == reason


@needs_real
@pytest.mark.real_data
@pytest.mark.parametrize(
    ("name", "password", "length"),
    [
        ("encrypted/libreoffice-writer-password.pdf", "openpassword", (550, 600)),
        ("encrypted/pypdf_r6-both-passwords.pdf", "foo", (30, 40)),
        ("encrypted/pypdf_r6-empty-password.pdf", None, (30, 40)),
    ],
)
def test_real_encrypted_pdfs_that_open(
    name: str, password: str | None, length: tuple[int, int]
) -> None:
    result = extract_file(REAL_DOCS / name, password=password)
    assert length[0] <= len(result.text) <= length[1]
    assert result.n_pages == 1 and result.page_starts == [0]
