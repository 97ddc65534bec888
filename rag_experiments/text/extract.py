"""Plain-text extraction from PDF, DOCX, Markdown and text files.

Every extractor's output goes through :func:`~rag_experiments.text.normalize.normalize_text`,
so the text of a document does not depend on the file format's whitespace habits.

Layout of the extracted text:

- **PDF** (pypdf): each page's text is normalised on its own; non-empty pages are joined with
  ``"\\n\\n"`` and :attr:`ExtractedText.page_starts` records the character offset where each
  page begins (an empty page starts where the next non-empty page starts).
- **DOCX** (python-docx): body paragraphs and tables in document order, one paragraph per line,
  no blank lines between paragraphs. A paragraph whose style is ``Title`` or ``Heading N`` is
  written as ``"#" * N + " " + text`` (``Title`` counts as level 1), so heading-aware chunkers
  see it as a Markdown heading. Each table row is one line, its cells joined with ``" | "``
  (a cell spanning several grid columns is written once; a vertically merged cell is
  repeated on each row it spans, so every row line stands on its own). A cell's own paragraphs
  are joined with spaces; a table nested inside a cell is written inside that cell, where it
  occurs, as ``"[" + rows joined with " ; " + "]"`` (its cells joined with ``" | "``).
  Headers, footers, footnotes, comments and text boxes are not extracted.
- **Markdown / text**: read as UTF-8; undecodable bytes become U+FFFD.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_experiments.errors import ExtractionError
from rag_experiments.text.normalize import normalize_text

if TYPE_CHECKING:  # imported where a PDF or DOCX is read: a Markdown corpus never needs them
    from docx.table import Table, _Cell
    from docx.text.paragraph import Paragraph

log = logging.getLogger(__name__)

SUPPORTED_EXTENSIONS: tuple[str, ...] = (".pdf", ".docx", ".md", ".txt")
"""File extensions :func:`extract_file` reads (matched case-insensitively)."""

_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


@dataclass(frozen=True)
class ExtractedText:
    """The normalised text of one file.

    Attributes:
        text: Normalised text (see :func:`~rag_experiments.text.normalize.normalize_text`).
        page_starts: For PDFs, the character offset in ``text`` where each page begins
            (``len == n_pages``, non-decreasing, first value 0); None for other formats.
        n_pages: Number of pages for PDFs; None for other formats.
        metadata: Format details: ``format`` (``pdf``, ``docx``, ``md``, ``txt``) and, when
            the file declares them, ``title`` and ``author``.
    """

    text: str
    page_starts: list[int] | None = None
    n_pages: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def extract_file(path: Path, *, password: str | None = None) -> ExtractedText:
    """Extract the normalised text of a PDF, DOCX, Markdown or text file.

    Args:
        path: The file to read.
        password: Password for encrypted PDFs. Without it (or when it is wrong) the empty
            password is tried, which opens PDFs that are encrypted only to restrict
            permissions.

    Returns:
        The extracted text with page offsets for PDFs.

    Raises:
        ExtractionError: With ``reason`` one of ``unsupported_extension``, ``not_found``,
            ``encrypted`` (the PDF stays locked), ``no_text_layer`` (a PDF without
            extractable text, e.g. a scan), ``empty_document`` (a DOCX/Markdown/text file
            without text) or ``unreadable`` (the parser failed on a damaged file).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_EXTENSIONS:
        raise ExtractionError(
            str(path),
            reason="unsupported_extension",
            message=f"unsupported file type {path.suffix or '(no extension)'!r}; "
            f"supported: {', '.join(SUPPORTED_EXTENSIONS)}. Convert the file or remove it "
            "from the corpus folder.",
        )
    if not path.is_file():
        raise ExtractionError(
            str(path), reason="not_found", message="file not found; check the path."
        )
    if suffix == ".pdf":
        return _extract_pdf(path, password)
    if suffix == ".docx":
        return _extract_docx(path)
    return _extract_plain(path, suffix.lstrip("."))


def _extract_pdf(path: Path, password: str | None) -> ExtractedText:
    """Read a PDF page by page with pypdf (see :func:`extract_file`)."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(path)
    except Exception as exc:  # pypdf raises many types on damaged files
        raise ExtractionError(
            str(path), reason="unreadable", message=f"pypdf cannot open the PDF ({exc})."
        ) from exc

    if reader.is_encrypted:
        candidates = [password, ""] if password else [""]
        try:
            opened = any(reader.decrypt(pw) for pw in candidates)  # 0 = NOT_DECRYPTED
        except DependencyError as exc:
            raise ExtractionError(
                str(path),
                reason="unreadable",
                message=f"the PDF uses AES encryption, which needs the `cryptography` "
                f"package ({exc}); install it with `pip install cryptography`.",
            ) from exc
        if not opened:
            given = "the given password is wrong" if password else "it needs a password"
            raise ExtractionError(
                str(path),
                reason="encrypted",
                message=f"the PDF is encrypted and {given}. Pass the user password with "
                "`docs_password=…` (or remove the file from the corpus folder).",
            )

    try:
        page_texts = [normalize_text(page.extract_text() or "") for page in reader.pages]
        info = reader.metadata
    except Exception as exc:  # pypdf raises many types on damaged content streams
        raise ExtractionError(
            str(path), reason="unreadable", message=f"pypdf cannot read the PDF text ({exc})."
        ) from exc

    text = "\n\n".join(t for t in page_texts if t)
    page_starts = _page_starts(page_texts, len(text))
    if not text:
        raise ExtractionError(
            str(path),
            reason="no_text_layer",
            message=f"no extractable text in {len(page_texts)} page(s): the PDF has no text "
            "layer (a scan?). Run OCR first, e.g. `ocrmypdf input.pdf output.pdf`.",
        )

    metadata: dict[str, Any] = {"format": "pdf"}
    if info is not None:
        for key, value in (("title", info.title), ("author", info.author)):
            if isinstance(value, str) and value.strip():
                metadata[key] = normalize_text(value)
    return ExtractedText(
        text=text, page_starts=page_starts, n_pages=len(page_texts), metadata=metadata
    )


def _page_starts(page_texts: list[str], text_length: int) -> list[int]:
    """Offset of each page in ``"\\n\\n".join`` of the non-empty pages; an empty page gets
    the offset of the next non-empty page (``text_length`` when none follows)."""
    starts: list[int | None] = []
    offset = 0
    for page_text in page_texts:
        if not page_text:
            starts.append(None)
            continue
        starts.append(offset)
        offset += len(page_text) + 2  # the page, then the "\n\n" separator
    following = text_length
    for i in range(len(starts) - 1, -1, -1):
        if starts[i] is None:
            starts[i] = following
        else:
            following = starts[i]
    return [s for s in starts if s is not None]


def _extract_docx(path: Path) -> ExtractedText:
    """Read a DOCX body with python-docx (see :func:`extract_file`)."""
    import docx
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
        lines: list[str] = []
        for block in document.iter_inner_content():
            if isinstance(block, Paragraph):
                lines.append(_paragraph_line(block))
            else:
                lines.extend(_table_rows(block))
        props = document.core_properties
    except Exception as exc:  # python-docx/lxml/zipfile raise many types on damaged files
        raise ExtractionError(
            str(path), reason="unreadable", message=f"python-docx cannot read the file ({exc})."
        ) from exc

    text = normalize_text("\n".join(line for line in lines if line.strip()))
    if not text:
        raise ExtractionError(
            str(path),
            reason="empty_document",
            message="the document has no text in its body; remove it from the corpus folder.",
        )
    metadata: dict[str, Any] = {"format": "docx"}
    for key, value in (("title", props.title), ("author", props.author)):
        if value and value.strip():
            metadata[key] = normalize_text(value)
    return ExtractedText(text=text, metadata=metadata)


def _heading_level(paragraph: Paragraph) -> int | None:
    """Level 1-9 for ``Title``/``Heading N`` styles (by name or style id), else None."""
    style = paragraph.style
    if style is None:
        return None
    for label in (style.name or "", style.style_id or ""):
        if label.lower() == "title":
            return 1
        match = _HEADING_STYLE.match(label)
        if match:
            return int(match.group(1))
    return None


def _paragraph_line(paragraph: Paragraph) -> str:
    """One paragraph's text, prefixed with ``#`` marks when it is a heading."""
    text = paragraph.text
    level = _heading_level(paragraph)
    if level is not None and text.strip():
        return "#" * level + " " + " ".join(text.split())
    return text


def _table_rows(table: Table) -> list[str]:
    """One line per row: the row's distinct cells, each flattened, joined with ``" | "``."""
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous: _Cell | None = None
        for cell in row.cells:
            if cell is previous:  # python-docx repeats one object across a horizontal span
                continue
            previous = cell
            cells.append(_cell_text(cell))
        if any(c.strip() for c in cells):
            rows.append(" | ".join(cells))
    return rows


def _cell_text(cell: _Cell) -> str:
    """A cell's paragraphs and nested tables, in order, on one line."""
    from docx.text.paragraph import Paragraph

    pieces: list[str] = []
    for block in cell.iter_inner_content():
        if isinstance(block, Paragraph):
            pieces.append(block.text)
        else:
            pieces.append("[" + " ; ".join(_table_rows(block)) + "]")
    return " ".join(" ".join(piece.split()) for piece in pieces if piece.strip())


def decode_utf8(raw: bytes, where: str) -> str:
    """``raw`` decoded as UTF-8; bytes that are not valid UTF-8 become U+FFFD with a warning
    naming ``where``, how many sequences were replaced and the first byte offset (a file saved
    in Latin-1 or Windows-1252 would otherwise lose its accented letters silently).

    Args:
        raw: The file's bytes.
        where: The file, for the warning.

    Returns:
        The text (a leading UTF-8 byte-order mark is kept; :func:`normalize_text` drops it).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        bad = text.count("\ufffd") - raw.count("\ufffd".encode())
        log.warning(
            "%s: %d byte sequence(s) are not valid UTF-8 (the first at byte %d), replaced by "
            "U+FFFD; save the file as UTF-8 to keep those characters",
            where,
            bad,
            exc.start,
        )
        return text


def _extract_plain(path: Path, fmt: str) -> ExtractedText:
    """Read a Markdown or text file as UTF-8 (see :func:`extract_file`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ExtractionError(
            str(path), reason="unreadable", message=f"cannot read the file ({exc})."
        ) from exc
    text = normalize_text(decode_utf8(raw, str(path)))
    if not text:
        raise ExtractionError(
            str(path),
            reason="empty_document",
            message="the file has no text; remove it from the corpus folder.",
        )
    return ExtractedText(text=text, metadata={"format": fmt})
