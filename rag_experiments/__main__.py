"""``python -m rag_experiments run …`` is the same as ``rag-exp run …``."""

from rag_experiments.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
