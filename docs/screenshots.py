"""Retake the README's MLflow UI screenshots: ``docs/run_page.png`` and ``docs/traces.png``.

Run the main job first (``make run`` in a folder of your choice), then::

    .venv/bin/python docs/screenshots.py <folder with mlruns.db> [--out docs] [--port 0]

The script starts ``mlflow ui --backend-store-uri sqlite:///<folder>/mlruns.db`` on 127.0.0.1 (a
free port unless ``--port``), drives Debian's Chromium (``/usr/bin/chromium``, no browser download)
with Playwright, and stops the UI again. It takes:

- ``run_page.png``: the newest finished run of the experiment (``--experiment``, default
  ``rag-experiments``), *Overview* tab: the metrics table, params and tags (1400x1000 viewport);
  the first rows of its *Metrics* box are printed (the key metrics, logged first);
- ``traces.png``: the experiment's *Traces* view with one question's trace open: the span tree
  (``question`` -> ``retrieve``, ``generate``), the root span's inputs/outputs and the
  *Assessments* pane (one feedback per judged or key metric). The question is the run's first
  answerable one (trace tag ``answerable`` not ``false``) unless ``--question`` gives part of its
  text.

First-visit popups (the *MLflow Assistant* panel, the *Detect Issues* hint) are closed before the
shot. A PNG over ``--max-kb`` (400) is downscaled with Pillow until it fits.

Errors: exits with a one-line message when the folder has no ``mlruns.db``, the experiment has no
finished run or no trace, Chromium is missing, or the UI does not answer within ``--start-timeout``
seconds (180; the UI takes about a minute to start on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from mlflow import MlflowClient
from mlflow.entities import ViewType

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 1000}
# data-component-id attributes of MLflow 3.17's UI
ASSISTANT_CLOSE = '[data-component-id="mlflow.assistant.chat_panel.close"]'
DETECT_ISSUES_GOT_IT = '[data-component-id="mlflow.detect_issues.guidance.got_it"]'
TRACES_TABLE_ROW = '[data-component-id="web-shared.traces-table.row-select"]'
ASSESSMENTS_TOGGLE = '[data-component-id="shared.model-trace-explorer.assessments-pane-toggle"]'
RENDER_TIMEOUT_MS = 90_000


class ShotError(RuntimeError):
    """A screenshot cannot be taken; the message says why and how to fix it."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pick_run_and_trace(
    tracking_uri: str, experiment: str, question: str | None
) -> tuple[str, str, str]:
    """Find what to photograph.

    Args:
        tracking_uri: ``sqlite:///…/mlruns.db``.
        experiment: experiment name.
        question: part of the question text of the trace to open, or None for the run's first
            answerable question (trace tag ``answerable`` not ``"false"``).

    Returns:
        (experiment id, run id of the newest FINISHED run, trace id).

    Raises:
        ShotError: no such experiment, no finished run, or no matching trace.
    """
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ShotError(f"no experiment {experiment!r} in {tracking_uri}: run `make run` first")
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string="attributes.status = 'FINISHED'",
        run_view_type=ViewType.ACTIVE_ONLY,
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise ShotError(f"experiment {experiment!r} has no finished run: run `make run` first")
    run_id = runs[0].info.run_id
    traces = client.search_traces(
        locations=[exp.experiment_id], run_id=run_id, max_results=200, include_spans=False
    )
    traces = sorted(traces, key=lambda t: t.info.request_time)
    for trace in traces:
        preview = trace.info.request_preview or ""
        if question is not None:
            if question.lower() in preview.lower():
                return exp.experiment_id, run_id, trace.info.trace_id
        elif trace.info.tags.get("answerable", "true") != "false":
            return exp.experiment_id, run_id, trace.info.trace_id
    wanted = f"containing {question!r}" if question else "of an answerable question"
    raise ShotError(f"run {run_id} has no trace {wanted}: pass another --question")


def start_ui(db: Path, port: int, timeout_s: float) -> subprocess.Popen[bytes]:
    """Start ``mlflow ui`` on ``db`` (its own process group) and wait until it answers.

    Raises:
        ShotError: the UI exited or did not answer HTTP 200 within ``timeout_s`` seconds.
    """
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        f"sqlite:///{db}",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    log = open(db.parent / "mlflow_ui_screenshots.log", "wb")  # noqa: SIM115 (outlives this call)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ShotError(f"mlflow ui exited with {proc.returncode}: see {log.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(2)
    stop_ui(proc)
    raise ShotError(f"mlflow ui did not answer on port {port} in {timeout_s:.0f} s: see {log.name}")


def stop_ui(proc: subprocess.Popen[bytes]) -> None:
    """Stop the UI started by :func:`start_ui` and its worker processes (its process group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def close_popups(page) -> None:  # noqa: ANN001 (playwright.sync_api.Page, imported lazily)
    """Close the first-visit popups that are showing (each waited for a few seconds)."""
    for selector in (ASSISTANT_CLOSE, DETECT_ISSUES_GOT_IT):
        button = page.locator(selector)
        try:
            button.first.wait_for(state="visible", timeout=5_000)
        except Exception:  # noqa: BLE001 (Playwright's TimeoutError: the popup is not shown)
            continue
        button.first.click()


def first_metric_rows(page, n: int = 6) -> list[str]:  # noqa: ANN001 (playwright Page)
    """The first ``n`` metric names of the run page's *Metrics* box, as the page shows them
    (MLflow lists a run's metrics in the order they were first logged)."""
    text = page.inner_text("body")
    start = text.find("Metrics (")
    lines = [line.strip() for line in text[start:].splitlines()[1:] if line.strip()]
    names = [line for line in lines if line not in ("Metric", "Value")]
    out: list[str] = []
    for line in names:
        if line.startswith("Parameters ("):
            break
        try:
            float(line)
        except ValueError:
            out.append(line)
        if len(out) == n:
            break
    return out


def save_png(png: bytes, path: Path, max_kb: int) -> None:
    """Write ``png`` to ``path``, downscaled by steps of 0.85 until it is at most ``max_kb`` KiB."""
    if len(png) > max_kb * 1024:
        from PIL import Image

        image = Image.open(io.BytesIO(png))
        scale = 1.0
        while len(png) > max_kb * 1024 and scale > 0.3:
            scale *= 0.85
            size = (round(image.width * scale), round(image.height * scale))
            buffer = io.BytesIO()
            image.resize(size, Image.Resampling.LANCZOS).save(buffer, "PNG", optimize=True)
            png = buffer.getvalue()
    path.write_bytes(png)
    print(f"wrote {path} ({len(png) // 1024} KiB)")


def take_shots(base: str, exp_id: str, run_id: str, trace_id: str, out: Path, max_kb: int) -> None:
    """Take both screenshots of the UI at ``base`` into ``out``."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(RENDER_TIMEOUT_MS)
        try:
            page.goto(f"{base}/#/experiments/{exp_id}/runs/{run_id}", wait_until="commit")
            page.get_by_text("Metrics (").first.wait_for()
            close_popups(page)
            page.get_by_text("Parameters (").first.wait_for()
            page.wait_for_timeout(2_000)  # the tags and dataset boxes fill in last
            save_png(page.screenshot(), out / "run_page.png", max_kb)
            print("first rows of the Metrics box: " + ", ".join(first_metric_rows(page)))

            # the trace list first: its popups sit above the trace drawer and block its buttons
            page.goto(f"{base}/#/experiments/{exp_id}/traces", wait_until="commit")
            page.locator(TRACES_TABLE_ROW).first.wait_for()
            close_popups(page)
            page.goto(
                f"{base}/#/experiments/{exp_id}/traces?traceId={trace_id}", wait_until="commit"
            )
            page.locator(ASSESSMENTS_TOGGLE).first.click()
            page.get_by_text("Feedback (").first.wait_for()
            page.wait_for_timeout(2_000)
            save_png(page.screenshot(), out / "traces.png", max_kb)
        except PlaywrightError as error:
            first_line = str(error).splitlines()[0]
            failed = out / "screenshot_failed.png"
            page.screenshot(path=failed)
            raise ShotError(f"{page.url}: {first_line} (the page as it was: {failed})") from None
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, start the UI, take both shots, stop the UI; 0 on success, 1 on error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="folder holding mlruns.db (where `make run` ran)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--port", type=int, default=0, help="0: a free port")
    parser.add_argument("--experiment", default="rag-experiments")
    parser.add_argument("--question", default=None, help="part of the question to open")
    parser.add_argument("--max-kb", type=int, default=400)
    parser.add_argument("--start-timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    db = (args.folder / "mlruns.db").resolve()
    try:
        if not db.is_file():
            raise ShotError(f"{db} not found: pass the folder where `make run` ran")
        if not CHROMIUM.is_file():
            raise ShotError(f"{CHROMIUM} is not installed: apt-get install chromium")
        exp_id, run_id, trace_id = pick_run_and_trace(
            f"sqlite:///{db}", args.experiment, args.question
        )
        port = args.port or free_port()
        proc = start_ui(db, port, args.start_timeout)
        try:
            args.out.mkdir(parents=True, exist_ok=True)
            take_shots(f"http://127.0.0.1:{port}", exp_id, run_id, trace_id, args.out, args.max_kb)
        finally:
            stop_ui(proc)
    except ShotError as error:
        print(f"screenshots: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
