"""Render the bundled sample corpus from its Markdown sources into ``docs/``.

The sixteen documents (12 procedures, 4 distractors) of the fictional Tarnwick Hydrology
Institute are authored as Markdown in ``source/<doc-id>.md``. This script writes each one to
``docs/`` in the format listed in :data:`FORMATS`:

* ``md``: copied byte for byte;
* ``pdf``: rendered with fpdf2 (core font Helvetica, left-aligned, no hyphenation, a footer with
  the document code and page number on every page);
* ``docx``: rendered with python-docx (``#``/``##`` as Heading 1/Heading 2 styles, ``- `` items
  as List Bullet paragraphs, pipe tables as real Word tables with the Table Grid style).

The sources use a small Markdown subset: ``#``/``##``/``###`` headings, paragraphs, ``- ``
bullet items, pipe tables (first row = header, second row = ``|---|`` separator) and one
extension for nested tables (DOCX only; the PDF renderer leaves them out)::

    | Tier | Checks |
    |---|---|
    | Tier 1 | Text before the nested table. {{nested:tier1}} |

    ::: nested tier1
    | Check | Requirement |
    |---|---|
    | ... | ... |
    :::

The marker ``{{nested:NAME}}`` is removed from the cell text and the table of the block
``::: nested NAME`` is added inside that cell.

The build is deterministic: PDF creation dates, the PDF file identifier, DOCX core properties and
the timestamps of the DOCX zip entries are all fixed, so running the script twice gives
identical bytes (with the same fpdf2 and python-docx versions).

Usage::

    python datasets/sample/build_docs.py            # writes datasets/sample/docs/
    python datasets/sample/build_docs.py --out DIR  # writes elsewhere
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import docx
from docx.document import Document as DocxDocument
from docx.shared import Pt
from docx.table import _Cell
from fpdf import FPDF
from fpdf.enums import XPos, YPos

from rag_experiments.errors import DatasetError

HERE = Path(__file__).resolve().parent
SOURCE_DIR = HERE / "source"
DOCS_DIR = HERE / "docs"

ORGANISATION = "Tarnwick Hydrology Institute"
FIXED_DATE = datetime(2024, 6, 1, 9, 0, 0, tzinfo=timezone.utc)
"""Creation/modification date written into every generated PDF and DOCX."""
ZIP_DATE = (2024, 6, 1, 9, 0, 0)
"""Timestamp of every entry of a generated DOCX archive."""

FORMATS: dict[str, str] = {
    "it-access-policy": "pdf",
    "incident-response": "pdf",
    "workplace-safety": "pdf",
    "business-continuity": "pdf",
    "purchasing-approvals": "docx",
    "travel-expenses": "docx",
    "data-retention": "docx",
    "vendor-management": "docx",
    "onboarding-offboarding": "md",
    "change-management": "md",
    "physical-security": "md",
    "remote-work": "md",
    # distractors: no question's reference; they share the questions' words (issue 41)
    "committee-minutes": "md",
    "it-access-policy-2019": "md",
    "staff-newsletter": "md",
    "field-station-notices": "md",
}
"""Output format of each document, keyed by doc id (= source file stem)."""

_LATIN1_MAP = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2026": "...",
        "\u00a0": " ",
    }
)
_NESTED_MARKER = re.compile(r"\s*\{\{nested:([A-Za-z0-9_-]+)\}\}\s*")
_DOC_CODE = re.compile(r"Document ID: ([A-Z0-9-]+)\.")


@dataclass
class Heading:
    """A heading line (``#`` = level 1)."""

    level: int
    text: str


@dataclass
class Paragraph:
    """A paragraph of running text (consecutive lines joined by single spaces)."""

    text: str


@dataclass
class BulletItem:
    """One ``- `` list item."""

    text: str


@dataclass
class Table:
    """A pipe table; ``rows[0]`` is the header row."""

    rows: list[list[str]]


Block = Heading | Paragraph | BulletItem | Table


@dataclass
class SourceDoc:
    """A parsed source document.

    Attributes:
        doc_id: File stem of the source, also the id of the rendered document.
        blocks: Body blocks in reading order.
        nested: Tables of the ``::: nested NAME`` blocks, keyed by NAME.
    """

    doc_id: str
    blocks: list[Block]
    nested: dict[str, Table] = field(default_factory=dict)

    @property
    def title(self) -> str:
        """Text of the first level-1 heading, or the doc id when there is none."""
        for block in self.blocks:
            if isinstance(block, Heading) and block.level == 1:
                return block.text
        return self.doc_id

    @property
    def code(self) -> str:
        """The document code (``IT-POL-01``) from the ``Document ID:`` line, or ``""``."""
        for block in self.blocks:
            if isinstance(block, Paragraph):
                match = _DOC_CODE.search(block.text)
                if match:
                    return match.group(1)
        return ""


def _split_row(line: str) -> list[str]:
    """Split ``| a | b |`` into ``["a", "b"]``."""
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _parse_table(lines: list[str], path: Path, line_no: int) -> Table:
    """Parse the lines of one pipe table (header, separator, body rows).

    Raises:
        DatasetError: When the separator row is missing or a row has the wrong number of cells.
    """
    if len(lines) < 2 or not re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", lines[1]):
        raise DatasetError(
            f"{path}:{line_no + 1}: a pipe table needs a separator row like '|---|---|' "
            "right after its header row; add one."
        )
    rows = [_split_row(lines[0])] + [_split_row(line) for line in lines[2:]]
    width = len(rows[0])
    for offset, row in enumerate(rows):
        if len(row) != width:
            raise DatasetError(
                f"{path}:{line_no + offset + 1}: table row has {len(row)} cells but the header "
                f"has {width}; make every row the same width."
            )
    return Table(rows)


def parse_source(path: Path) -> SourceDoc:
    """Parse one Markdown source file of the supported subset.

    Args:
        path: ``source/<doc-id>.md``.

    Returns:
        The parsed document.

    Raises:
        DatasetError: On a malformed table, an unterminated nested block, or a nested-table
            marker that names no block.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    nested: dict[str, Table] = {}
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            blocks.append(Paragraph(" ".join(paragraph)))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        stripped = line.strip()
        if not stripped:
            flush()
            i += 1
        elif stripped.startswith("::: nested "):
            flush()
            name = stripped[len("::: nested ") :].strip()
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != ":::":
                body.append(lines[i].strip())
                i += 1
            if i == len(lines):
                raise DatasetError(
                    f"{path}:{start + 1}: nested block '{name}' has no closing ':::' line; add one."
                )
            nested[name] = _parse_table(body, path, start + 1)
            i += 1
        elif stripped.startswith("|"):
            flush()
            start = i
            table_lines: list[str] = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                table_lines.append(lines[i].strip())
                i += 1
            blocks.append(_parse_table(table_lines, path, start))
        elif heading := re.match(r"(#{1,3}) (.+)", stripped):
            flush()
            blocks.append(Heading(len(heading.group(1)), heading.group(2).strip()))
            i += 1
        elif stripped.startswith("- "):
            flush()
            blocks.append(BulletItem(stripped[2:].strip()))
            i += 1
        else:
            paragraph.append(stripped)
            i += 1
    flush()

    for block in blocks:
        if isinstance(block, Table):
            for row in block.rows:
                for cell in row:
                    for name in _NESTED_MARKER.findall(cell):
                        if name not in nested:
                            raise DatasetError(
                                f"{path}: table cell refers to {{{{nested:{name}}}}} but there is "
                                f"no '::: nested {name}' block; add the block or fix the name."
                            )
    return SourceDoc(path.stem, blocks, nested)


def to_latin1(text: str, where: str) -> str:
    """Map typographic characters to ASCII and check the text fits the PDF core fonts.

    Args:
        text: Text to render with a core (latin-1) font.
        where: Location for the error message.

    Returns:
        The mapped text.

    Raises:
        DatasetError: When a character outside latin-1 remains.
    """
    mapped = text.translate(_LATIN1_MAP)
    try:
        mapped.encode("latin-1")
    except UnicodeEncodeError as exc:
        bad = mapped[exc.start]
        raise DatasetError(
            f"{where}: character {bad!r} (U+{ord(bad):04X}) cannot be rendered with a PDF core "
            "font; replace it with an ASCII equivalent in the source."
        ) from exc
    return mapped


class _PolicyPDF(FPDF):
    """FPDF with a fixed footer: organisation, document code and page number."""

    def __init__(self, code: str) -> None:
        super().__init__(format="A4", unit="mm")
        self.code = code

    def footer(self) -> None:
        """Draw ``<organisation> - <code> - Page n of N`` 12 mm above the bottom edge."""
        self.set_y(-12)
        self.set_font("Helvetica", size=8)
        label = f"{ORGANISATION} - {self.code} - Page {self.page_no()} of {{nb}}"
        self.cell(0, 5, label, align="C")


def _write_wrapped(pdf: FPDF, line_height: float, text: str) -> None:
    """Write ``text`` left-aligned from the current x to the right margin, wrapping at spaces
    only (fpdf2 never hyphenates unless the text holds soft hyphens), then go to the next line
    at the left margin. ``line_height`` is in mm."""
    pdf.multi_cell(0, line_height, text, align="L", new_x=XPos.LMARGIN, new_y=YPos.NEXT)


def render_pdf(doc: SourceDoc, out: Path) -> None:
    """Render ``doc`` as an A4 PDF with fixed metadata.

    Args:
        doc: Parsed source.
        out: Output ``.pdf`` path.

    Raises:
        DatasetError: On text that a core font cannot render.
    """
    pdf = _PolicyPDF(doc.code)
    pdf.set_creation_date(FIXED_DATE)
    pdf.set_title(doc.title)
    pdf.set_author(ORGANISATION)
    pdf.set_subject(doc.code)
    pdf.set_creator("datasets/sample/build_docs.py")
    pdf.set_producer("fpdf2")
    pdf.set_lang("en")
    pdf.set_margins(20, 20, 20)
    pdf.set_auto_page_break(auto=True, margin=20)
    pdf.alias_nb_pages()
    pdf.add_page()
    where = f"source/{doc.doc_id}.md"
    for block in doc.blocks:
        if isinstance(block, Heading):
            size = {1: 16, 2: 12, 3: 11}[block.level]
            pdf.ln(3 if block.level > 1 else 0)
            pdf.set_font("Helvetica", style="B", size=size)
            _write_wrapped(pdf, size * 0.5, to_latin1(block.text, where))
            pdf.ln(1.5)
        elif isinstance(block, Paragraph):
            pdf.set_font("Helvetica", size=11)
            _write_wrapped(pdf, 5.5, to_latin1(block.text, where))
            pdf.ln(2.5)
        elif isinstance(block, BulletItem):
            pdf.set_font("Helvetica", size=11)
            pdf.set_x(pdf.l_margin + 4)
            pdf.cell(5, 5.5, "-")
            _write_wrapped(pdf, 5.5, to_latin1(block.text, where))
            pdf.ln(1.5)
        else:
            pdf.set_font("Helvetica", size=10)
            with pdf.table(text_align="LEFT", line_height=5) as table:
                for row in block.rows:
                    pdf_row = table.row()
                    for cell in row:
                        pdf_row.cell(to_latin1(_NESTED_MARKER.sub(" ", cell).strip(), where))
            pdf.ln(3)
    pdf.output(str(out))


def _add_docx_table(
    container: DocxDocument | _Cell, table: Table, nested: dict[str, Table]
) -> None:
    """Add ``table`` (header row in bold) to a document or, for nested tables, to a cell."""
    word_table = container.add_table(len(table.rows), len(table.rows[0]))
    word_table.style = "Table Grid"
    for r, row in enumerate(table.rows):
        for c, text in enumerate(row):
            cell = word_table.cell(r, c)
            names = _NESTED_MARKER.findall(text)
            paragraph = cell.paragraphs[0]
            run = paragraph.add_run(_NESTED_MARKER.sub(" ", text).strip())
            run.bold = r == 0
            for name in names:
                _add_docx_table(cell, nested[name], nested)


def render_docx(doc: SourceDoc, out: Path) -> None:
    """Render ``doc`` as a DOCX with fixed core properties and zip timestamps.

    Args:
        doc: Parsed source.
        out: Output ``.docx`` path.
    """
    document = docx.Document()
    document.styles["Normal"].font.name = "Calibri"
    document.styles["Normal"].font.size = Pt(11)
    props = document.core_properties
    props.title = doc.title
    props.subject = doc.code
    props.author = ORGANISATION
    props.last_modified_by = ORGANISATION
    props.comments = "Generated by datasets/sample/build_docs.py"
    props.keywords = ""
    props.category = "Operating procedure"
    props.revision = 1
    props.created = FIXED_DATE
    props.modified = FIXED_DATE
    props.last_printed = FIXED_DATE
    for block in doc.blocks:
        if isinstance(block, Heading):
            document.add_heading(block.text, level=block.level)
        elif isinstance(block, Paragraph):
            document.add_paragraph(block.text)
        elif isinstance(block, BulletItem):
            document.add_paragraph(block.text, style="List Bullet")
        else:
            _add_docx_table(document, block, doc.nested)
    buffer = io.BytesIO()
    document.save(buffer)
    out.write_bytes(_fix_zip_timestamps(buffer.getvalue()))


def _fix_zip_timestamps(data: bytes) -> bytes:
    """Rewrite a zip archive with every entry dated :data:`ZIP_DATE` (same order, deflated)."""
    source = zipfile.ZipFile(io.BytesIO(data))
    target_buffer = io.BytesIO()
    with zipfile.ZipFile(target_buffer, "w", compression=zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            fixed = zipfile.ZipInfo(info.filename, date_time=ZIP_DATE)
            fixed.compress_type = zipfile.ZIP_DEFLATED
            fixed.external_attr = 0o644 << 16
            target.writestr(fixed, source.read(info.filename))
    return target_buffer.getvalue()


def build(out_dir: Path = DOCS_DIR, source_dir: Path = SOURCE_DIR) -> list[Path]:
    """Render every document of :data:`FORMATS` into ``out_dir``.

    Files in ``out_dir`` that are not outputs of this build are removed, so the folder always
    holds exactly the documents of :data:`FORMATS`.

    Args:
        out_dir: Output folder (created if missing).
        source_dir: Folder of the ``<doc-id>.md`` sources.

    Returns:
        The written paths, in :data:`FORMATS` order.

    Raises:
        DatasetError: When a source file is missing or malformed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for doc_id, fmt in FORMATS.items():
        source = source_dir / f"{doc_id}.md"
        if not source.is_file():
            raise DatasetError(f"{source}: source of document '{doc_id}' is missing; restore it.")
        out = out_dir / f"{doc_id}.{fmt}"
        if fmt == "md":
            shutil.copyfile(source, out)
        elif fmt == "pdf":
            render_pdf(parse_source(source), out)
        else:
            render_docx(parse_source(source), out)
        written.append(out)
    for stale in out_dir.iterdir():
        if stale.is_file() and stale not in written:
            stale.unlink()
    return written


def main() -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DOCS_DIR, help="output folder")
    args = parser.parse_args()
    for path in build(args.out):
        print(path)


if __name__ == "__main__":
    main()
