"""The commands that read or repeat logged work, above the engine (:mod:`rag_experiments.job`):
``rag-exp rerun`` (:mod:`~rag_experiments.commands.rerun`), ``merge``
(:mod:`~rag_experiments.commands.merge`), ``export`` (:mod:`~rag_experiments.commands.export`),
``compare`` (:mod:`~rag_experiments.commands.compare`), ``report``
(:mod:`~rag_experiments.commands.report`) and ``dataset stats|report``
(:mod:`~rag_experiments.commands.dataset`).

A command parses its arguments, calls the engine and the parts, and prints; the computations
stay in the parts (``analysis/``, ``generate/``). A command imports the engine and the parts;
nothing below imports a command (``tests/test_import_contracts.py``)."""
