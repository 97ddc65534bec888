"""Evaluation-dataset generation (``rag-exp generate``): documents → chunks → a balanced,
filtered, deduplicated set of question–answer pairs over 8 question types, plus unanswerable
questions, written resumably to our JSONL format; or, in template mode, questions from table
rows with no LLM.

Modules: :mod:`~rag_experiments.generate.schedule` (which chunk gets which type),
:mod:`~rag_experiments.generate.prompts` (versioned prompts and output models),
:mod:`~rag_experiments.generate.filters` (validation and quality filters),
:mod:`~rag_experiments.generate.dedup` (near-duplicate removal),
:mod:`~rag_experiments.generate.checkpoint` (append-only output, resume),
:mod:`~rag_experiments.generate.generator` (the orchestration),
:mod:`~rag_experiments.generate.template` (template mode),
:mod:`~rag_experiments.generate.stats` (``rag-exp dataset stats``),
:mod:`~rag_experiments.generate.app` (the generation job; its Hydra entry is
:mod:`rag_experiments.commands.generate`).
"""
