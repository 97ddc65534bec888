"""Check a chat model before a generation starts, so a missing model is an error on the page
and never a silently empty dataset.

- embedded: the GGUF file is found (the bundled SmolLM2 package, or ``model_path``);
- ollama: a model name and URL are set, ``GET <base_url>/api/tags`` answers within
  :data:`TIMEOUT_S` and lists the model;
- openai (any OpenAI-compatible server): a model name and URL are set and
  ``GET <base_url>/models`` answers within :data:`TIMEOUT_S` with a 2xx status;
- fake: always ready.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from rag_experiments.app import target_class
from rag_experiments.errors import ConfigError, ReviewError
from rag_experiments.llm.ollama import tagged_digest
from rag_experiments.llm.transport import bearer_headers

TIMEOUT_S = 3.0
"""Seconds the reachability check waits for a server."""

_OLLAMA_START = "start it with `ollama serve`, or correct the base URL"
_OPENAI_START = ("start it (e.g. `python -m llama_cpp.server --model <file.gguf>` or "
                 "`vllm serve <model>`), or correct the base URL")


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
    if target == "EmbeddedChat":
        _check_gguf(node.get("model_path"), role)
    elif target in ("OllamaChat", "OpenAICompatChat"):
        model = str(node.get("model") or "").strip()
        url = str(node.get("base_url") or "").strip().rstrip("/")
        if not model:
            example = "e.g. llama3.1:8b" if target == "OllamaChat" else "as the server lists it"
            raise ReviewError(f"no {role} model name is set: enter the model to use ({example})")
        if not url:
            raise ReviewError(f"no base URL is set for the {role} model {model!r}: enter the "
                              "server's URL")
        if target == "OllamaChat":
            _check_ollama(url, model, role)
        else:
            _check_openai(url, node.get("api_key_env"), role)


def _check_gguf(model_path: Any, role: str) -> None:
    from rag_experiments.llm.embedded import bundled_model_path

    if not model_path:
        try:
            bundled_model_path()
        except ConfigError as exc:
            raise ReviewError(f"the embedded {role} model is not installed: {exc}") from None
        return
    path = Path(str(model_path)).expanduser()
    if not path.is_file():
        raise ReviewError(f"the {role} model file {path} does not exist: give the path of a "
                          ".gguf file on this machine, or leave it blank for the bundled model")


def _get(url: str, role: str, hint: str, headers: dict[str, str] | None = None) -> httpx.Response:
    try:
        return httpx.get(url, timeout=TIMEOUT_S, headers=headers, follow_redirects=False)
    except httpx.HTTPError as exc:
        raise ReviewError(f"cannot reach {url} for the {role} model ({type(exc).__name__}): "
                          f"{hint}") from None


def _check_ollama(base_url: str, model: str, role: str) -> None:
    response = _get(f"{base_url}/api/tags", role, _OLLAMA_START)
    if response.status_code != 200:
        raise ReviewError(f"{base_url}/api/tags answered HTTP {response.status_code}: is "
                          f"{base_url} an Ollama server? {_OLLAMA_START}")
    try:
        tags = response.json()
    except ValueError:
        tags = {}
    tags = tags if isinstance(tags, dict) else {}
    if tagged_digest(tags, model) is None:
        names = {str(m.get(k)) for m in tags.get("models") or [] for k in ("name", "model")
                 if isinstance(m, dict) and m.get(k)}
        listed = ", ".join(sorted(names)) or "none"
        raise ReviewError(f"the {role} model {model!r} is not available on {base_url} "
                          f"(it has: {listed}): run `ollama pull {model}` or choose another")


def _check_openai(base_url: str, api_key_env: Any, role: str) -> None:
    headers = bearer_headers(str(api_key_env) if api_key_env else None,
                             f"the {role} model at {base_url}", "llm.api_key_env")
    response = _get(f"{base_url}/models", role, _OPENAI_START, headers)
    if response.status_code in (401, 403):
        raise ReviewError(f"{base_url}/models refused the request (HTTP "
                          f"{response.status_code}): set llm.api_key_env to the variable "
                          "holding the key (rag-exp review llm.api_key_env=NAME)")
    if not 200 <= response.status_code < 300:
        raise ReviewError(f"{base_url}/models answered HTTP {response.status_code}: is "
                          f"{base_url} an OpenAI-compatible /v1 root? {_OPENAI_START}")
