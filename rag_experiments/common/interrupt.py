"""SIGINT and SIGTERM end a command the way Ctrl-C does, so what was started is closed.

Python turns SIGINT into :class:`KeyboardInterrupt` but SIGTERM (``kill``, a scheduler's
time limit, ``timeout``, a CI runner stopping a job) ends the process at once: no ``finally``
runs, so an MLflow run (and a sweep's parent run) stays RUNNING for ever. :func:`handled`
makes both signals raise :class:`Interrupted`, a :class:`KeyboardInterrupt`, so every
``finally`` and ``except BaseException`` on the way out runs: the tracker ends the run KILLED
with tag ``error`` = ``Interrupted: stopped by SIGTERM …`` and a sweep's parent is closed
KILLED (:func:`rag_experiments.tracking.sweep.close_sweep`, which reads :func:`received`).

Only the first signal is handled so: the handlers are then put back to Python's defaults, so a
second Ctrl-C interrupts a clean-up that hangs and a second SIGTERM ends the process at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals handled."""

_received: str | None = None


class Interrupted(KeyboardInterrupt):
    """The process received SIGINT or SIGTERM (see the module docstring).

    Args:
        signal_name: ``SIGINT`` or ``SIGTERM``.

    Attributes:
        run_id: The MLflow run of a single (not swept) job that the signal stopped, set by
            the tracker as the run ends KILLED, so the message names the id to resume with;
            None until then (the message then says ``resume=<its run id>``).
    """

    def __init__(self, signal_name: str) -> None:
        self.signal_name = signal_name
        self.run_id: str | None = None
        super().__init__(signal_name)

    def __str__(self) -> str:
        if self.run_id is None:
            return (
                f"stopped by {self.signal_name}; the answers so far are checkpointed: continue "
                "the run with the same command plus resume=<its run id>"
            )
        return (
            f"stopped by {self.signal_name}; the answers so far are checkpointed in MLflow run "
            f"{self.run_id}: continue it with the same command plus resume={self.run_id}"
        )


def _handle(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = signal.Signals(signum).name
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise Interrupted(_received)


@contextmanager
def handled() -> Iterator[bool]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` in the main thread
    (Python accepts handlers only there; elsewhere nothing changes), unless the process
    ignores the signal (``SIG_IGN``: ``nohup``, a shell's background job); the previous
    handlers come back after it. :func:`received` is cleared on entry.

    Yields:
        Whether the handlers were installed.
    """
    global _received
    if threading.current_thread() is not threading.main_thread():
        yield False
        return
    _received = None
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig, handler in before.items():
        if handler is not signal.SIG_IGN:  # ignored on purpose (nohup, a background job)
            signal.signal(sig, _handle)
    try:
        yield True
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def received() -> str | None:
    """The name of the signal that interrupted this process (``SIGTERM``), or None."""
    return _received
