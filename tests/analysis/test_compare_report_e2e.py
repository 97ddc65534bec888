"""End to end, with exactly the README's commands in an empty folder:

    rag-exp run -m embedder=hash metrics=retrieval chunker=fixed chunker.size=128,512
    rag-exp compare <child0> <child1> --json
    rag-exp report <parent>

then the logged HTML pages open in Debian's Chromium (Playwright, ``/usr/bin/chromium``, no
browser download; the ``browser`` fixture of ``test_review_e2e``) and every plot image loads.
Set ``RAG_EXP_SCREENSHOT_DIR`` to keep the screenshots (``docs/report.png`` is made this
way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.tracking.store import all_tags
from rag_experiments.tracking.sweep import PARENT_RUN_ID_FILE
from tests.review.test_review_e2e import browser  # noqa: F401  (Debian's Chromium via Playwright)

pytestmark = pytest.mark.slow


def _rag_exp(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    done = subprocess.run(
        [sys.executable, "-m", "rag_experiments", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _open(browser: Any, page_file: Path, shot: Path, full_page: bool) -> list[int]:  # noqa: F811
    """Open a page from disk; return its images' natural widths; save a screenshot."""
    page = browser.new_page(viewport={"width": 1250, "height": 900})
    try:
        page.goto(page_file.as_uri(), wait_until="load")
        widths = page.eval_on_selector_all(
            "img", "imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)"
        )
        page.screenshot(path=str(shot), full_page=full_page)
        return widths
    finally:
        page.close()


def test_sweep_compare_and_report_with_the_readme_commands(
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    _rag_exp(
        tmp_path,
        "run",
        "-m",
        "embedder=hash",
        "metrics=retrieval",
        "chunker=fixed",
        "chunker.size=128,512",
    )
    (parent_file,) = tmp_path.glob(f"multirun/*/*/{PARENT_RUN_ID_FILE}")
    parent = parent_file.read_text().strip()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    children = client.search_runs([exp], f"tags.`{MLFLOW_PARENT_RUN_ID}` = '{parent}'")
    by_job = {Path(all_tags(client, r)["job.dir"]).name: r for r in children}
    child0, child1 = by_job["0"], by_job["1"]
    assert (child0.data.params["chunker.size"], child1.data.params["chunker.size"]) == (
        "128",
        "512",
    )

    done = _rag_exp(tmp_path, "compare", child0.info.run_id, child1.info.run_id, "--json")
    result = json.loads(done.stdout)
    ndcg = result["metrics"]["nDCG@10"]
    assert ndcg["n"] == 60  # the sample's answerable questions
    assert ndcg["diff"] == pytest.approx(
        child1.data.metrics["nDCG_at_10"] - child0.data.metrics["nDCG_at_10"], abs=1e-12
    )
    assert ndcg["ci_low"] <= ndcg["diff"] <= ndcg["ci_high"]
    assert 0 < ndcg["p_value"] <= ndcg["p_holm"] <= 1
    assert set(result["by_type"]) >= {"procedural", "multi_hop"}
    assert all(f["user_input"] for f in result["flipped"])
    compare_run = client.get_run(result["comparison_run_id"])
    assert compare_run.data.tags["compare.run_b"] == child1.info.run_id

    done = _rag_exp(tmp_path, "report", parent)
    assert "best nDCG@10" in done.stdout
    report_html = Path(client.download_artifacts(parent, "report/report.html", str(tmp_path)))
    compare_html = Path(
        client.download_artifacts(result["comparison_run_id"], "compare.html", str(tmp_path))
    )
    shots = Path(os.environ.get("RAG_EXP_SCREENSHOT_DIR", tmp_path))
    widths = _open(browser, report_html, shots / "report.png", full_page=True)
    assert len(widths) == 2 and all(w > 0 for w in widths), widths  # line plot + Pareto
    widths = _open(browser, compare_html, shots / "compare.png", full_page=False)
    assert len(widths) == 2 and all(w > 0 for w in widths), widths  # diff CI + scatter
