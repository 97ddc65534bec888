"""Hydra entry point of ``rag-exp serve``: run the built-in baseline as an HTTP service.

The config is composed exactly as for ``rag-exp run`` (same ``conf/``, same groups: ``dataset``
for the corpus, ``chunker``, ``embedder``, ``retriever``, ``llm``, ``metrics``, ``paths``), so
``rag-exp serve embedder=hash`` and ``rag-exp run embedder=hash`` build the same baseline. The
``metrics`` group matters too: it sets the retrieval depth (the deepest cutoff) and whether
answers are generated (``metrics=retrieval`` serves retrieval only). Host and port are options
of the command, not of the experiment config (``--host``, ``--port``), so they never show up
in a run's params.

The API is in :mod:`rag_experiments.targets.http_server`.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from rag_experiments.build import build, chat_class, is_assembled, part_class, run_caveat
from rag_experiments.config import register
from rag_experiments.errors import ConfigError
from rag_experiments.locations import CONF_DIR
from rag_experiments.protocols import MetricBase, TargetBase
from rag_experiments.targets.http_server import MAX_REQUEST_BYTES, TargetServer

log = logging.getLogger("rag_experiments")


def _serving_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` with only the metrics that require no shared part (no judge, no embedder; e.g.
    ``RetrievalMetrics``, whose declared ``depth`` sets the retrieval depth): the server
    scores nothing, so no judge model is built."""
    out = cfg.copy()
    suite = {
        key: node
        for key, node in cfg.metrics.suite.items()
        if not part_class(node, MetricBase).requires
    }
    with open_dict(out):
        out.metrics.suite = suite
    return out


def serve_job(
    cfg: DictConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    stop: threading.Event | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> None:
    """Build and prepare the baseline from ``cfg``, then serve it until ``stop`` is set (or
    SIGINT/SIGTERM arrives, when called from the main thread).

    Args:
        cfg: The composed root config; ``target`` must be the baseline.
        host: Interface to bind.
        port: TCP port (0 = any free port; the URL is printed).
        stop: Event that ends serving; None = wait for a signal.
        max_request_bytes: Largest request body accepted (413 beyond).

    Raises:
        ConfigError: ``target`` is not assembled from the config's parts (the baseline), or
            the address cannot be bound.
        RagExpError: Building the baseline or its index failed.
    """
    if not is_assembled(cfg.target):
        kind = part_class(cfg.target, TargetBase).__name__
        raise ConfigError(
            f"rag-exp serve runs the built-in baseline; target={kind} cannot be served. "
            "Drop the target override (target=baseline)"
        )
    exp = build(_serving_config(cfg))
    exp.target.prepare(exp.dataset)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    server = TargetServer(exp.target, host=host, port=port, max_request_bytes=max_request_bytes)
    url = server.start()
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving on %s: the API has no authentication; anyone who can reach "
            "this address can query the corpus",
            host,
        )
    mode = (
        "answers with " + chat_class(cfg.llm).__name__
        if exp.generate
        else ("retrieval only (metrics.generate is false)")
    )
    print(
        f"rag-exp serve: listening on {url}  (POST {url}/ask, GET {url}/health; {mode}); "
        "Ctrl-C to stop",
        flush=True,
    )
    caveat = run_caveat({"generator": cfg.llm}) if exp.generate else ""
    if caveat:
        print(f"  NOTE: {caveat}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        print("rag-exp serve: stopped", flush=True)


def main(
    argv: Sequence[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> None:
    """Compose the config from Hydra overrides ``argv`` and serve (see :func:`serve_job`).

    Args:
        argv: Hydra overrides and flags (``embedder=hash``, ``--cfg job``).
        host: Interface to bind.
        port: TCP port.
        max_request_bytes: Largest request body accepted (413 beyond).

    Raises:
        ConfigError: ``-m``/``--multirun`` was given (one server serves one configuration).
    """
    if any(a in ("-m", "--multirun") for a in argv):
        raise ConfigError("rag-exp serve serves one configuration; drop -m/--multirun")

    register()  # schemas and resolvers, before @hydra.main composes

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def _serve(cfg: DictConfig) -> None:
        if OmegaConf.is_missing(cfg, "dataset") or not cfg.dataset:
            raise ConfigError("no dataset selected: pass dataset=<name> (its corpus is served)")
        serve_job(cfg, host=host, port=port, max_request_bytes=max_request_bytes)

    sys.argv = ["rag-exp serve", *argv]
    _serve()
