"""The review app's workspace: one folder that holds the documents, generations and review
state of a review session. (The shared embedding and LLM response caches and the MLflow store
stay where ``paths.*`` and ``tracking.*`` put them, as for ``rag-exp generate``.)

Layout::

    <root>/uploads/             uploaded documents (the corpus of the generation)
    <root>/generation/          the generator's output (eval.jsonl, attempts.jsonl, manifest.json)
    <root>/review_state.json    the cards and their review status
    <root>/generation_job.json  the outcome of the last generation (counts, MLflow link)
    <root>/reviewed/eval.jsonl  the saved dataset (unless ``--out`` names another file)
    <root>/tmp/                 uploads being written

Uploads are stored under a safe name only: a name holding a path (``/``, ``\\`` or ``..``) is
refused rather than silently flattened, the rest goes through werkzeug's
:func:`~werkzeug.utils.secure_filename` (a name with no ASCII letter or digit left, such as
``中文.md``, is stored as ``upload.md``; a stem is cut to :data:`MAX_STEM_CHARS`), only
``.pdf``, ``.docx`` and ``.md`` are accepted, a name whose stem is taken by another upload gets
a ``-2``, ``-3`` … suffix (``policy.pdf`` beside ``policy.docx`` too: the stem is the
document id), and the final path is checked to resolve inside the workspace. Bytes are
copied in blocks and counted, so a file over the limit is refused without being kept.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO

from werkzeug.utils import secure_filename

from rag_experiments.errors import ConfigError, ReviewError

ALLOWED_EXTENSIONS: tuple[str, ...] = (".pdf", ".docx", ".md")
"""File types that can be uploaded (the generator also reads .txt, the page does not offer it)."""

MAX_STEM_CHARS = 100
"""Longest stored file name without its extension (file systems allow 255 bytes)."""

_BLOCK = 1 << 20
"""Bytes copied per read while storing an upload (1 MiB)."""


class Workspace:
    """A folder for one review session (see the module docstring for its layout).

    Args:
        root: The folder to use (created when missing); None = a new temporary folder
            (``tempfile.mkdtemp(prefix="rag-exp-review-")``), kept after the app stops so
            its data can be found again.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        if root is None:
            root = tempfile.mkdtemp(prefix="rag-exp-review-")
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot use {self.root} as the review workspace ({exc}); give "
                "--workspace a folder that exists or can be created"
            ) from None
        self.uploads_dir = self.root / "uploads"
        self.generation_dir = self.root / "generation"
        self.state_path = self.root / "review_state.json"
        self.default_out = self.root / "reviewed" / "eval.jsonl"
        self._tmp_dir = self.root / "tmp"
        self._lock = threading.Lock()

    def inside(self, path: str | Path) -> Path:
        """``path`` resolved, checked to lie inside the workspace.

        Raises:
            ReviewError: The path resolves outside the workspace (403).
        """
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(self.root):
            raise ReviewError(f"{path} is outside the workspace {self.root}; refused", status=403)
        return resolved

    def uploads(self) -> list[Path]:
        """The uploaded documents, sorted by name."""
        if not self.uploads_dir.is_dir():
            return []
        return sorted(
            p
            for p in self.uploads_dir.iterdir()
            if p.is_file() and p.suffix.lower() in ALLOWED_EXTENSIONS
        )

    def check_name(self, filename: str | None) -> str:
        """The safe stored name for an upload called ``filename`` (before de-duplication).

        Raises:
            ReviewError: The name holds a path, sanitises to nothing or has another
                extension (400).
        """
        raw = filename or ""
        if "/" in raw or "\\" in raw or ".." in raw:
            raise ReviewError(
                f"upload {raw!r} refused: a file name must not contain '/', '\\' or '..'. "
                "Rename the file (e.g. policy.pdf) and upload it again"
            )
        safe = secure_filename(raw)
        suffix = Path(raw).suffix.lower()
        if suffix in ALLOWED_EXTENSIONS and Path(safe).suffix.lower() != suffix:
            safe = "upload" + suffix  # nothing ASCII left of the stem (e.g. 中文.md)
        safe = Path(safe).stem[:MAX_STEM_CHARS] + Path(safe).suffix
        if not safe or not Path(safe).stem:
            raise ReviewError(
                f"upload {raw!r} refused: the name has no usable characters once made safe. "
                "Rename the file with letters or digits (e.g. policy.pdf)"
            )
        if Path(safe).suffix.lower() not in ALLOWED_EXTENSIONS:
            raise ReviewError(
                f"upload {raw!r} refused: only {', '.join(ALLOWED_EXTENSIONS)} files can be "
                "uploaded. Convert it to PDF, DOCX or Markdown first"
            )
        return safe

    def save_upload(self, filename: str | None, stream: BinaryIO, max_bytes: int) -> Path:
        """Store one uploaded file under a safe, unused name in ``uploads/``.

        Args:
            filename: The name the client sent.
            stream: The file's bytes.
            max_bytes: Largest accepted file, in bytes.

        Returns:
            The stored file.

        Raises:
            ReviewError: The name is refused (400, see :meth:`check_name`), the file is larger
                than ``max_bytes`` (413), or the path resolves outside the workspace (403).
        """
        safe = self.check_name(filename)
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        handle, tmp_name = tempfile.mkstemp(dir=self._tmp_dir, suffix=".part")
        tmp = Path(tmp_name)
        try:
            size = 0
            with os.fdopen(handle, "wb") as out:
                while block := stream.read(_BLOCK):
                    size += len(block)
                    if size > max_bytes:
                        raise ReviewError(
                            f"upload {safe!r} refused: larger than the limit of "
                            f"{max_bytes / 2**20:.0f} MB (rag-exp review --max-upload-mb)",
                            status=413,
                        )
                    out.write(block)
            with self._lock:
                target = self.inside(self._unused(self.uploads_dir / safe))
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target

    def _unused(self, path: Path) -> Path:
        """``path``, or ``<stem>-2<suffix>``, ``-3`` … when an upload has that stem already
        (whatever its extension: the stem is the document id of the corpus)."""
        taken = {p.stem for p in self.uploads()}
        if path.stem not in taken:
            return path
        number = 2
        while (candidate := path.with_name(f"{path.stem}-{number}{path.suffix}")).stem in taken:
            number += 1
        return candidate
