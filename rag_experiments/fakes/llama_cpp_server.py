"""llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) serving the
bundled SmolLM2 GGUF on a free port of 127.0.0.1: a real server (not a fake) for the slow tests
and ``bench/real_server.py``.

It computes one request at a time (one model state behind a lock: no parallel slots, no
``id_slot``) and keeps the state of the last prompt, so a request that starts with the previous
one's tokens computes only the rest; with ``cache=True`` (``--cache true``) it also keeps the
states of earlier prompts in RAM and restores the longest matching one. Its answers report
``usage.prompt_tokens`` but not how many came from that reuse; with ``verbose`` it logs each
reuse to its log file (``Llama.generate: N prefix-match hit, remaining M prompt tokens to
eval``), which :func:`prompt_reuse` reads.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx

from rag_experiments.errors import RagExpError

_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")


def free_port() -> int:
    """A free TCP port of 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaCppServer:
    """``python -m llama_cpp.server`` in a child process (a context manager).

    Args:
        log_path: File the server's output goes to (a file, not a pipe: a full pipe would
            block the server).
        model_path: The GGUF file (None = the bundled SmolLM2-135M).
        n_ctx: Context window in tokens.
        n_threads: CPU threads of the model.
        cache: Keep the states of earlier prompts in RAM (``--cache true``).
        startup_s: Seconds to wait for ``/v1/models`` to answer.

    Attributes:
        url: ``http://127.0.0.1:<port>/v1`` once started.

    Raises:
        RagExpError: The server package does not import, the server exits or does not answer
            within ``startup_s``.
    """

    log_path: Path
    model_path: str | None = None
    n_ctx: int = 2048
    n_threads: int = 1
    cache: bool = False
    startup_s: float = 120.0
    url: str = ""
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> LlamaCppServer:
        """Start the server and wait until it answers."""
        from rag_experiments.llm.embedded import bundled_model_path

        probe = subprocess.run(
            [sys.executable, "-c", "import llama_cpp.server.app"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if probe.returncode != 0:
            raise RagExpError(
                "llama_cpp.server does not import; install llama-cpp-python's server extras "
                "(pip install -e .[dev]): " + probe.stderr[-300:]
            )
        port = free_port()
        args = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path or bundled_model_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.n_threads),
            "--seed",
            "0",
        ]
        if self.cache:
            args += ["--cache", "true"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = self.log_path.open("wb")
        self._proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()  # the child holds its own descriptor
        self.url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + self.startup_s
        while True:
            if self._proc.poll() is not None:
                raise RagExpError(f"llama_cpp.server exited: {self.log()[-1000:]}")
            try:
                if httpx.get(f"{self.url}/models", timeout=1, trust_env=False).is_success:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RagExpError(f"llama_cpp.server did not answer within {self.startup_s:g} s")
            time.sleep(0.2)

    def log(self) -> str:
        """The server's output so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """End the server (terminate, then kill after 10 s)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._proc = None

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def prompt_reuse(log: str) -> tuple[int, int]:
    """``(reused, computed)`` prompt tokens over the prefix-match lines of a server log (only
    requests that reused a prefix log one; others computed their whole prompt, which
    ``usage.prompt_tokens`` counts)."""
    reused = computed = 0
    for match in _HIT.finditer(log):
        reused += int(match.group(1))
        computed += int(match.group(2))
    return reused, computed
