"""A ``-m`` sweep whose job names a key its part does not have is refused before any run
exists: every job is composed first (issue 42: the parent and the first children were made,
then the run of the job that could not compose ended FAILED)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rag_experiments.cli import main
from rag_experiments.errors import ConfigError
from rag_experiments.lifecycle.sweep_callback import check_sweep_keys


def _sweep_config(*task: str) -> OmegaConf:
    return OmegaConf.create(
        {
            "hydra": {
                "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"},
                "overrides": {"task": list(task)},
                "job": {"config_name": "config"},
                "runtime": {"config_sources": []},
            }
        }
    )


def test_each_job_of_the_sweep_is_composed_before_it_starts() -> None:
    check_sweep_keys(_sweep_config("retriever=bm25,hybrid", "retriever.top_k=3,5"))  # fine
    with pytest.raises(ConfigError) as info:  # k1 is BM25's: the dense job has no such key
        check_sweep_keys(_sweep_config("retriever=bm25,dense", "retriever.k1=1.2"))
    message = str(info.value)
    assert message.startswith(
        "sweep job retriever=dense: retriever.k1 is not a config key "
        "(RetrieverConf has no 'k1'): no key of it is close. Its keys: _target_, top_k, depth."
    )
    assert message.endswith("Nothing was launched: fix the override and run the sweep again")


@pytest.mark.slow  # composes a sweep through the CLI (~15 s)
def test_the_cli_refuses_it_and_no_run_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path}/mlruns.db"
    # the default chunker (semantic) has size, so the sweep composes; chunker=none has not:
    # its job used to fail after the parent and the semantic job's run existed
    argv = ["run", "-m", "chunker=semantic,none", "chunker.size=256", "embedder=hash"]
    assert main([*argv, "llm=fake", "metrics=retrieval", f"tracking.uri={store}"]) == 1
    err = capsys.readouterr().err
    assert "rag-exp run: error: sweep job chunker=none: chunker.size is not a config key" in err
    assert "no key of it is close. Its keys: _target_. Nothing was launched" in err
    assert not (tmp_path / "mlruns.db").exists()  # no store, so no parent and no child
    assert not (tmp_path / "multirun").exists()
