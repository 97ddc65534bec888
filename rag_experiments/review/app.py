"""The review web app (Flask): upload documents, generate pairs in the background, review them
card by card, save the approved ones as a dataset.

Routes (JSON unless said otherwise)::

    GET   /               the page (HTML): upload, generate form and progress, cards, save
    POST  /upload         multipart ``files``: store PDF/DOCX/MD files in the workspace
    POST  /generate       {n, n_unanswerable, types, llm, model, base_url, model_path,
                           attempt_factor, start_over}: check the model, start the job (202)
    POST  /cancel         stop the running generation
    GET   /progress       the job's snapshot (state, counts per type, message, MLflow link)
    GET   /cards          every card
    PATCH /cards/<id>     {user_input, reference, question_type, answerable, status} (any
                          subset); POST works too
    POST  /save           validate the approved cards, write them to the output file
    GET   /stats          total, by_type, average lengths, counts by status
    GET   /health         {"status": "ok", …}

Security: the app binds 127.0.0.1 by default and has no login. Requests that change anything
must carry the page's token in the ``X-Review-Token`` header (a page of another site cannot
read it, and a cross-site request cannot set that header without a CORS preflight this app
never grants). When served on a loopback address, the ``Host`` header must be a loopback name
(``TRUSTED_HOSTS``: blocks DNS rebinding). Uploads go through
:class:`~rag_experiments.review.workspace.Workspace` (safe names, size limit); the request body
is capped by ``MAX_CONTENT_LENGTH`` (413 above it). No route takes a file path from the
request: the output file is fixed when the app is created. Templates autoescape and the page's
script writes user text with ``textContent`` / ``value`` only; every response carries a
``Content-Security-Policy`` (``default-src 'self'``) and ``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flask import Flask, jsonify, render_template, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from rag_experiments.common.wsgi_server import LOOPBACK_HOSTS
from rag_experiments.errors import ConfigError, RagExpError, ReviewError
from rag_experiments.records import QUESTION_TYPES, Sample
from rag_experiments.review.jobs import GenerationJob, JobManager
from rag_experiments.review.options import (
    GenerateRequest,
    GenerationOptions,
    compose_generate_config,
)
from rag_experiments.review.preflight import check_model
from rag_experiments.review.saving import save_approved
from rag_experiments.review.state import CardPatch, ReviewState, card_stats
from rag_experiments.review.workspace import ALLOWED_EXTENSIONS, Workspace

log = logging.getLogger(__name__)

DEFAULT_MLFLOW_UI = "http://127.0.0.1:5000"
DEFAULT_MAX_UPLOAD_MB = 50
TOKEN_HEADER = "X-Review-Token"

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


def create_app(
    workspace: Workspace | str | Path | None = None,
    *,
    dataset: str | Path | None = None,
    out: str | Path | None = None,
    mlflow_ui: str = DEFAULT_MLFLOW_UI,
    max_upload_mb: float = DEFAULT_MAX_UPLOAD_MB,
    conf_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    loopback_only: bool = True,
) -> Flask:
    """Build the review app.

    Args:
        workspace: The workspace (a folder or a :class:`Workspace`); None = a new temporary
            folder. Its saved state is loaded, so a restart loses nothing.
        dataset: A dataset in our JSONL format to review (its samples become cards).
        out: Where ``POST /save`` writes (the command line's ``--out``); None =
            ``<workspace>/reviewed/eval.jsonl``. Relative paths resolve against the working
            directory.
        mlflow_ui: Base URL of the MLflow UI (for the run link).
        max_upload_mb: Largest request body and uploaded file, in MB (2**20 bytes).
        conf_dir: The Hydra config folder (default: the repository's ``conf/``).
        overrides: Hydra overrides of ``conf/generate.yaml`` (``llm=ollama`` preselects the
            model option; ``embedder=hash``, ``tracking.uri=…`` apply to every generation).
        loopback_only: Accept only loopback ``Host`` headers (set False when serving on
            another interface).

    Returns:
        The Flask app; ``app.config["REVIEW_TOKEN"]`` is the token state-changing requests
        must send, ``app.extensions["rag_exp_review"]`` holds the workspace, state and jobs.

    Raises:
        ConfigError: The overrides do not compose with ``conf/generate.yaml``, ``out`` is a
            folder, or the workspace cannot be created.
        DatasetError: ``dataset`` cannot be loaded.
        ReviewError: The workspace's state file is unreadable.
    """
    from rag_experiments.locations import CONF_DIR

    space = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    state = ReviewState(space.state_path)
    if dataset is not None:
        from rag_experiments.data.jsonl import JsonlDataset

        added = state.add_samples(JsonlDataset(str(dataset)).load().samples, "dataset")
        log.info("review: %d cards from %s", added, dataset)
    _sync_generation(space, state)
    options = GenerationOptions.from_args(Path(conf_dir or CONF_DIR), list(overrides))
    out_path = Path(out).expanduser().resolve() if out else space.default_out
    if out_path.is_dir():
        raise ConfigError(
            f"--out {out_path} is a folder; give the dataset file to write, "
            f"e.g. --out {out_path / 'eval.jsonl'}"
        )
    save_lock = threading.Lock()
    jobs = JobManager(space.root / "generation_job.json")
    max_bytes = int(max_upload_mb * 2**20)

    app = Flask("rag_experiments.review", root_path=str(Path(__file__).parent))
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.config.update(MAX_CONTENT_LENGTH=max_bytes + 2**16)  # per file, plus multipart framing
    install_security(app, loopback_only)
    app.extensions["rag_exp_review"] = {
        "workspace": space,
        "state": state,
        "jobs": jobs,
        "options": options,
        "out": out_path,
    }

    @app.get("/")
    def index() -> Any:
        return render_template(
            "index.html",
            cards=[card.public() for card in state.cards()],
            uploads=[p.name for p in space.uploads()],
            types=QUESTION_TYPES,
            llm_options=options.llm_options,
            default_llm=options.default_llm,
            llm_defaults=options.defaults,
            token=app.config["REVIEW_TOKEN"],
            workspace=str(space.root),
            out=str(out_path),
            corpus=str(space.uploads_dir),
            max_upload_mb=max_upload_mb,
            accept=",".join(ALLOWED_EXTENSIONS),
            job=jobs.snapshot().to_dict(),
            stats=card_stats(state.cards()),
            form_defaults=GenerateRequest(),
        )

    @app.post("/upload")
    def upload() -> Any:
        files = request.files.getlist("files")
        if not files:
            raise ReviewError("no file in the request: choose one or more PDF, DOCX or MD files")
        for item in files:  # refuse a bad name before anything is stored
            space.check_name(item.filename)
        stored: list[Path] = []
        try:
            for item in files:
                stored.append(space.save_upload(item.filename, item.stream, max_bytes))
        except (ReviewError, OSError) as exc:  # all of the request, or none of it
            for path in stored:
                path.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise ReviewError(
                    f"upload refused: the file could not be stored ({exc}); "
                    "nothing of this upload was kept"
                ) from None
            raise
        return jsonify(stored=[p.name for p in stored], uploads=[p.name for p in space.uploads()])

    @app.post("/generate")
    def generate() -> Any:
        form = _model(GenerateRequest, _json_body())
        if not space.uploads():
            raise ReviewError("upload at least one PDF, DOCX or MD document first")
        if jobs.snapshot().state == "running":
            raise ReviewError(
                "a generation is already running: wait for it or cancel it", status=409
            )
        cfg = compose_generate_config(form, options, space)
        check_model(cfg.llm, "generator")
        if form.n_unanswerable:
            check_model(cfg.judge, "judge")
        if form.start_over:
            state.remove_origin("generation")
        job = GenerationJob(
            cfg,
            lambda samples: state.add_samples(samples, "generation"),
            mlflow_ui=mlflow_ui,
            record=jobs.record,
        )
        jobs.start(job)
        return jsonify(jobs.snapshot().to_dict()), 202

    @app.post("/cancel")
    def cancel() -> Any:
        cancelled = jobs.cancel()
        return jsonify(cancelled=cancelled, job=jobs.snapshot().to_dict())

    @app.get("/progress")
    def progress() -> Any:
        return jsonify(job=jobs.snapshot().to_dict(), n_cards=len(state))

    @app.get("/cards")
    def cards() -> Any:
        return jsonify(cards=[card.public() for card in state.cards()])

    @app.route("/cards/<card_id>", methods=["PATCH", "POST"])
    def edit_card(card_id: str) -> Any:
        patch = _model(CardPatch, _json_body())
        return jsonify(card=state.update(card_id, patch).public())

    @app.post("/save")
    def save() -> Any:
        cards = state.cards()
        if not any(card.status == "approved" for card in cards):
            raise ReviewError("no card is approved: approve the pairs to keep, then save")
        with save_lock:  # one save at a time (a double click)
            result = save_approved(cards, out_path)
        body = {**result.to_dict(), "corpus": str(space.uploads_dir) if space.uploads() else None}
        return jsonify(body), (200 if result.ok else 422)

    @app.get("/stats")
    def stats() -> Any:
        return jsonify(card_stats(state.cards()))

    @app.get("/health")
    def health() -> Any:
        return jsonify(
            status="ok", workspace=str(space.root), cards=len(state), job=jobs.snapshot().state
        )

    @app.errorhandler(ReviewError)
    def review_error(exc: ReviewError) -> Any:
        return _error(str(exc), exc.status)

    @app.errorhandler(RagExpError)
    def rag_exp_error(exc: RagExpError) -> Any:
        return _error(str(exc), 400)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(exc: RequestEntityTooLarge) -> Any:
        return _error(
            f"request refused: it is larger than the limit of {max_upload_mb:g} MB "
            "(rag-exp review --max-upload-mb)",
            413,
        )

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Any:
        return _error(exc.description or exc.name, exc.code or 500)

    return app


def install_security(app: Flask, loopback_only: bool) -> None:
    """The review apps' protections (see the module docstring): a fresh token in
    ``app.config["REVIEW_TOKEN"]`` that every state-changing request must send in
    ``X-Review-Token``; loopback-only ``Host`` names when ``loopback_only``; the security
    headers (CSP, nosniff, no framing, no referrer, no caching) on every response."""
    app.config.update(
        REVIEW_TOKEN=secrets.token_urlsafe(24),
        TRUSTED_HOSTS=LOOPBACK_HOSTS if loopback_only else None,
        TEMPLATES_AUTO_RELOAD=False,
    )

    @app.before_request
    def require_token() -> Any:
        if request.method in ("POST", "PATCH", "PUT", "DELETE"):
            sent = request.headers.get(TOKEN_HEADER, "")
            if not secrets.compare_digest(sent, app.config["REVIEW_TOKEN"]):
                return _error("missing or wrong X-Review-Token header: reload the page", 403)
        return None

    @app.after_request
    def security_headers(response: Any) -> Any:
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response


def _error(message: str, status: int) -> Any:
    """The JSON error answer ``{"error": "http_<status>", "message": …}``."""
    return jsonify(error=f"http_{status}", message=message), status


def _json_body() -> Any:
    """The request's JSON body, or None when it is not JSON.

    Raises:
        ReviewError: The JSON nests too deeply to parse (400).
    """
    try:
        return request.get_json(silent=True)
    except RecursionError:
        raise ReviewError("invalid request: the JSON nests too deeply") from None


def _model(model: Any, data: Any) -> Any:
    """Validate a JSON body with pydantic ``model``.

    Raises:
        ReviewError: Not a JSON object, or invalid fields (400; every problem named).
    """
    if not isinstance(data, dict):
        raise ReviewError("send a JSON object (Content-Type: application/json)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        raise ReviewError(f"invalid request: {problems}") from None


def _sync_generation(space: Workspace, state: ReviewState) -> None:
    """Cards for the samples a generation in this workspace accepted (after a restart)."""
    from rag_experiments.generate.checkpoint import Checkpoint

    checkpoint = Checkpoint(space.generation_dir)
    if checkpoint.eval_path.is_file():
        samples: list[Sample] = checkpoint.samples()
        state.add_samples(samples, "generation")
