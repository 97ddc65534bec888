"""The commands, above the engine (:mod:`rag_experiments.job`):
``rag-exp rerun`` (:mod:`~rag_experiments.commands.rerun`), ``merge``
(:mod:`~rag_experiments.commands.merge`), ``export`` (:mod:`~rag_experiments.commands.export`),
``compare`` (:mod:`~rag_experiments.commands.compare`), ``report``
(:mod:`~rag_experiments.commands.report`), ``dataset stats|report``
(:mod:`~rag_experiments.commands.dataset`), ``grade-sheet`` and ``agreement``
(:mod:`~rag_experiments.commands.agreement`), ``generate``
(:mod:`~rag_experiments.commands.generate`), ``judge-check``
(:mod:`~rag_experiments.commands.judge_check`) and ``serve``
(:mod:`~rag_experiments.commands.serve`). ``rag-exp run`` is the Hydra entry
:mod:`rag_experiments.app`; ``review`` (:mod:`rag_experiments.review.server`) and ``init``
(:mod:`rag_experiments.starter`) stay with their packages (the web app's files, the templates).

A command parses its arguments, calls the engine and the parts, and prints; the computations
stay in the parts (``analysis/``, ``generate/``). A command imports the engine and the parts;
nothing below imports a command (``tests/test_import_contracts.py``)."""
