"""End-to-end test of ``rag-exp review`` in a real browser: Playwright drives Debian's Chromium
(``/usr/bin/chromium``; no browser download) against the review app on a free port.

Upload a DOCX of the bundled sample, generate 4 pairs with the fake LLM, edit one question,
reject one pair, approve the rest (keyboard shortcuts included), save, reload: the cards keep
their status and edit, the saved file holds exactly the approved pairs with the edited text,
and ``rag-exp run`` evaluates it against the uploaded document.

The test waits with CSS selectors only: the page's Content-Security-Policy forbids the
``eval`` behind Playwright's ``wait_for_function``, which also shows the page works under it.
Set ``RAG_EXP_SCREENSHOT=docs/review.png`` to also write the README's screenshot.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rag_experiments.data.jsonl import JsonlDataset, write_jsonl
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.records import Sample
from rag_experiments.review.app import create_app
from rag_experiments.review.server import ReviewServer
from tests.run_helpers import evaluate_retrieval

CHROMIUM = Path("/usr/bin/chromium")
DOCX = PROJECT_ROOT / "datasets" / "sample" / "docs" / "data-retention.docx"
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
OLD_OPENING = "What does the guidance say about"
NEW_OPENING = "Which rules does the guidance set for"

pytestmark = pytest.mark.slow


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium from Debian's package, driven by Playwright."""
    required = os.environ.get("RAG_EXP_REQUIRE_BROWSER") == "1"  # set by .ci/run
    if not CHROMIUM.is_file():
        message = f"{CHROMIUM} is not installed (apt-get install chromium)"
        if required:
            pytest.fail(message + "; RAG_EXP_REQUIRE_BROWSER=1 requires this test to run")
        pytest.skip(message)
    if required:
        import playwright.sync_api as sync_api
    else:
        sync_api = pytest.importorskip(
            "playwright.sync_api", reason="the playwright package is not installed"
        )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ReviewServer]:
    app = create_app(
        tmp_path / "workspace",
        overrides=[
            "embedder=hash",
            f"paths.cache_dir={tmp_path}/cache",
            f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
        ],
    )
    with ReviewServer(app, port=0) as running:
        yield running


def _statuses(page: Any) -> list[str]:
    return page.eval_on_selector_all(".card", "nodes => nodes.map(n => n.dataset.status)")


def test_upload_generate_edit_reject_approve_save_reload_and_run(
    browser: Any, server: ReviewServer, tmp_path: Path
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url)

    # upload a DOCX of the bundled sample
    page.set_input_files("#files", str(DOCX))
    page.click("#upload-form button[type=submit]")
    page.wait_for_selector("#uploads li:has-text('data-retention.docx')")

    # generate 4 pairs with the fake LLM, no unanswerable question
    page.select_option("#llm", "fake")
    page.fill("input[name=n]", "4")
    page.fill("input[name=n_unanswerable]", "0")
    page.click("#btn-generate")
    page.wait_for_selector("body[data-job=done]", timeout=30_000)
    page.wait_for_selector(".card:nth-child(4)")
    assert page.locator(".card").count() == 4
    assert "Done: 4 pairs" in page.inner_text("#job-message")
    assert page.get_attribute("#mlflow-link", "href").startswith(
        "http://127.0.0.1:5000/#/experiments/"
    )
    cards = page.query_selector_all(".card")
    ids = [card.get_attribute("data-id") for card in cards]

    # edit the first question (autosaved), then approve it with the keyboard
    question = cards[0].query_selector(".f-question")
    original = question.input_value()
    assert original.startswith(OLD_OPENING)
    edited = original.replace(OLD_OPENING, NEW_OPENING)
    question.fill(edited)
    page.wait_for_selector(".card:nth-child(1) .save-state:text-is('saved')")
    page.keyboard.press("Escape")  # leave the field: shortcuts work again
    page.keyboard.press("a")  # approve the first card; the next becomes current
    page.keyboard.press("r")  # reject the second
    page.wait_for_selector(".card:nth-child(2)[data-status=rejected]")
    cards[2].query_selector(".btn-approve").click()
    page.keyboard.press("j")  # the fourth card becomes current
    page.keyboard.press("a")
    page.wait_for_selector(".card[data-status=pending]", state="detached")
    assert _statuses(page) == ["approved", "rejected", "approved", "approved"]
    # the counters follow the statuses once the last save is answered (a loaded machine: later)
    page.wait_for_selector("#st-approved:text-is('3')", timeout=10_000)
    assert page.inner_text("#st-approved") == "3"

    if os.environ.get("RAG_EXP_SCREENSHOT"):
        shot = Path(os.environ["RAG_EXP_SCREENSHOT"])
        shot = shot if shot.is_absolute() else PROJECT_ROOT / shot
        height = page.evaluate("document.documentElement.scrollHeight")
        page.set_viewport_size({"width": 1280, "height": height})  # whole page, no scrolling
        page.evaluate("window.scrollTo({top: 0, behavior: 'instant'})")
        page.wait_for_timeout(500)  # let the smooth scroll to the current card settle
        page.screenshot(path=str(shot))
        page.set_viewport_size({"width": 1280, "height": 1000})

    # save, then reload: statuses and the edit are still there
    page.click("#btn-save")
    page.wait_for_selector("#save-result.ok")
    assert "Saved 3 approved pairs" in page.inner_text("#save-result")
    assert "dataset.corpus=" in page.inner_text("#run-command")
    page.reload()
    page.wait_for_selector(".card")
    assert _statuses(page) == ["approved", "rejected", "approved", "approved"]
    first = page.query_selector(".card")
    assert first.query_selector(".f-question").input_value() == edited
    assert first.query_selector(".badge-edited").is_visible()
    assert errors == []

    # the saved dataset: exactly the approved pairs, with the edited text
    workspace = server.app.extensions["rag_exp_review"]["workspace"]
    saved = workspace.default_out
    rows = [json.loads(line) for line in saved.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [ids[0], ids[2], ids[3]]
    assert rows[0]["user_input"] == edited
    assert rows[0]["metadata"]["review"] == {
        "status": "approved",
        "edited": True,
        "original": {
            "user_input": original,
            "reference": rows[0]["reference"],
            "question_type": rows[0]["question_type"],
            "answerable": True,
        },
    }
    dataset = JsonlDataset(str(saved), corpus=str(workspace.uploads_dir)).load()
    assert len(dataset.samples) == 3 and [d.id for d in dataset.corpus] == ["data-retention"]

    # `rag-exp run` evaluates it against the uploaded document
    run = evaluate_retrieval(tmp_path, saved, workspace.uploads_dir, "reviewed")
    assert run.data.metrics["n_samples"] == 3


def test_a_script_in_a_pair_stays_text_in_the_browser(browser: Any, tmp_path: Path) -> None:
    script = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    sample = Sample(
        id="x1",
        user_input=f"{script} Who approves access?",
        reference=f"The manager {script}",
        reference_contexts=[f"Context {script}"],
        question_type="role_responsibility",
    )
    dataset = write_jsonl([sample], tmp_path / "in.jsonl")
    app = create_app(tmp_path / "ws", dataset=dataset, overrides=["embedder=hash"])
    with ReviewServer(app, port=0) as running:
        page = browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(running.url)
        page.wait_for_selector(".card[data-id=x1]")
        card = page.query_selector(".card")
        assert card.query_selector(".f-question").input_value() == sample.user_input
        assert card.query_selector(".f-reference").input_value() == sample.reference
        assert card.query_selector(".excerpts blockquote").inner_text() == f"Context {script}"
        assert page.query_selector_all("img") == [] and dialogs == []
