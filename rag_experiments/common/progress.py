"""Progress of long work: a bar on a terminal, and a log line every tenth of the way
everywhere (so a job log or a CI log shows it too)."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType

from tqdm.auto import tqdm

log = logging.getLogger("rag_experiments.progress")


class Progress:
    """Count finished items of one phase (``answering``, ``judging``); thread-safe.

    The bar is tqdm's (shown only on a terminal, ``disable=None``); the log line
    ``judging: 30/69 (43%), 4.1 q/s, about 9 s left`` goes to logger
    ``rag_experiments.progress`` at INFO every ``max(1, total // 10)`` items and at the end.

    Args:
        total: Items expected (>= 0).
        desc: Phase name.
        unit: Unit of an item (``q`` for questions).
        enabled: False shows no bar and logs nothing (``progress=false``).
        position: Line of the bar when several are shown at once (0 = top).
    """

    def __init__(
        self,
        total: int,
        desc: str,
        *,
        unit: str = "q",
        enabled: bool = True,
        position: int | None = None,
    ) -> None:
        self.total = int(total)
        self.desc = desc
        self.unit = unit
        self.enabled = enabled
        self.done = 0
        self._every = max(1, self.total // 10)
        self._started = time.perf_counter()
        self._lock = threading.Lock()
        self._bar = tqdm(
            total=self.total,
            desc=desc,
            unit=unit,
            position=position,
            disable=None if enabled else True,
            leave=position in (None, 0),
        )

    def update(self, n: int = 1) -> None:
        """Mark ``n`` more items done (logs when a tenth of the way is passed)."""
        with self._lock:
            before = self.done
            self.done += n
            self._bar.update(n)
            crossed = self.done // self._every > before // self._every or self.done == self.total
        if self.enabled and crossed:
            self._log()

    def _log(self) -> None:
        elapsed = time.perf_counter() - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else float("nan")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = f", about {left:.0f} s left" if self.done < self.total and rate > 0 else ""
        log.info(
            "%s: %d/%d (%.0f%%), %.2f %s/s%s",
            self.desc,
            self.done,
            self.total,
            pct,
            rate,
            self.unit,
            eta,
        )

    def close(self) -> None:
        """Close the bar."""
        self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
