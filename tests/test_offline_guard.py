"""Offline by construction: the main job (``rag-exp run`` with the default config: the bundled
sample's corpus, MiniLM, the embedded SmolLM2 generator and judge, every default metric, MLflow
in a local SQLite file) runs under a guard that refuses every socket connection to a
non-loopback address and every DNS lookup of a non-local name, and records them; the job must
succeed with none.

Only the question file is cut to 4 of the sample's 69 questions: the default metric suite asks
the embedded judge about 7 times per question, which takes well over half an hour for all 69 on
two cores, and the connections a job makes do not depend on how many questions it has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.tracking.store import all_tags

GUARD = textwrap.dedent(
    '''
    """Loaded at interpreter start (sitecustomize on PYTHONPATH): refuse outbound sockets."""
    import ipaddress
    import os
    import socket

    _LOG = os.environ["RX_GUARD_LOG"]
    _LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


    def _is_local(host):
        if host is None:
            return True
        if isinstance(host, bytes):
            host = host.decode()
        host = str(host).split("%")[0].strip("[]")
        if host.lower() in _LOCAL_NAMES or host == "":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False


    def _refuse(what):
        with open(_LOG, "a", encoding="utf-8") as fh:
            fh.write(what + "\\n")
        raise OSError(f"offline guard: refused {what}")


    _connect = socket.socket.connect
    _connect_ex = socket.socket.connect_ex
    _getaddrinfo = socket.getaddrinfo


    def _check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(f"connect {address!r}")


    def connect(self, address):
        _check(self, address)
        return _connect(self, address)


    def connect_ex(self, address):
        _check(self, address)
        return _connect_ex(self, address)


    def _is_ip(host):
        try:
            ipaddress.ip_address(str(host).split("%")[0].strip("[]"))
        except ValueError:
            return False
        return True


    def getaddrinfo(host, *args, **kwargs):
        if not _is_local(host) and not _is_ip(host):  # an IP literal is checked at connect
            _refuse(f"lookup {host!r}")
        return _getaddrinfo(host, *args, **kwargs)


    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo
    '''
)


@pytest.fixture
def guarded_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose Python processes load the guard; and the guard's log file."""
    guard_dir = tmp_path / "guard"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
    log = tmp_path / "refused.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RX_", "PYTEST_"))}
    env["PYTHONPATH"] = str(guard_dir)
    env["RX_GUARD_LOG"] = str(log)
    return env, log


def test_the_guard_refuses_outbound_and_allows_loopback(guarded_env, tmp_path):
    env, log = guarded_env
    probe = textwrap.dedent(
        """
        import socket
        for target in [("10.255.255.1", 80), ("example.org", 443)]:
            try:
                socket.create_connection(target, timeout=0.5)
            except OSError as exc:
                assert "offline guard" in str(exc), exc
            else:
                raise SystemExit("not refused: %r" % (target,))
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        socket.create_connection(server.getsockname(), timeout=1).close()
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert log.read_text().splitlines() == ["connect ('10.255.255.1', 80)", "lookup 'example.org'"]


SAMPLE_EVAL = PROJECT_ROOT / "datasets" / "sample" / "eval.jsonl"


@pytest.mark.slow
@pytest.mark.llm
def test_main_job_makes_no_outbound_connection(guarded_env, tmp_path):
    env, log = guarded_env
    rows = SAMPLE_EVAL.read_text(encoding="utf-8").splitlines()
    answerable = [r for r in rows if json.loads(r).get("answerable", True)][:3]
    unanswerable = [r for r in rows if not json.loads(r).get("answerable", True)][:1]
    subset = tmp_path / "eval4.jsonl"
    subset.write_text("\n".join(answerable + unanswerable) + "\n", encoding="utf-8")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_experiments",
            "run",
            f"dataset.path={subset}",
            "progress=false",
            "run_name=offline",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=1800,
    )
    refused = log.read_text() if log.exists() else ""
    assert refused == "", f"outbound attempts:\n{refused}"
    assert out.returncode == 0, out.stderr[-3000:]
    assert "samples 4, failed 0" in out.stdout, out.stdout[-2000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    (run,) = client.search_runs([client.get_experiment_by_name("rag-experiments").experiment_id])
    metrics, tags = run.data.metrics, all_tags(client, run)  # identities: tags.json
    assert metrics["generator.llm_calls"] == 4 and metrics["judge.llm_calls"] > 0
    assert tags["generator.provider"] == "embedded" and tags["judge.provider"] == "embedded"
    assert (tmp_path / ".cache" / "llm.sqlite").is_file()
