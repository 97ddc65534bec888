"""End-to-end test of ``rag-exp review --run`` in a real browser (Playwright driving Debian's
Chromium, the ``browser`` fixture of :mod:`tests.review.test_review_e2e`).

A run of 20 recorded answers is judged by the fake judge (faithfulness 0.5 on every row: the
verdict 1). ``ana`` grades 10 sampled rows with the keyboard: she closes the tab after 5 and
reopens it (the page resumes at row 6), the server is killed (SIGKILL) after 7 and restarted,
she grades the last 3. ``bob`` grades the same 10. Then: the labels file holds each label once;
the labels are HUMAN feedback on the run's traces (read with ``mlflow.search_traces``);
``rag-exp agreement <run id>`` prints the kappas worked out below; and a run with
``calibration.labels=<run id>`` gives the PPI estimate worked out below.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from rag_experiments.cli import main
from rag_experiments.locations import PROJECT_ROOT
from rag_experiments.tracking.human_feedback import human_feedback
from tests.review.test_review_e2e import browser  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

RUN = ("llm=fake", "judge=fake", "embedder=hash", "metrics=custom", "target=recorded")
ANA = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]  # in sample order
BOB = [1, 1, 1, 1, 1, 1, 0, 0, 1, 1]


def _dataset(tmp_path: Path) -> Path:
    rows = []
    for i in range(20):
        fact = f"Form AR-{i} is approved within {i % 4 + 1} business days by the service desk."
        rows.append({
            "id": f"q{i:02d}", "user_input": f"How long does approving form AR-{i} take?",
            "reference": fact, "question_type": "factual" if i % 2 else "procedural",
            "recorded": {"response": fact, "retrieved_contexts": [fact, "The canteen opens."]},
        })  # fmt: skip
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class Grader:
    """``rag-exp review --run`` in a child process (so it can be killed)."""

    def __init__(self, run_id: str, uri: str, folder: Path) -> None:
        self.argv = [
            sys.executable, "-m", "rag_experiments", "review", "--run", run_id,
            "--metric", "faithfulness", "--n", "10", "--port", "0",
            "--workspace", str(folder), "--tracking-uri", uri,
        ]  # fmt: skip
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> str:
        env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
        self.proc = subprocess.Popen(
            self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = re.search(r"grade run \w+ at (http://\S+)", line)
            if found:
                self.url = found.group(1)
                return self.url
        raise AssertionError(f"rag-exp review --run did not start (exit {self.proc.wait()})")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _grade(page: Any, values: list[int]) -> list[str]:
    """Grade the next rows with the keyboard (1/0, then n); return their ids."""
    ids = []
    for value in values:
        row = page.wait_for_selector('#row[data-submitted="0"]')
        sid = row.get_attribute("data-id")
        assert page.inner_text("#verdicts .judge") == "hidden"  # blind before submitting
        page.keyboard.press(str(value))
        page.wait_for_selector(f'#row[data-submitted="1"][data-id="{sid}"]')
        assert page.inner_text("#verdicts .judge") == "1"  # the judge, once submitted
        ids.append(sid)
        page.keyboard.press("n")
    return ids


def _open(context: Any, url: str, name: str | None = None) -> Any:
    page = context.new_page()
    page.goto(url)
    if name is not None:
        page.fill("#grader", name)
        page.keyboard.press("Tab")  # the change event loads the rows
    page.wait_for_selector("#row:not([hidden])")
    return page


def test_grade_close_reopen_kill_restart_then_agreement_traces_and_ppi(
    browser: Any,  # noqa: F811
    tmp_path: Path,
    compose_cfg: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rag_experiments.job import run_job

    data = _dataset(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    run_job(compose_cfg(*RUN, "dataset=jsonl", f"dataset.path={data}"))
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([experiment])
    run_id = run.info.run_id
    folder = tmp_path / "grading"
    labels_file = folder / run_id / "labels.jsonl"

    grader = Grader(run_id, uri, folder)
    try:
        url = grader.start()
        context = browser.new_context()
        page = _open(context, url, "ana")
        ana = _grade(page, ANA[:5])
        page.close()  # closed mid-way: reopening resumes at the first row not graded
        page = _open(context, url)  # the name comes back from localStorage
        assert page.input_value("#grader") == "ana"
        assert page.inner_text("#progress") == "5 of 10 graded by you"
        ana += _grade(page, ANA[5:7])
        grader.kill()  # SIGKILL: no shutdown code runs
        assert len(labels_file.read_text().splitlines()) == 7
        url = grader.start()
        page = _open(browser.new_context(), url, "ana")  # a new port: a new origin
        assert page.inner_text("#progress") == "7 of 10 graded by you"
        ana += _grade(page, ANA[7:])
        page.wait_for_selector("#progress:text-is('10 of 10 graded by you')")
        bob_page = _open(browser.new_context(), url, "bob")
        by_id = dict(zip(ana, BOB, strict=True))
        bob = []
        for _ in range(10):  # bob sees the rows in the same order; his verdicts by row id
            sid = bob_page.wait_for_selector('#row[data-submitted="0"]').get_attribute("data-id")
            bob += _grade(bob_page, [by_id[sid]])
        agreement_text = page.inner_text("#agreement")  # the page's own table (ana's view)
    finally:
        grader.stop()

    # every label once, as given: 10 of ana's, 10 of bob's
    lines = [json.loads(x) for x in labels_file.read_text().splitlines()]
    assert len(lines) == 20 and len({(x["id"], x["grader"]) for x in lines}) == 20
    assert len(set(ana)) == 10 and set(bob) == set(ana)
    assert {x["id"]: x["value"] for x in lines if x["grader"] == "ana"} == dict(
        zip(ana, map(float, ANA), strict=True)
    )
    assert "ana" in agreement_text and "judge" in agreement_text

    # HUMAN feedback on the traces, read back with mlflow.search_traces
    keys = [f"q{i:02d}" for i in range(20)]
    human = human_feedback(uri, run_id, keys)
    assert len(human) == 20
    assert {(h.sample_id, h.grader): h.value for h in human} == {
        (x["id"], x["grader"]): x["value"] for x in lines
    }

    # rag-exp agreement <run id>: ana-judge: the judge says 1 everywhere, ana 1 on 6 of 10:
    # p_o = 0.6 = p_e -> kappa 0; ana-bob: p_o = 0.8, p_e = 0.6*0.8 + 0.4*0.2 = 0.56,
    # kappa = 0.24 / 0.44 = 0.545
    capsys.readouterr()
    assert main(["agreement", run_id, "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out
    print(out)
    assert re.search(r"faithfulness\s+ana\s+judge\s+10\s+0\.600\s+0\.000", out)
    assert re.search(r"faithfulness\s+bob\s+judge\s+10\s+0\.800\s+0\.000", out)
    assert re.search(r"faithfulness\s+ana\s+bob\s+10\s+0\.800\s+0\.545", out)

    # PPI from the graded run: Y = mean of the two graders per row (6 rows 1, 2 rows 0, 2 rows
    # 0.5), f = 0.5 everywhere, lambda = 1: PPI = mean_N(f) - mean_n(f - Y) = mean_n(Y) = 0.7
    run_job(
        compose_cfg(*RUN, "dataset=jsonl", f"dataset.path={data}", f"calibration.labels={run_id}")
    )
    (ppi_run,) = [r for r in client.search_runs([experiment]) if r.info.run_id != run_id]
    metrics = ppi_run.data.metrics
    assert metrics["faithfulness.ppi_n_labels"] == 10
    assert metrics["faithfulness.ppi"] == pytest.approx(0.7)
    assert metrics["faithfulness.labels_mean"] == pytest.approx(0.7)
    print(
        "PPI:",
        {k: round(v, 4) for k, v in metrics.items() if k.startswith("faithfulness.")},
    )
    print(f"HUMAN feedback via mlflow.search_traces: {len(human)}, e.g. {human[0]}")
    print(f"labels file: {len(lines)} lines, e.g. {lines[0]}")
