"""Shared fixtures: Hydra composition against the real conf/ tree, with every output path
pointed at ``tmp_path``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

import rag_experiments  # noqa: F401  (sets the offline environment first)
from rag_experiments.config import register
from rag_experiments.locations import CONF_DIR, PROJECT_ROOT

register()  # the schemas and resolvers every composition in the tests needs

SHARED_REAL = PROJECT_ROOT.parent / "shared" / "real"


@pytest.fixture(autouse=True)
def _no_active_mlflow_experiment(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow keeps an active experiment per process, and ``mlflow.set_experiment`` also sets
    ``MLFLOW_EXPERIMENT_ID``, which child processes inherit: every test starts without one
    and leaves none behind (a leaked one makes a later resume refuse the run and a later
    ``mlflow run`` refuse ``--experiment-name``)."""
    import mlflow.tracking.fluent as fluent

    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    monkeypatch.setattr(fluent, "_active_experiment_id", None)


@pytest.fixture(autouse=True)
def _no_leftover_rubric_metrics() -> Iterator[None]:
    """A YAML rubric a test builds or composes registers a metric class made for it
    (:func:`rag_experiments.metrics.rubric.rubric_class`): the ones a test made are dropped
    from the registry afterwards, so no other test finds them in the derived lists (scorers,
    probes, key metrics)."""
    from rag_experiments import protocols

    before = set(protocols._METRIC_CLASSES)
    yield
    made = [
        c
        for c in protocols._METRIC_CLASSES
        if c not in before
        and c.__module__ == "rag_experiments.metrics.rubric"
        and c.__name__.startswith("Rubric[")
    ]
    if made:
        from rag_experiments.metrics import rubric

        protocols._METRIC_CLASSES[:] = [c for c in protocols._METRIC_CLASSES if c not in made]
        rubric._CLASSES = {k: v for k, v in rubric._CLASSES.items() if v not in made}


@pytest.fixture
def compose_cfg(tmp_path: Path) -> Iterator[Callable[..., DictConfig]]:
    """Return ``compose(*overrides)`` over conf/, with caches and MLflow under ``tmp_path``."""

    def _compose(*overrides: str) -> DictConfig:
        base = [
            f"paths.cache_dir={tmp_path}/cache",
            f"tracking.uri=sqlite:///{tmp_path}/mlruns.db",
            "progress=false",
        ]
        return compose(config_name="config", overrides=[*base, *overrides])

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield _compose
    GlobalHydra.instance().clear()


@pytest.fixture
def shared_real() -> Path:
    """``../shared/real`` beside the repo; the test is skipped when it is absent."""
    if not SHARED_REAL.is_dir():
        pytest.skip(f"{SHARED_REAL} not present")
    return SHARED_REAL


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's real OpenAI-compatible server serving the bundled SmolLM2 GGUF on
    127.0.0.1 (one per test session, started on first use); yields its ``/v1`` URL."""
    from rag_experiments.fakes.llama_cpp_server import LlamaCppServer

    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with LlamaCppServer(log, n_ctx=LLAMA_SERVER_N_CTX) as server:
        yield server.url


LLAMA_SERVER_N_CTX = 1024
"""Context window of the session's ``llama_server`` (tokens)."""


# Guard for the fast loop (`make test` = `pytest -m "not slow"`): a test not marked slow whose
# setup + call + teardown took longer than this is listed at the end of the run, so it gets
# `@pytest.mark.slow` before it makes the fast loop slow.
UNMARKED_SLOW_LIMIT_S = 10.0
_unmarked_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each phase's duration (seconds) of tests that carry no ``slow`` marker."""
    if "slow" not in report.keywords:
        _unmarked_durations[report.nodeid] = (
            _unmarked_durations.get(report.nodeid, 0.0) + report.duration
        )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the tests not marked slow that took longer than ``UNMARKED_SLOW_LIMIT_S``."""
    over = sorted(
        ((s, n) for n, s in _unmarked_durations.items() if s > UNMARKED_SLOW_LIMIT_S),
        reverse=True,
    )
    if not over:
        return
    terminalreporter.write_sep(
        "=", f"tests over {UNMARKED_SLOW_LIMIT_S:.0f} s not marked slow", yellow=True
    )
    for seconds, nodeid in over:
        terminalreporter.write_line(f"{seconds:7.1f} s  {nodeid}")
    terminalreporter.write_line("mark them @pytest.mark.slow to keep `make test` fast")
