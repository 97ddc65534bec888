"""A real MLflow tracking server on 127.0.0.1 for tests (sqlite or PostgreSQL backend, proxied
artifacts).

Use the fixture by importing it into a test module (or a conftest)::

    from tests.mlflow_server import mlflow_server  # noqa: F401  (fixture)

    def test_x(mlflow_server: str) -> None:  # the server's URL
        ...

The server runs ``mlflow server --backend-store-uri sqlite:///<tmp>/db.sqlite
--artifacts-destination <tmp>/art --serve-artifacts --workers 1`` in its own process group, with
telemetry (``MLFLOW_DISABLE_TELEMETRY``, ``DO_NOT_TRACK``) and the background job runner
(``MLFLOW_SERVER_ENABLE_JOB_EXECUTION``) off. Artifacts are uploaded over HTTP
(``mlflow-artifacts:/``), as a remote client would.

The server teams share runs on PostgreSQL: :func:`run_postgres` starts one from Debian's
``postgresql`` binaries (``initdb`` into a temporary folder, 127.0.0.1, a free port, as the
``postgres`` user when the tests run as root, since PostgreSQL refuses to run as root), and the
session fixture ``mlflow_pg_server`` runs ``mlflow server --backend-store-uri
postgresql+psycopg://…`` on it (``psycopg`` comes with the ``[server]`` extra). Without
PostgreSQL these tests are skipped with the reason; in CI (``CI=true`` or
``RAG_EXP_REQUIRE_POSTGRES=1``) they fail instead. They are marked slow, so ``make test``
needs no PostgreSQL.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
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


class MlflowServer:
    """One ``mlflow server`` process on a fixed port, that a test can kill and start again
    (the same store and artifact folder, the same URL), as a deploy or a crash would.

    Args:
        workdir: Folder for ``art/``, ``server.log`` and, without ``backend_uri``,
            ``db.sqlite``.
        backend_uri: The backend store (``postgresql+psycopg://…``); a sqlite file in
            ``workdir`` when None.
        port: The port (a free one when None).
        workers: Server worker processes (``mlflow server --workers``; MLflow's own default is
            4, the tests use 1: one process to kill and restart).
        app_name: ``mlflow server --app-name`` (``rag-experiments``: our app with the trace
            batch endpoint, :func:`app_env`), or None for MLflow's own server.
    """

    def __init__(
        self,
        workdir: Path,
        backend_uri: str | None = None,
        port: int | None = None,
        workers: int = 1,
        app_name: str | None = None,
    ):
        self.workdir = workdir
        self.workers = workers
        self.app_name = app_name
        self.backend_uri = backend_uri or f"sqlite:///{workdir / 'db.sqlite'}"
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until ``/health`` answers.

        Raises:
            RuntimeError: It exited or was not healthy within :data:`START_TIMEOUT_S`.
        """
        env = {
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        if self.app_name is not None:
            env = app_env(env, self.workdir)
        cmd = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", self.backend_uri,
            "--serve-artifacts",
            "--artifacts-destination", str(self.workdir / "art"),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--workers", str(self.workers),
            *(["--app-name", self.app_name] if self.app_name else []),
        ]  # fmt: skip
        log_path = self.workdir / "server.log"
        with log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                cmd, cwd=self.workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            _wait_healthy(self.url, self.proc, log_path)
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """``SIGKILL`` the server's process group at once (a crash: nothing is flushed)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        """Terminate the server (then kill what is left)."""
        if self.proc is not None:
            _stop(self.proc)
            self.proc = None


APP_NAME = "rag-experiments"
"""Our ``mlflow.app`` entry point (pyproject.toml), ``mlflow server --app-name rag-experiments``."""


def app_env(env: dict[str, str], workdir: Path) -> dict[str, str]:
    """``env`` for an ``mlflow server --app-name rag-experiments`` process.

    The entry point is registered by installing the package (``pip install -e .``). A checkout
    installed before the entry point existed (or a worktree sharing another checkout's
    install) lacks it; then a one-entry ``.dist-info`` folder declaring it is written under
    ``workdir`` and put first on the server's ``PYTHONPATH``, where ``importlib.metadata``
    (which MLflow's ``get_entry_points`` reads) finds it. The app's code is the package's.
    """
    from importlib.metadata import entry_points

    if any(ep.name == APP_NAME for ep in entry_points(group="mlflow.app")):
        return env
    site = workdir / "entry-point"
    info = site / "rag_experiments_server_app-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rag-experiments-server-app\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[mlflow.app]\n{APP_NAME} = rag_experiments.tracking.server_app:create_app\n"
    )
    path = [str(site), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    return {**env, "PYTHONPATH": os.pathsep.join(path)}


@contextmanager
def run_mlflow_server(
    workdir: Path, backend_uri: str | None = None, app_name: str | None = None
) -> Iterator[str]:
    """Start a server storing everything under ``workdir``; yield its URL; stop it.

    Args:
        workdir: Empty folder for ``db.sqlite``, ``art/`` and ``server.log``.
        backend_uri: Backend store URI; ``sqlite:///<workdir>/db.sqlite`` when None.
        app_name: ``mlflow server --app-name`` (:data:`APP_NAME`), or None.

    Yields:
        ``http://127.0.0.1:<port>``.
    """
    server = MlflowServer(workdir, backend_uri, app_name=app_name)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


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


PG_USER = "mlflow"
"""The database superuser ``initdb`` creates (trust authentication on 127.0.0.1)."""
PG_START_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """PostgreSQL cannot be started here (the message says why and how to fix it)."""


def postgres_required() -> bool:
    """True in CI (``CI=true``) or with ``RAG_EXP_REQUIRE_POSTGRES=1``: the PostgreSQL tests
    must run there, so a missing PostgreSQL fails them instead of skipping them."""
    return (
        os.environ.get("CI", "").lower() == "true"
        or os.environ.get("RAG_EXP_REQUIRE_POSTGRES") == "1"
    )


def _pg_bindir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres`` (Debian keeps them in
    ``/usr/lib/postgresql/<version>/bin``, off the PATH)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if not versions:
        raise PostgresUnavailable(
            "PostgreSQL is not installed (no pg_ctl on the PATH or in /usr/lib/postgresql/*/bin):"
            " apt-get install -y postgresql"
        )
    return Path(versions[-1]).parent


def _as_user(root: Path) -> list[str]:
    """The command prefix that runs PostgreSQL's programs as a non-root user (PostgreSQL
    refuses root); ``root`` is handed to that user."""
    if os.geteuid() != 0:
        return []
    try:
        user = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise PostgresUnavailable(
            "running as root and there is no 'postgres' user to run PostgreSQL as: "
            "apt-get install -y postgresql (it creates the user)"
        ) from exc
    os.chown(root, user.pw_uid, user.pw_gid)
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root without runuser (util-linux) to drop root")
    return [runuser, "-u", "postgres", "--"]


def _pg(cmd: list[str], what: str, timeout: float = PG_START_TIMEOUT_S) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise PostgresUnavailable(
            f"{what} failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}"
        )


@contextmanager
def run_postgres() -> Iterator[Callable[[str], str]]:
    """Start a throw-away PostgreSQL on 127.0.0.1; yield ``new_database(name) -> URI``; stop it.

    The cluster lives in a fresh folder under the system temp dir (not pytest's ``tmp_path``,
    which is private to the test user), with ``fsync=off`` (tests need no durability).

    Yields:
        A function creating database ``name`` and returning its SQLAlchemy URI
        ``postgresql+psycopg://mlflow@127.0.0.1:<port>/<name>``.

    Raises:
        PostgresUnavailable: No PostgreSQL, no ``psycopg``, or the cluster did not start.
    """
    try:
        import psycopg
    except ImportError as exc:
        raise PostgresUnavailable(
            "psycopg is not installed: pip install -e '.[server]' (make install does)"
        ) from exc
    bindir = _pg_bindir()
    root = Path(tempfile.mkdtemp(prefix="rag-exp-pg-"))
    as_user = _as_user(root)
    data = root / "data"
    port = free_port()
    started = False
    try:
        _pg(
            [*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", PG_USER,
             "-E", "UTF8", "--no-sync"],
            "initdb",
        )  # fmt: skip
        options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
        _pg(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options,
             "-l", str(root / "postgres.log"), "-w", "-t", str(PG_START_TIMEOUT_S), "start"],
            "pg_ctl start",
        )  # fmt: skip
        started = True

        def new_database(name: str) -> str:
            with psycopg.connect(
                host="127.0.0.1", port=port, user=PG_USER, dbname="postgres", autocommit=True
            ) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{port}/{name}"

        yield new_database
    finally:
        if started:
            subprocess.run(
                [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Callable[[str], str]]:
    """``new_database(name) -> URI`` on a PostgreSQL started for the session; skipped with
    the reason when PostgreSQL cannot start (failed instead in CI)."""
    try:
        with run_postgres() as new_database:
            yield new_database
    except PostgresUnavailable as exc:
        if postgres_required():
            pytest.fail(f"PostgreSQL is required here (CI) but cannot start: {exc}")
        pytest.skip(f"PostgreSQL cannot start: {exc}")


@pytest.fixture(scope="session")
def mlflow_pg_server(
    postgres: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """URL of a real MLflow server over PostgreSQL with proxied artifacts, for the session."""
    workdir = tmp_path_factory.mktemp("mlflow_pg_server")
    with run_mlflow_server(workdir, postgres("mlflow")) as url:
        yield url


@pytest.fixture(scope="session")
def mlflow_pg_app_server(
    postgres: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """URL of ``mlflow server --app-name rag-experiments`` (our trace batch endpoint) over its
    own PostgreSQL database with proxied artifacts, for the session."""
    workdir = tmp_path_factory.mktemp("mlflow_pg_app_server")
    with run_mlflow_server(workdir, postgres("mlflow_app"), app_name=APP_NAME) as url:
        yield url


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real MLflow server, shared by the tests of one module."""
    with run_mlflow_server(tmp_path_factory.mktemp("mlflow_server")) as url:
        yield url
