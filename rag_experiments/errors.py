"""The package's error hierarchy: one root, a few subclasses, messages that name the fix.

Every error raised on purpose by rag-experiments derives from :class:`RagExpError`, so a caller
(or the CLI) can catch the whole family with one ``except``. Messages follow one shape:
*what failed*, *where* (file, line, field, question id) and *how to fix it*.
"""

from __future__ import annotations

from dataclasses import dataclass

from rag_experiments.common.usage import Usage


class RagExpError(Exception):
    """Root of every error that rag-experiments raises deliberately.

    Attributes:
        retryable: Whether another attempt of the failed call may succeed (a timeout, a refused
            connection, HTTP 429/5xx); read by
            :func:`rag_experiments.common.http.is_retryable`. False unless a subclass says so.
        reason: A short machine-readable code of the failure (``timeout``, ``parse_error``,
            ``http_500`` …) that ends up in ``RagResponse.error`` and metric NaN reasons, or
            None for a class that names none (a :class:`ConfigError`): the reader then writes
            the code of its own step (``generation_failed``, ``llm_error``).
        exit_code: The process exit code of ``rag-exp`` when the error ends a command: 1,
            unless a subclass says otherwise (:class:`GateFailed`, :class:`UsageError`).
    """

    retryable: bool = False
    reason: str | None = None
    exit_code: int = 1


class GateFailed(RagExpError):
    """The regression gate at the end of a run failed a rule or could not decide
    (:mod:`rag_experiments.analysis.gate`); the run itself is logged and finished. ``rag-exp
    gate`` also raises it (exit code 2) for an error of its input (config file, rules, runs,
    store), which is no rule's verdict.

    Args:
        message: The gate's summary line.
        exit_code: The process exit code: 1 a rule failed, 2 undecided.
    """

    def __init__(self, message: str, exit_code: int) -> None:
        self.exit_code = exit_code
        super().__init__(message)


class ConfigError(RagExpError):
    """A configuration value is missing, misspelled or inconsistent."""


class UsageError(ConfigError):
    """A command was asked for what it does not do (``gate=`` in a sweep), or its input names
    nothing usable (``rag-exp promote``: an unknown run or store, a bad alias). Exit code 2,
    as for ``rag-exp gate``'s "could not decide" and argparse's usage errors, so a script
    never reads it as "a rule failed" (1)."""

    exit_code = 2


@dataclass(frozen=True)
class RowProblem:
    """One problem found in one row of a data file.

    Attributes:
        path: File the row came from.
        line: 1-based line number (JSONL/TSV), or 1-based item index for a JSON array.
        field: The offending field (dotted for nested fields), or ``""`` for the whole row.
        message: What is wrong with it.
    """

    path: str
    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.field:
            where += f":{self.field}"
        return f"{where}: {self.message}"


class SettingMissingError(ConfigError):
    """A setting a user must fill in is blank (a model name, a server URL); the message names
    it and how to set it."""


class DatasetError(RagExpError):
    """A dataset or corpus cannot be read.

    Args:
        message: Summary of what failed and how to fix it.
        problems: Every bad row found (all of them, not only the first), each rendered as
            ``file:line:field: message`` in ``str(error)``.
    """

    def __init__(self, message: str, problems: list[RowProblem] | None = None) -> None:
        self.problems = list(problems or [])
        text = message
        if self.problems:
            shown = self.problems[:200]
            text += "\n" + "\n".join(f"  {p}" for p in shown)
            if len(self.problems) > len(shown):
                text += f"\n  … and {len(self.problems) - len(shown)} more"
        super().__init__(text)


class ExtractionError(DatasetError):
    """A document's text cannot be extracted (scanned, encrypted, empty, unsupported)."""

    def __init__(self, path: str, reason: str, message: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {message}")


class VectorIndexError(RagExpError):
    """The vector index cannot be built or queried."""


class TargetError(RagExpError):
    """The system under test failed to answer one question.

    Args:
        reason: A short machine-readable code (``timeout``, ``connection_refused``,
            ``http_500``, ``non_json``, ``mapping_empty``, ``generation_failed`` …).
        message: Human-readable detail.
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class LLMError(RagExpError):
    """A call to a language model failed.

    Args:
        message: What failed and how to fix it.
        reason: Overrides the class's :attr:`reason`.
        raw: The model's raw text when it answered (an unusable reply), else None.
        usage: Tokens the failed call(s) consumed when known, else None.

    Attributes:
        reason: Short machine-readable code; each subclass names its own (``timeout``,
            ``parse_error`` …), ``llm_error`` here.
        raw: The model's raw reply, kept for the audit trail (None when no reply came).
        usage: Tokens the failed call(s) consumed, so token totals include failed calls
            (None when the provider did not say).
    """

    reason: str = "llm_error"
    raw: str | None = None
    usage: Usage | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        raw: str | None = None,
        usage: Usage | None = None,
    ) -> None:
        if reason is not None:
            self.reason = reason
        self.raw = raw
        self.usage = usage
        super().__init__(message)


class PreflightError(RagExpError):
    """A model or service the job needs cannot be used; found by the check before any question
    was answered (:func:`rag_experiments.job.preflight`).

    Args:
        role: The part that failed (``generator``, ``judge``, ``embedder``, ``target``).
        reason: The failure's machine-readable code (``unreachable``, ``model_not_found`` …).
        message: What failed and how to fix it.
    """

    def __init__(self, role: str, reason: str, message: str) -> None:
        self.role = role
        self.reason = reason
        super().__init__(message)


class TrackingError(RagExpError):
    """Results cannot be logged (bad tracking URI, colliding metric names, …)."""


class TrackingUnavailableError(TrackingError):
    """The tracking server stayed unreachable for ``tracking.retry_s`` seconds while a run was
    being logged. The run is left RUNNING on the server (it can be resumed).

    Attributes:
        what: The logging step that could not be done (``metrics``, ``per_query.json``…).
        run_id: The run left RUNNING (set by the tracker), or None when none was open.
    """

    def __init__(self, message: str, what: str, run_id: str | None = None) -> None:
        super().__init__(message)
        self.what = what
        self.run_id = run_id
        """The run left RUNNING (set by the tracker), or None when none was open."""


class ReviewError(RagExpError):
    """A request to the review web app cannot be served (a refused upload, a bad form, an
    unreachable model, an unknown card). ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        self.status = status
        super().__init__(message)


class RunFailedError(RagExpError):
    """The run finished logging but its outcome is not acceptable (for example too many
    target failures); everything computed was logged before this was raised."""
