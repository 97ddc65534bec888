"""The gate on real fake-model runs (``target=recorded``, fake judge, sqlite store): a candidate
that answers "I don't know." to 8 of the 60 answerable questions fails with the rule named
(exit 1), a ``rag-exp rerun`` of the baseline passes (exit 0), a run over another dataset
is undecided (exit 2); ``gate=default`` gates a run at its end and sets the exit code; the CI
files of the docs (docs/ci/*.yml) run as written; and the gate against an MLflow server."""

from __future__ import annotations

import os
import shlex
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import mlflow
import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from rag_experiments.cli import main
from rag_experiments.job import run_job
from rag_experiments.locations import PROJECT_ROOT
from tests.analysis.test_gate import BASE, UP, _log_run
from tests.gate_data import FAKE_RUN, answerable_ids, write_answers
from tests.mlflow_server import mlflow_server  # noqa: F401  (module-scoped fixture)

WRONG = answerable_ids()[:8]  # the candidate refuses these: false_refusal_rate 0 -> 8/60
CI_DIR = PROJECT_ROOT / "docs" / "ci"
RULES = """n_resamples: 999
rules:
  false_refusal_rate: {max_drop: 0.05}
  faithfulness: {max_drop: 0.05}
"""


def _run_id(uri: str, name: str) -> str:
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    (run,) = client.search_runs([exp], f"tags.`mlflow.runName` = '{name}'")
    return run.info.run_id


@pytest.mark.slow
def test_gate_on_fake_model_runs(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    base = write_answers(tmp_path / "base.jsonl")
    cand = write_answers(tmp_path / "cand.jsonl", refuse=WRONG)
    other = write_answers(tmp_path / "other.jsonl", drop=answerable_ids()[-5:])
    for name, path in (("base", base), ("cand", cand), ("other", other)):
        run_job(compose_cfg(*FAKE_RUN, f"dataset.path={path}", f"run_name={name}"))
    ids = {n: _run_id(uri, n) for n in ("base", "cand", "other")}
    assert main(["rerun", ids["base"], "--tracking-uri", uri]) == 0
    client = mlflow.MlflowClient(uri)
    (rerun,) = client.search_runs(
        [client.get_run(ids["base"]).info.experiment_id], f"tags.rerun_of = '{ids['base']}'"
    )
    rules = tmp_path / "gate.yaml"
    rules.write_text(RULES)
    junit = tmp_path / "junit.xml"
    gate = ["--baseline", ids["base"], "--config", str(rules), "--tracking-uri", uri]
    capsys.readouterr()

    assert main(["gate", ids["cand"], *gate, "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    assert "FAIL      false_refusal_rate max_drop 0.05 [all]" in out
    assert "candidate 0.1333 vs baseline 0.0000" in out  # 8/60, computed by hand
    suite = ET.parse(junit).getroot().find("testsuite")
    failed = [c.get("name") for c in suite.findall("testcase") if c.find("failure") is not None]
    assert failed == ["false_refusal_rate max_drop 0.05 [all]"]

    assert main(["gate", rerun.info.run_id, *gate]) == 0
    assert "gate PASS" in capsys.readouterr().out
    assert main(["gate", ids["other"], *gate]) == 2
    assert "different questions" in capsys.readouterr().out
    assert client.get_run(ids["other"]).data.tags["gate.result"] == "undecided"

    # gate= at the end of `rag-exp run`: the alias resolves, the exit code is the gate's
    assert main(["promote", ids["base"], "--alias", "production", "--tracking-uri", uri]) == 0
    summary = tmp_path / "summary.md"
    GlobalHydra.instance().clear()  # `rag-exp run` composes through @hydra.main itself
    code = main([
        "run", *FAKE_RUN, f"dataset.path={cand}", "run_name=gated", f"tracking.uri={uri}",
        f"paths.cache_dir={tmp_path}/cache", "progress=false", "gate=default",
        "gate.baseline=production", f"gate.markdown={summary}", "gate.n_resamples=999",
    ])  # fmt: skip
    assert code == 1
    gated = client.get_run(_run_id(uri, "gated"))
    assert gated.info.status == "FINISHED"  # the run is logged; only the exit code fails
    assert gated.data.tags["gate.result"] == "fail"
    assert gated.data.tags["gate.baseline"] == ids["base"]
    assert "false_refusal_rate max_drop 0.05 [all]" in gated.data.tags["gate.failed"]
    assert "| ❌ fail | `false_refusal_rate` |" in summary.read_text()


def _ci_commands(path: Path) -> list[str]:
    """The ``rag-exp`` lines of a CI file: GitHub's ``run:`` steps or GitLab's ``script:``."""
    data = yaml.safe_load(path.read_text())
    lines: list[str] = []
    for job in data.get("jobs", {}).values():  # GitHub Actions
        for step in job["steps"]:
            lines += str(step.get("run", "")).splitlines()
    for job in data.values():  # GitLab CI
        if isinstance(job, dict) and "script" in job:
            lines += list(job["script"])
    return [line.strip() for line in lines if line.strip().startswith("rag-exp ")]


@pytest.mark.slow
@pytest.mark.parametrize("ci_file", ["github-gate.yml", "gitlab-gate.yml"])
def test_ci_files_of_the_docs_run_as_written(
    ci_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = _ci_commands(CI_DIR / ci_file)
    assert [c.split()[1] for c in commands] == ["run", "promote", "run", "gate"]
    monkeypatch.chdir(tmp_path)  # the CI job's workspace: the store, eval/, the reports
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "step-summary.md"))
    (tmp_path / "eval").mkdir()
    shutil.copy(CI_DIR / "gate.yaml", tmp_path / "eval" / "gate.yaml")
    write_answers(tmp_path / "baseline-answers.jsonl")
    # a PR that got worse: 16 of 60 answerable questions refused (false_refusal_rate 0 -> 0.267);
    # the docs' gate.yaml gates 4 metrics (Holm × 4), where 8 refusals (0.133) are not shown
    # to exceed the margin 0.05 (non-inferiority p ≈ 0.035 before Holm)
    write_answers(tmp_path / "eval" / "answers.jsonl", refuse=answerable_ids()[:16])
    codes = []
    for command in commands:
        argv = [os.path.expandvars(a) for a in shlex.split(command)[1:]]
        if argv[0] == "run":  # the caches of this test, not the user's
            argv += [f"paths.cache_dir={tmp_path}/cache", "progress=false"]
        codes.append(main(argv))
    assert codes == [0, 0, 0, 1]
    suite = ET.parse(tmp_path / "gate-junit.xml").getroot().find("testsuite")
    assert suite.get("failures") == "1"
    summary = next(p for p in tmp_path.glob("*summary.md"))
    assert "false_refusal_rate" in summary.read_text()


@pytest.mark.slow
def test_gate_against_an_mlflow_server(
    mlflow_server: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = _log_run(mlflow_server, {"hi": BASE, "lo": BASE})
    cand = _log_run(mlflow_server, {"hi": UP, "lo": UP})
    rules = tmp_path / "gate.yaml"
    rules.write_text("n_resamples: 999\nrules: {hi: {max_drop: 0.05}, lo: {max_drop: 0.05}}\n")
    uri = ["--tracking-uri", mlflow_server]
    assert main(["promote", base, "--alias", "production", *uri]) == 0
    assert main(["gate", cand, "--baseline", "production", "--config", str(rules), *uri]) == 1
    out = capsys.readouterr().out
    assert "PASS      hi max_drop" in out and "FAIL      lo max_drop 0.05 [all]" in out
    client = mlflow.MlflowClient(mlflow_server)
    assert client.get_run(cand).data.tags["gate.result"] == "fail"
    assert client.get_run(cand).data.tags["gate.baseline"] == base
    logged = {a.path for a in client.list_artifacts(cand, "gate")}
    assert logged == {"gate/junit.xml", "gate/summary.md", "gate/gate.json"}


@pytest.mark.slow  # Hydra in process
def test_a_sweep_with_a_gate_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line, exit 2, the fix; no sweep folder, no store, no parent run (the cases that
    count as a gate: tests/analysis/test_gate.py)."""
    GlobalHydra.instance().clear()
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    argv = ["run", "-m", *FAKE_RUN, "gate=default", "gate.baseline=production"]
    argv += ["retriever.top_k=1,2", f"tracking.uri={uri}", f"hydra.sweep.dir={tmp_path}/sweep"]
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("rag-exp run: error: gate= gates one run")
    assert "`rag-exp gate <run id> --baseline …`" in line
    assert list(tmp_path.iterdir()) == []  # no sweep folder, no store


@pytest.mark.slow  # two retrieval runs over the bundled sample (~20 s)
def test_the_readme_tour_gates_retrieval_runs_with_the_retrieval_preset(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README step 3 on runs like those of `make sweep` (metrics=retrieval, no judge): the
    default rules are undecided (they gate judged metrics), `--config retrieval` decides."""
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    tour = ("metrics=retrieval", "llm=fake", "judge=fake", "embedder=hash", "chunker=fixed")
    for name, size in (("a", 256), ("b", 512)):
        run_job(compose_cfg(*tour, f"chunker.size={size}", f"run_name={name}"))
    a, b = _run_id(uri, "a"), _run_id(uri, "b")
    store = ["--tracking-uri", uri]
    assert main(["compare", a, b, *store]) == 0
    assert main(["promote", a, "--alias", "production", *store]) == 0
    capsys.readouterr()
    assert main(["gate", b, "--config", "retrieval", "--baseline", "production", *store]) in (0, 1)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[:2]] == ["nDCG@10", "Hit@5"]
    assert not any(line.startswith("UNDECIDED") for line in lines)
    assert main(["gate", b, "--baseline", "production", "--no-log", *store]) == 2
    out = capsys.readouterr().out
    (faith,) = [x for x in out.splitlines() if x.startswith("UNDECIDED faithfulness")]
    assert "is missing from the candidate run; it has " in faith and " more)" in faith
    assert len(faith.split("it has ")[1].split(", ")) == 9  # 8 names and "… (N more)"
