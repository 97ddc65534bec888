"""Judge qualification: how well a judge's verdicts through our own metric prompts agree with
labeled pairs (``rag-exp judge-check``), and the lookup that carries the result into later
runs (:mod:`rag_experiments.qualify.registry`)."""
