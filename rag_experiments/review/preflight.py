"""Check a chat model before a generation starts, so a missing model is an error on the page
and never a silently empty dataset.

The model's class first checks the form's fields (its ``check_settings``: a model name and a
URL are set, the API key variable is set); the model itself is then built and asked with its
own ``check()`` (the same check
``rag-exp run`` makes before it answers anything): the GGUF file is found (embedded), Ollama
answers ``/api/tags`` and lists the model, an OpenAI-compatible server answers ``/models``;
the fake model is always ready. Whatever fails comes back as a :class:`ReviewError` (400).
"""

from __future__ import annotations

from typing import Any

from rag_experiments.build import build_chat_model, chat_class
from rag_experiments.errors import RagExpError, ReviewError, SettingMissingError
from rag_experiments.llm.roles import judge_model_node


def check_model(node: Any, role: str = "generator") -> None:
    """Raise when the chat model of config ``node`` cannot be used right now.

    Args:
        node: A chat-model config node (``cfg.llm``, ``cfg.judge``).
        role: ``generator`` or ``judge`` (named in the message).

    Raises:
        ReviewError: The model is unset, missing or its server unreachable (400); the message
            says how to fix it.
        ConfigError: ``api_key_env`` names an environment variable that is not set.
    """
    try:
        chat_class(node).check_settings(node, role)
    except SettingMissingError as exc:  # a blank field of the form
        raise ReviewError(str(exc)) from None
    try:
        build_chat_model(judge_model_node(node)).check()  # without judge-only role keys
    except RagExpError as exc:
        raise ReviewError(str(exc)) from None
