"""Human-in-the-loop review of generated datasets in the browser (``rag-exp review``).

Modules: :mod:`~rag_experiments.review.workspace` (the session folder, safe uploads),
:mod:`~rag_experiments.review.state` (cards and their review status, persisted),
:mod:`~rag_experiments.review.options` (the generate form and the config it composes),
:mod:`~rag_experiments.review.preflight` (is the model there?),
:mod:`~rag_experiments.review.jobs` (the background generation),
:mod:`~rag_experiments.review.saving` (validation and writing of the approved pairs),
:mod:`~rag_experiments.review.app` (the Flask app) and
:mod:`~rag_experiments.review.server` (the command and the werkzeug server).
"""
