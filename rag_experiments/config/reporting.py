"""Our own errors through Hydra, without a traceback.

Hydra's ``@hydra.main`` runs the task inside ``hydra._internal.utils.run_and_report``, which
prints a stack trace for any exception except a ``CompactHydraException``, whose message it
prints alone before ``sys.exit(1)``; with ``HYDRA_FULL_ERROR=1`` it re-raises instead (full
stack, the original error chained as the cause). So a :class:`~rag_experiments.errors.RagExpError`
leaving a Hydra task (or a sweeper) is re-raised as :class:`ReportedError`: the user sees
``rag-exp run: error: <message>`` and exit code 1; ``HYDRA_FULL_ERROR=1`` or
``rag-exp --verbose`` shows the stack. In a multirun, the failed job's own run is already
FAILED (see :func:`rag_experiments.job.run_job`); the sweeper re-raises the job's error and the
process ends with the same one line and exit code 1.

``rag-exp`` itself (:func:`rag_experiments.cli.main`) runs every command with Hydra's reporting
off and prints :func:`error_message` for our errors and Hydra's config errors, whichever
command raised them.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from hydra.errors import CompactHydraException
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from rag_experiments.errors import RagExpError


class ReportedError(CompactHydraException):
    """A :class:`RagExpError` on its way out through Hydra (printed as one line).

    Args:
        error: The package's error (kept as :attr:`error` and as ``__cause__``).
        command: The command named in the line.
    """

    def __init__(self, error: RagExpError, command: str = "rag-exp run") -> None:
        self.error = error
        super().__init__(f"{command}: error: {error}")


class CallbackAbort(BaseException):  # noqa: N818 - it is no error of its own: it carries one
    """A :class:`RagExpError` leaving a Hydra callback that must stop the command.

    Hydra calls its callbacks inside ``except Exception`` and turns what they raise into a
    warning (``hydra/_internal/callbacks.py``), so a sweep whose parent run cannot be made would
    go on to launch every job. A ``BaseException`` passes through; :func:`rag_experiments.cli.
    main` prints :attr:`error` as the one line of any error of ours, with its exit code.

    Args:
        error: The package's error (kept as :attr:`error` and as ``__cause__``).
    """

    def __init__(self, error: RagExpError) -> None:
        self.error = error
        super().__init__(str(error))


@contextmanager
def aborting() -> Iterator[None]:
    """Re-raise a :class:`RagExpError` from the block (a Hydra callback) as
    :class:`CallbackAbort`.

    Raises:
        CallbackAbort: The block raised a :class:`RagExpError` (chained as the cause).
    """
    try:
        yield
    except RagExpError as exc:
        raise CallbackAbort(exc) from exc


@contextmanager
def reported(command: str = "rag-exp run") -> Iterator[None]:
    """Re-raise a :class:`RagExpError` from the block as :class:`ReportedError`.

    Raises:
        ReportedError: The block raised a :class:`RagExpError` (chained as the cause).
    """
    try:
        yield
    except ReportedError:
        raise
    except RagExpError as exc:
        raise ReportedError(exc, command) from exc


def exit_code(exc: BaseException) -> int:
    """The exit code of a reported error: our error's own
    (:attr:`~rag_experiments.errors.RagExpError.exit_code`: 1, the gate's 1 failed / 2
    undecided, 2 for a :class:`~rag_experiments.errors.UsageError`), else 1."""
    if isinstance(exc, (ReportedError, CallbackAbort)):
        exc = exc.error
    return exc.exit_code if isinstance(exc, RagExpError) else 1


def error_message(exc: BaseException) -> str | None:
    """What ``rag-exp`` prints after ``error:`` for an error that is not a bug, or None for
    one that is (a stack trace then says where).

    * our own errors (:class:`RagExpError`, also inside :class:`ReportedError` or
      :class:`CallbackAbort`): their
      message (what failed, where, the fix);
    * a mandatory config value (``???``) that was never set: which key, and how to set it;
    * Hydra's config errors (a ``CompactHydraException``: an override that does not parse,
      an unknown option or key): our one line alone when we can name the key (the schema's
      closest keys, or the optional group to select: :func:`rag_experiments.config.keys.
      explain`; Hydra's advice ``use +key=…`` would only lead to another error), else
      Hydra's message and OmegaConf's cause, as Hydra prints them.

    Args:
        exc: The exception that ended the command.
    """
    from rag_experiments.config.keys import explain

    if isinstance(exc, (ReportedError, CallbackAbort)):
        exc = exc.error
    if isinstance(exc, RagExpError):
        return str(exc)
    if isinstance(exc, MissingMandatoryValue):  # a `???` value nobody set
        key = exc.full_key or exc.key
        return f"config key {key} has no value: set it ({key}=…) on the command line. {exc}"
    if not isinstance(exc, CompactHydraException):
        return None
    ours = explain(exc) or quoting_hint(exc)
    if ours:
        return ours
    unset = re.match(r"Error resolving interpolation '\$\{(\w+)\}'", str(exc))
    if unset:  # the defaults list's derived/<group> entry of a group set to null
        group = unset.group(1)
        return f"no {group} selected: pass {group}=<name>"
    lines = [str(exc)]
    if isinstance(exc.__cause__, OmegaConfBaseException):
        lines.append(str(exc.__cause__))
    return "\n".join(lines)


def quoting_hint(exc: BaseException, argv: Sequence[str] | None = None) -> str | None:
    """Our line for an override Hydra's grammar refuses because its value needs quotes (a
    JMESPath such as ``target.response.contexts=source-documents[*].text``: ``[`` opens a
    Hydra list, so Hydra says only "mismatched input '['"), or None for another error.

    Args:
        exc: The error that ended the command.
        argv: The command's arguments (default ``sys.argv[1:]``); the first ``key=value``
            that does not parse is the one named.

    Returns:
        ``override '<it>' does not parse …; quote the value: '<key>="<value>"'``, or None.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    if not isinstance(exc, OverrideParseException):
        return None
    parser = OverridesParser.create()
    for arg in sys.argv[1:] if argv is None else argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        try:
            parser.parse_overrides([arg])
        except OverrideParseException:
            key, _, value = arg.partition("=")
            if not value or value[0] in "'\"":
                return None  # already quoted: Hydra's own message says more
            quoted = f"'{key}=\"{value}\"'" if '"' not in value else f"\"{key}='{value}'\""
            why = str(exc).splitlines()[0]
            return (
                f"override {arg!r} does not parse as a Hydra value ({why}): a value holding "
                f"[ ] * ( ) , or spaces, such as a JMESPath, must be quoted for Hydra inside the "
                f"shell's quotes: {quoted}"
            )
    return None
