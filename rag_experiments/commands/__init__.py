"""The commands that work on logged runs, above the engine (:mod:`rag_experiments.job`):
``rag-exp rerun`` (:mod:`~rag_experiments.commands.rerun`), ``merge``
(:mod:`~rag_experiments.commands.merge`), ``export`` (:mod:`~rag_experiments.commands.export`).

A command imports the engine and the parts; nothing below imports a command
(``tests/test_import_contracts.py``)."""
