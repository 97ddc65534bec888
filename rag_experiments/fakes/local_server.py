"""What the fake model servers share: a server on a free port of 127.0.0.1, started and
stopped as a context manager, with its root URL (:class:`LoopbackServer`), and a threaded HTTP
server served from a daemon thread (:class:`LocalServer`)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar

from rag_experiments.errors import RagExpError

S = TypeVar("S", bound="LoopbackServer")


class _Server(ThreadingHTTPServer):
    request_queue_size = 2048  # many clients may connect at once (the default backlog is 5)
    daemon_threads = True


class LoopbackServer:
    """Base of the fake servers: a subclass implements :meth:`start`, :meth:`stop` and
    :meth:`_bound_port`; this gives the context manager and :attr:`root`."""

    def start(self: S) -> S:
        """Listen on a free port of 127.0.0.1 and serve; returns the server."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop serving."""
        raise NotImplementedError

    def _bound_port(self) -> int | None:
        """The port it listens on, or None before :meth:`start`."""
        raise NotImplementedError

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root(self) -> str:
        """``http://127.0.0.1:<port>``.

        Raises:
            RagExpError: The server is not started.
        """
        port = self._bound_port()
        if port is None:
            raise RagExpError(f"the {type(self).__name__} is not started: call start() first")
        return f"http://127.0.0.1:{port}"


class LocalServer(LoopbackServer):
    """A threaded HTTP fake server: a subclass implements :meth:`_handler` (the request
    handler class, bound to the server object).

    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    _httpd: ThreadingHTTPServer | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self: S) -> S:
        """Listen on a free port of 127.0.0.1 and serve in a daemon thread."""
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def _bound_port(self) -> int | None:
        return None if self._httpd is None else int(self._httpd.server_address[1])
