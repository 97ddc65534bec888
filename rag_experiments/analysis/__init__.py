"""Reading logged runs back: paired run comparison (:mod:`~rag_experiments.analysis.compare`),
sweep reports (:mod:`~rag_experiments.analysis.report`) and their plots and HTML pages
(:mod:`~rag_experiments.analysis.plots`)."""
