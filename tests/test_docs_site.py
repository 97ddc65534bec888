"""The docs site works opened from ``site/index.html`` over ``file://`` (no server), as the
README says to open it: Playwright drives Debian's Chromium (the ``browser`` fixture of the
review test) over a site built by ``mkdocs build --strict`` from this checkout.

A search finds a term (Material's ``offline`` plugin: the index inlined as a script, the
search run in an iframe by the vendored ``docs/javascripts/iframe-worker-shim.js``), a nav click
lands on the page's own ``.html`` (``use_directory_urls: false``, not a directory listing),
and no request leaves ``file://`` (no font or script CDN).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.review.test_review_e2e import browser  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built from this checkout into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return out


def test_site_over_file_url_searches_and_navigates(site: Path, browser: Any) -> None:  # noqa: F811
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    remote: list[str] = []
    page.on("request", lambda r: remote.append(r.url) if not r.url.startswith("file:") else None)
    try:
        page.goto((site / "index.html").as_uri())
        page.fill("input.md-search__input", "calibrate")
        page.wait_for_selector(".md-search-result__item a", timeout=30_000)
        hits = page.locator(".md-search-result__item a")
        hrefs = [hits.nth(i).get_attribute("href") for i in range(hits.count())]
        assert any(h.startswith((site / "how-to" / "calibrate.html").as_uri()) for h in hrefs)

        page.goto((site / "index.html").as_uri())
        page.click("nav.md-nav--primary a:has-text('Quick start')")
        page.wait_for_load_state()
        assert page.url == (site / "getting-started" / "quickstart.html").as_uri()
        assert page.locator("h1").first.inner_text().startswith("Quick start")
        assert remote == []
    finally:
        page.close()
