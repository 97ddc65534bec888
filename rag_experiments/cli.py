"""``rag-exp``: the command line.

Subcommands::

    rag-exp run [hydra overrides…]     evaluate one configuration (or a sweep with -m)

``rag-exp run --help`` shows Hydra's help (config groups and options); ``rag-exp run --cfg job``
prints the resolved config without running.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rag_experiments.errors import RagExpError


def _run(argv: list[str]) -> int:
    from rag_experiments.app import hydra_main

    sys.argv = ["rag-exp run", *argv]
    hydra_main()
    return 0


COMMANDS = {
    "run": (_run, "evaluate a RAG configuration (Hydra overrides follow; -m sweeps)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch ``rag-exp <command> …``; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="rag-exp",
        description="Evaluate RAG systems offline with local models; results go to MLflow.",
        epilog="Example: rag-exp run -m chunker.size=256,512 retriever.top_k=3,5",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not args or args[0] not in COMMANDS:
        parser.parse_args(args or ["--help"])
        return 2
    handler = COMMANDS[args[0]][0]
    try:
        return handler(args[1:])
    except RagExpError as exc:
        print(f"rag-exp {args[0]}: error: {exc}", file=sys.stderr)
        return 1
