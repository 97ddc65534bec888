"""MLflow's artifact-download progress bars are off inside
:func:`~rag_experiments.tracking.store.quiet_downloads` (the end-of-run gate reading its
baseline printed one tqdm bar per table), on again after it, and a user's own setting wins."""

from __future__ import annotations

import os
from pathlib import Path

import mlflow
import pytest

from rag_experiments.tracking.store import quiet_downloads

VAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@pytest.mark.slow  # an MLflow sqlite store (migrations)
def test_quiet_downloads_hides_the_bar_and_restores_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(VAR, raising=False)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = client.create_experiment("e", artifact_location=(tmp_path / "art").as_uri())
    run = client.create_run(exp)
    (tmp_path / "table.csv").write_text("id,value\nq1,1.0\n")
    client.log_artifact(run.info.run_id, str(tmp_path / "table.csv"))
    capfd.readouterr()

    def download(dst: str) -> str:
        client.download_artifacts(run.info.run_id, "table.csv", str(tmp_path / dst))
        return capfd.readouterr().err

    assert "Downloading artifacts" in download("a")  # MLflow's default: a bar
    with quiet_downloads():
        assert os.environ[VAR] == "false"
        assert "Downloading artifacts" not in download("b")
    assert VAR not in os.environ
    monkeypatch.setenv(VAR, "true")  # the user's choice is kept
    with quiet_downloads():
        assert os.environ[VAR] == "true"
        assert "Downloading artifacts" in download("c")
