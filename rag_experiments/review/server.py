"""``rag-exp review``: serve the review app with werkzeug's threaded server (no debug mode, no
reloader), on 127.0.0.1 by default, until Ctrl-C.

    rag-exp review [dataset=<file.jsonl>] [--port 8765] [--host 127.0.0.1] [--workspace DIR]
                   [--out FILE] [--max-upload-mb 50] [--mlflow-ui URL] [hydra overrides…]

Hydra overrides apply to every generation started from the page (``embedder=hash``,
``tracking=server``, ``llm.num_ctx=16384`` …); ``llm=<option>`` preselects the model option.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from flask import Flask

from rag_experiments.common.cliargs import DEFAULT_TRACKING_URI
from rag_experiments.common.wsgi_server import BackgroundServer
from rag_experiments.errors import ConfigError
from rag_experiments.review.app import DEFAULT_MAX_UPLOAD_MB, DEFAULT_MLFLOW_UI, create_app
from rag_experiments.review.workspace import Workspace

log = logging.getLogger("rag_experiments")

DEFAULT_PORT = 8765
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ReviewServer(BackgroundServer):
    """Serve the review app on a werkzeug threaded server in a background thread.

    Args:
        app: The review app (:func:`~rag_experiments.review.app.create_app`).
        host: Interface to bind (127.0.0.1: this machine only).
        port: TCP port; 0 = any free port (read :attr:`port` after :meth:`start`).

    Raises:
        ConfigError: The port is outside 0..65535.
    """

    def __init__(self, app: Flask, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        super().__init__(host, port, "review")
        self.app = app

    def wsgi_app(self) -> Flask:
        """The review app."""
        return self.app

    def stop(self) -> None:
        """Stop serving, cancel a running generation, release the port (idempotent)."""
        super().stop()
        jobs = self.app.extensions.get("rag_exp_review", {}).get("jobs")
        if jobs is not None:
            jobs.shutdown()


def review_command(argv: list[str], stop: threading.Event | None = None) -> int:
    """``rag-exp review …``: parse the arguments, serve until Ctrl-C (or ``stop``).

    Returns:
        The exit code (0).

    Raises:
        ConfigError: Bad arguments, overrides that do not compose, or an unusable address.
        DatasetError: ``dataset=`` cannot be loaded.
    """
    parser = argparse.ArgumentParser(
        prog="rag-exp review",
        allow_abbrev=False,
        description="Review generated question-answer pairs in the browser: upload PDF/DOCX/MD "
        "files, generate pairs with a local model (live progress, cancel), edit, approve or "
        "reject each pair, save the approved ones as a dataset in our JSONL format. "
        "`dataset=<file.jsonl>` reviews an existing dataset. Other arguments are Hydra "
        "overrides of conf/generate.yaml for the generations started from the page "
        "(e.g. embedder=hash, tracking=server; llm=ollama preselects the model option).",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1: this machine only; the app has no login)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0 = any free port)",
    )
    parser.add_argument(
        "--workspace",
        default=None,
        help="folder for uploads, generation output and review state (default: "
        "a new temporary folder); reuse it to continue a review",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="where Save writes the approved pairs (default: <workspace>/reviewed/eval.jsonl)",
    )
    parser.add_argument(
        "--max-upload-mb",
        type=float,
        default=DEFAULT_MAX_UPLOAD_MB,
        help=f"largest upload in MB (default {DEFAULT_MAX_UPLOAD_MB})",
    )
    parser.add_argument(
        "--mlflow-ui",
        default=DEFAULT_MLFLOW_UI,
        help=f"MLflow UI address for the run links (default {DEFAULT_MLFLOW_UI})",
    )
    grading = parser.add_argument_group(
        "grading a run (--run): people's 0/1 verdicts on a sample of its rows, blind to the judge"
    )
    grading.add_argument("--run", default=None, help="the run id to grade")
    grading.add_argument(
        "--metric",
        action="append",
        default=None,
        help="a [0, 1] metric column to grade (repeatable; default: every judged one)",
    )
    grading.add_argument("--n", type=int, default=20, help="rows in the sample (default 20)")
    grading.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    grading.add_argument(
        "--tracking-uri",
        default=DEFAULT_TRACKING_URI,
        help=f"MLflow store holding the run (default {DEFAULT_TRACKING_URI})",
    )
    opts, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if opts.max_upload_mb <= 0:
        parser.error("--max-upload-mb must be > 0")
    if opts.run is not None:
        if rest:
            parser.error(f"--run takes no dataset or overrides: {' '.join(rest)}")
        return _serve_grading(opts, stop)
    dataset = None
    overrides = []
    for arg in rest:
        if arg.startswith("dataset="):
            dataset = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
    if dataset is not None and not Path(dataset).expanduser().is_file():
        parser.error(
            f"dataset={dataset}: no such file; give a dataset file in our JSONL format "
            "(e.g. dataset=datasets/sample/eval.jsonl)"
        )

    workspace = Workspace(opts.workspace)
    app = create_app(
        workspace,
        dataset=Path(dataset).expanduser() if dataset else None,
        out=opts.out,
        mlflow_ui=opts.mlflow_ui,
        max_upload_mb=opts.max_upload_mb,
        overrides=overrides,
        loopback_only=opts.host in LOOPBACK,
    )
    server = ReviewServer(app, host=opts.host, port=opts.port)
    url = server.start()
    if opts.host not in LOOPBACK:
        log.warning(
            "serving on %s: the review app has no login; anyone who can reach this "
            "address can read and change the workspace",
            opts.host,
        )
    out = app.extensions["rag_exp_review"]["out"]
    print(
        f"rag-exp review: open {url}  (workspace {workspace.root}; saves to {out}); Ctrl-C to stop",
        flush=True,
    )
    return _wait(server, stop, f"the workspace {workspace.root} is kept")


def _serve_grading(opts: argparse.Namespace, stop: threading.Event | None) -> int:
    """``rag-exp review --run <run id>``: serve the grading page of the run until Ctrl-C."""
    from rag_experiments.common.uri import require_existing_store
    from rag_experiments.review.grading import create_grading_app
    from rag_experiments.tracking.store import RunStore

    if opts.n < 1:
        raise ConfigError("--n must be ≥ 1")
    require_existing_store(opts.tracking_uri)
    folder = Path(opts.workspace or "grading").expanduser().resolve()
    app = create_grading_app(
        RunStore(opts.tracking_uri),
        opts.run,
        folder,
        metrics=opts.metric,
        n=opts.n,
        seed=opts.seed,
        mlflow_ui=opts.mlflow_ui,
        loopback_only=opts.host in LOOPBACK,
    )
    grading = app.extensions["rag_exp_grading"]
    server = ReviewServer(app, host=opts.host, port=opts.port)
    url = server.start()
    print(
        f"rag-exp review: grade run {opts.run} at {url}  ({len(grading.sample)} rows, metrics "
        f"{', '.join(grading.metrics)}; labels in {grading.labels.path}); Ctrl-C to stop",
        flush=True,
    )
    return _wait(server, stop, f"the labels are kept in {grading.labels.path}")


def _wait(server: ReviewServer, stop: threading.Event | None, kept: str) -> int:
    """Serve until ``stop`` is set (Ctrl-C or SIGTERM in the main thread), then stop the server
    and say what is ``kept``."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        print(f"rag-exp review: stopped; {kept}", flush=True)
    return 0
