"""``rag-exp align`` from the command line: its input errors, and (slow) the whole flow on a
logged run of the bundled sample — labels file + run → a gain with a CI above 0 on the
example-copying fake judge, "no evidence of improvement" on the constant one, and an example
set that loads as ``metrics.suite.faithfulness.examples``.

The labels (by construction, a pattern examples can fix): every answer whose first retrieved
document is one of five of the twelve policies is unfaithful (0), the others faithful (1); rows
answered from a distractor document (one quoting several policies) are left unlabeled.
With ``llm=fake`` an answer is the first sentence of its first passage, so answers drawn from
the same policy share their words and the example-copying judge grades them alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rag_experiments.commands.align import align_command
from rag_experiments.errors import ConfigError

UNFAITHFUL_DOCS = {
    "it-access-policy",
    "physical-security",
    "incident-response",
    "change-management",
    "data-retention",
}


DISTRACTORS = {
    "committee-minutes",
    "field-station-notices",
    "it-access-policy-2019",
    "staff-newsletter",
}
"""The sample's distractor documents (they quote several policies): rows answered from one are
left unlabeled, so the labels follow the policies alone."""


def test_a_labels_file_needs_the_run_whose_answers_were_labeled(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "s001", "metric": "faithfulness", "value": 1}\n', encoding="utf-8")
    store = tmp_path / "mlruns.db"
    store.touch()
    with pytest.raises(ConfigError, match=r"give the run whose answers were labeled with --run"):
        align_command(
            [str(labels), "--metric", "faithfulness", "--tracking-uri", f"sqlite:///{store}"]
        )
    with pytest.raises(ConfigError, match=r"unknown argument --frobnicate"):
        align_command([str(labels), "--metric", "faithfulness", "--frobnicate"])


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rag_experiments", *args], cwd=cwd, capture_output=True, text=True
    )


@pytest.mark.slow
def test_align_on_a_logged_run_gains_with_a_judge_that_reads_examples(tmp_path: Path) -> None:
    import mlflow

    from rag_experiments.tracking.store import RunStore

    fake = ["llm=fake", "judge=fake", "embedder=hash"]
    out = _cli(tmp_path, "run", *fake, "progress=false", "run_name=base")
    assert out.returncode == 0, out.stderr[-2000:]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns.db")
    (run,) = client.search_runs(["1"], "tags.`mlflow.runName` = 'base'")
    rows = RunStore(f"sqlite:///{tmp_path}/mlruns.db").read_rows(run.info.run_id)
    with (tmp_path / "labels.jsonl").open("w", encoding="utf-8") as f:
        for r in rows:
            first = (r.retrieved_doc_ids or ["-"])[0]
            if first in DISTRACTORS:
                continue
            value = 0.0 if first in UNFAITHFUL_DOCS else 1.0
            f.write(json.dumps({"id": r.id, "metric": "faithfulness", "value": value}) + "\n")
    common = ["align", "labels.jsonl", "--run", run.info.run_id, "--metric", "faithfulness"]
    copying = "judge._target_=rag_experiments.fakes.example_judge.ExampleCopyingChat"
    out = _cli(tmp_path, *common, "--k", "8", "--json", "--out", "ex.yaml", *fake, copying)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    assert result["before"]["kappa"] == 0.0 and result["before"]["balanced_accuracy"] == 0.5
    assert result["gain"]["kappa"]["ci"][0] > 0 and result["verdict"] == "improvement"
    written = yaml.safe_load((tmp_path / "ex.yaml").read_text(encoding="utf-8"))
    assert written["metric"] == "faithfulness" and len(written["examples"]) == 8
    assert written["version"] == result["examples_version"]

    out = _cli(tmp_path, *common, "--k", "8", *fake)  # the constant fake judge
    assert out.returncode == 0, out.stderr[-2000:]
    assert "no evidence of improvement: the 95% CI of the kappa gain includes 0" in out.stdout

    # the example set loads into the metric's prompt and changes the copying judge's values
    out = _cli(
        tmp_path, "run", *fake, copying, "progress=false",
        "metrics.suite.faithfulness.examples=ex.yaml", "run_name=aligned",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (aligned,) = client.search_runs(["1"], "tags.`mlflow.runName` = 'aligned'")
    assert aligned.data.metrics["faithfulness"] != pytest.approx(0.5)
