"""A real MLflow tracking server on 127.0.0.1 for tests (sqlite backend, proxied artifacts).

Use the fixture by importing it into a test module (or a conftest)::

    from mlflow_server import mlflow_server  # noqa: F401  (fixture)

    def test_x(mlflow_server: str) -> None:  # the server's URL
        ...

The server runs ``mlflow server --backend-store-uri sqlite:///<tmp>/db.sqlite
--artifacts-destination <tmp>/art --serve-artifacts --workers 1`` in its own process group, with
telemetry (``MLFLOW_DISABLE_TELEMETRY``, ``DO_NOT_TRACK``) and the background job runner
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION``) off. Artifacts are uploaded over HTTP
(``mlflow-artifacts:/``), as a remote client would.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

START_TIMEOUT_S = 120.0
"""The server takes ~15 s to start on a 2-core machine (imports, sqlite migrations)."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def run_mlflow_server(workdir: Path) -> Iterator[str]:
    """Start a server storing everything under ``workdir``; yield its URL; stop it.

    Args:
        workdir: Empty folder for ``db.sqlite``, ``art/`` and ``server.log``.

    Yields:
        ``http://127.0.0.1:<port>``.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    cmd = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{workdir / 'db.sqlite'}",
        "--serve-artifacts",
        "--artifacts-destination", str(workdir / "art"),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "1",
    ]  # fmt: skip
    log_path = workdir / "server.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            cmd, cwd=workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(url, proc, log_path)
        yield url
    finally:
        _stop(proc)


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"mlflow server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"mlflow server not healthy after {START_TIMEOUT_S:.0f} s:\n{log_path.read_text()[-3000:]}"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the server's process group (server, uvicorn worker), then kill what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=5)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real MLflow server, shared by the tests of one module."""
    with run_mlflow_server(tmp_path_factory.mktemp("mlflow_server")) as url:
        yield url
