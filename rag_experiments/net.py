"""Small HTTP helpers shared by every client of the package (model servers, RAG endpoints);
they know nothing of models, metrics or targets."""

from __future__ import annotations

import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime


def retry_after_s(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds a server asks the client to wait, from its ``Retry-After`` header.

    The header is either a number of seconds or an HTTP date (RFC 9110, section 10.2.3).

    Args:
        headers: Response headers (case-insensitive mapping, as httpx gives them; a plain
            dict is looked up as ``retry-after`` and ``Retry-After``).
        now: The current Unix time for an HTTP date (default: the clock).

    Returns:
        The wait in seconds (>= 0), or None when the header is absent or unreadable.
    """
    value = (headers.get("retry-after") or headers.get("Retry-After") or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))
