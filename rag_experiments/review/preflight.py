"""Check a chat model before a generation starts, so a missing model is an error on the page
and never a silently empty dataset.

The form's fields are checked here (a model name and a URL are set, the API key variable is
set); the model itself is then built and asked with its own ``check()`` (the same check
``rag-exp run`` makes before it answers anything): the GGUF file is found (embedded), Ollama
answers ``/api/tags`` and lists the model, an OpenAI-compatible server answers ``/models``;
the fake model is always ready. Whatever fails comes back as a :class:`ReviewError` (400).
"""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from rag_experiments.app import target_class
from rag_experiments.common.http import bearer_headers
from rag_experiments.errors import RagExpError, ReviewError


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
    target = target_class(node)
    if target in ("OllamaChat", "OpenAICompatChat"):
        model = str(node.get("model") or "").strip()
        url = str(node.get("base_url") or "").strip().rstrip("/")
        if not model:
            example = "e.g. llama3.1:8b" if target == "OllamaChat" else "as the server lists it"
            raise ReviewError(f"no {role} model name is set: enter the model to use ({example})")
        if not url:
            raise ReviewError(
                f"no base URL is set for the {role} model {model!r}: enter the server's URL"
            )
        api_key_env = node.get("api_key_env")
        bearer_headers(
            str(api_key_env) if api_key_env else None,
            f"the {role} model at {url}",
            "llm.api_key_env",
        )
    try:
        try:
            model = instantiate(node)
        except InstantiationException as exc:  # our own error in the constructor: unwrap it
            if isinstance(exc.__cause__, RagExpError):
                raise exc.__cause__ from None
            raise
        model.check()
    except RagExpError as exc:
        raise ReviewError(str(exc)) from None
