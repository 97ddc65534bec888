"""Versioned judge prompts of the custom backend: one module per metric, each with its
instruction template and the pydantic output model the judge must return.

Every prompt starts with the same system message and, when it shows contexts, with the same
numbered ``Context passages`` block, so a model server that reuses a common prompt prefix
(llama.cpp does) evaluates the contexts once for several calls. A prompt's ``id`` (for
example ``faithfulness-v1``) is logged with every judgement in ``judge_audit.jsonl``; change
the version whenever the wording changes.
"""

from rag_experiments.metrics.prompts.base import SYSTEM, JudgePrompt, format_contexts

__all__ = ["SYSTEM", "JudgePrompt", "format_contexts"]
