"""An append-only JSON Lines file that survives a crash mid-write.

Every append-only file the package writes (the run checkpoint ``responses.jsonl``, the
generator's ``eval.jsonl`` and ``attempts.jsonl``) goes through :class:`AppendLog`:

- :meth:`AppendLog.append` writes one JSON value and a newline, then ``flush`` + ``fsync``
  before returning (so an acknowledged record is on disk), under a lock (threads of one process
  never interleave their lines);
- a kill can still cut the *last* line short (no newline at the end of the file). The next
  :meth:`~AppendLog.append` first repairs that tail: it truncates the file back to its last
  newline (the torn record was never acknowledged), so the new record starts on a line of its
  own and is never glued onto the fragment;
- :meth:`AppendLog.read` yields the records; a torn last line is reported (logged) and
  skipped, and so is any other line that is not JSON (which a repaired file never holds, but a
  hand-edited one may), unless ``strict=True`` asks for :class:`CorruptLineError`.

The module imports nothing else of the package, so any layer can use it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_CHUNK = 1 << 16


class CorruptLineError(ValueError):
    """A complete line of an append-only log is not JSON (raised by ``read(strict=True)``).

    Attributes:
        path: The file.
        number: The 1-based line number.
        detail: What is wrong with the line.
    """

    def __init__(self, path: Path, number: int, detail: str) -> None:
        self.path, self.number, self.detail = path, number, detail
        super().__init__(f"{path}:{number}: {detail}")


@dataclass(frozen=True)
class Record:
    """One line read back.

    Attributes:
        number: 1-based line number in the file.
        value: The decoded JSON value.
    """

    number: int
    value: Any


class AppendLog:
    """One JSON Lines file, appended to one record at a time (thread-safe).

    Args:
        path: The file (its folder is created on the first append).

    Attributes:
        path: The file.
        repaired: Torn tails this instance cut off before appending.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.repaired = 0
        self._lock = threading.Lock()

    def append(self, value: Any) -> None:
        """Append ``value`` as one JSON line and flush it to disk (``fsync``) before returning.

        A torn last line left by an earlier crash is cut off first (see the module docs).

        Args:
            value: Any JSON-serialisable value (objects not JSON-native are written with
                ``str``).

        Raises:
            OSError: The file cannot be written.
        """
        data = (json.dumps(value, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a+b") as handle:
                end = handle.seek(0, os.SEEK_END)
                if end and _last_byte(handle, end) != b"\n":
                    keep = _last_newline_end(handle, end)
                    log.warning(
                        "%s: cutting off a torn last line (%d bytes, an interrupted "
                        "write) before appending",
                        self.path,
                        end - keep,
                    )
                    handle.truncate(keep)
                    self.repaired += 1
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())

    def read(self, *, strict: bool = False) -> Iterator[Record]:
        """The records in file order (nothing when the file does not exist).

        A torn last line (no newline at the end) is logged and skipped. Blank lines are
        skipped silently.

        Args:
            strict: Raise :class:`CorruptLineError` for a complete line that is not JSON;
                otherwise it is logged (with its line number) and skipped.

        Yields:
            :class:`Record` per readable line.

        Raises:
            CorruptLineError: ``strict`` and a complete line is not JSON.
        """
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw.decode("utf-8"), strict=False)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                if strict:
                    raise CorruptLineError(self.path, number, f"not JSON ({exc})") from exc
                log.warning("%s:%d: unreadable line skipped (%s)", self.path, number, exc)
                continue
            yield Record(number, value)
        if tail.strip():
            log.warning(
                "%s:%d: torn last line skipped (%d bytes without a newline: an "
                "interrupted write; the next append cuts it off)",
                self.path,
                len(lines) + 1,
                len(tail),
            )


def _last_byte(handle: Any, end: int) -> bytes:
    handle.seek(end - 1)
    return handle.read(1)


def _last_newline_end(handle: Any, end: int) -> int:
    """Offset just after the last ``\\n`` before ``end`` (0 when there is none)."""
    pos = end
    while pos > 0:
        start = max(0, pos - _CHUNK)
        handle.seek(start)
        chunk = handle.read(pos - start)
        found = chunk.rfind(b"\n")
        if found >= 0:
            return start + found + 1
        pos = start
    return 0
