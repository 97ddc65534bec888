"""A WSGI app on werkzeug's threaded server in a background thread: :class:`BackgroundServer`,
shared by ``rag-exp serve`` and ``rag-exp review``.

werkzeug's server is Flask's production-safe building block: no debug mode, no reloader.
"""

from __future__ import annotations

import threading
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

from rag_experiments.errors import ConfigError

LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")
"""Interfaces that serve this machine only."""

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]
"""``Host`` header names a loopback-bound server accepts (Flask's ``TRUSTED_HOSTS``; any
other name is answered 400): a web page on another origin cannot reach the server through
DNS rebinding (a name of theirs resolving to 127.0.0.1)."""


class BackgroundServer:
    """Serve a WSGI app on a werkzeug threaded server in a daemon thread.

    A subclass provides the app (:meth:`wsgi_app`) and may add work to :meth:`stop`.

    Args:
        host: Interface to bind (127.0.0.1: this machine only).
        port: TCP port; 0 = any free port (read :attr:`port` after :meth:`start`).
        name: What is served, for messages and the thread name (``serve``, ``review``).

    Raises:
        ConfigError: The port is outside 0..65535.
    """

    def __init__(self, host: str, port: int, name: str) -> None:
        if not 0 <= int(port) <= 65535:
            raise ConfigError(f"{name} port must be in 0..65535, got {port}")
        self.host = host
        self.port = int(port)
        self.name = name
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    def wsgi_app(self) -> Any:
        """The WSGI application to serve."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8000`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> str:
        """Bind and serve in a background thread.

        Returns:
            The base URL.

        Raises:
            ConfigError: The address cannot be bound (port in use, no permission).
        """
        try:
            self._server = make_server(self.host, self.port, self.wsgi_app(), threaded=True)
        except (OSError, SystemExit) as exc:  # werkzeug prints and exits when the port is taken
            why = "the port is in use" if isinstance(exc, SystemExit) else str(exc)
            raise ConfigError(
                f"cannot serve on {self.host}:{self.port} ({why}); choose another --port"
            ) from None
        self.port = int(self._server.server_port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"rag-exp-{self.name}", daemon=True
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
