"""Many chat requests with bounded concurrency, a progress bar, and per-request outcomes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from tqdm.auto import tqdm

from rag_experiments.errors import ConfigError, LLMError, RagExpError
from rag_experiments.llm.base import ChatModel, Completion, Message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatRequest:
    """One request of a batch.

    Attributes:
        messages: Chat messages.
        schema: Optional output schema class.
        options: Per-call options (``max_tokens``, ``temperature``, ``seed`` …).
    """

    messages: list[Message]
    schema: type[BaseModel] | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _one(model: ChatModel, request: ChatRequest) -> Completion | LLMError:
    try:
        return model.complete(request.messages, request.schema, **request.options)
    except LLMError as exc:
        return exc
    except RagExpError as exc:
        err = LLMError(str(exc), reason=exc.reason or "llm_error")
        err.__cause__ = exc
        return err
    except Exception as exc:  # noqa: BLE001 - one request never kills the batch
        log.exception("unexpected error in a batch request")
        err = LLMError(f"unexpected {type(exc).__name__}: {exc}", reason="unexpected_error")
        err.__cause__ = exc
        return err


def complete_many(
    model: ChatModel,
    requests: Sequence[ChatRequest],
    max_concurrency: int = 4,
    progress: bool = True,
    desc: str = "llm",
) -> list[Completion | LLMError]:
    """Run ``requests`` on ``model`` with at most ``max_concurrency`` in flight.

    A failed request yields its error in its slot; the batch itself never raises for one
    request. Each request gets the model's own timeout and retries, so one call takes at most
    ``(max_retries + 1) * timeout_s`` plus backoff waits, and the whole batch at most
    ``W / c + (1 - 1/c) * p_max`` where ``W`` is the summed time of all calls, ``c`` the
    concurrency and ``p_max`` the longest call (Graham 1966, greedy list scheduling).

    Args:
        model: Any chat model (a :class:`~rag_experiments.llm.cache.CachedChat` answers cached
            requests without a call).
        requests: The requests.
        max_concurrency: Worker threads (>= 1). The embedded model serialises its calls, so
            more than 1 only helps servers.
        progress: Show a tqdm bar.
        desc: The bar's label.

    Returns:
        One :class:`~rag_experiments.llm.base.Completion` or
        :class:`~rag_experiments.errors.LLMError` per request, in request order.

    Raises:
        ConfigError: ``max_concurrency`` < 1.
    """
    if max_concurrency < 1:
        raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
    results: list[Completion | LLMError | None] = [None] * len(requests)
    with (
        ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="llm") as pool,
        tqdm(total=len(requests), desc=desc, unit="req", disable=not progress) as bar,
    ):
        futures = {pool.submit(_one, model, r): i for i, r in enumerate(requests)}
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            bar.update(1)
    return [r for r in results if r is not None]
