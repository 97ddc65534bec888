"""The Optuna sweeper without a subprocess: Hydra's sweep syntax parsed to Optuna distributions
(compared with distributions built by hand), grid values, the sampler schemas against optuna's
signatures, and a study driven through ask/tell by a deterministic in-process launcher (NaN
trials failed with their reason, the grid sampler's end, ``max_failure_rate``)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna
import pytest
import yaml
from hydra import compose
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from hydra.types import HydraContext
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from rag_experiments.errors import ConfigError
from rag_experiments.lifecycle.objective import NaNObjective, ObjectiveNaNError
from rag_experiments.lifecycle.search_space import (
    distribution_from_override,
    grid_values,
    search_space,
)
from rag_experiments.lifecycle.sweeper import OptunaSweeper, SweepFailedError, trial_values
from rag_experiments.lifecycle.sweeper_conf import SAMPLERS, OptunaSweeperConf
from rag_experiments.locations import CONF_DIR


def _parse(line: str) -> object:
    return distribution_from_override(OverridesParser.create().parse_override(line))


# --- search space ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("a=choice(0, 32, 64, 128)", CategoricalDistribution([0, 32, 64, 128])),
        ("a=0,32,64", CategoricalDistribution([0, 32, 64])),
        ("a=choice(fixed, semantic)", CategoricalDistribution(["fixed", "semantic"])),
        ("a=choice(true, 0.5)", CategoricalDistribution([True, 0.5])),
        ("a=choice([1,2], {b: 1})", CategoricalDistribution(["[1,2]", "{b:1}"])),  # as written
        # range excludes stop: 256, 384, ..., 896 (7 * 128 = 896 < 1024)
        ("a=range(256, 1024, step=128)", IntDistribution(256, 896, step=128)),
        ("a=range(256, 1152, step=128)", IntDistribution(256, 1024, step=128)),
        ("a=range(1, 10)", IntDistribution(1, 9)),
        ("a=range(10, 1, step=-3)", IntDistribution(4, 10, step=3)),  # 10, 7, 4
        ("a=range(0.1, 0.5, step=0.1)", FloatDistribution(0.1, 0.4, step=0.1)),
        ("a=interval(0.1, 1)", FloatDistribution(0.1, 1.0)),
        ("a=interval(1, 10)", FloatDistribution(1.0, 10.0)),  # Hydra parses bounds as floats
        ("a=tag(log, interval(1e-4, 1e-1))", FloatDistribution(1e-4, 0.1, log=True)),
        ("a=nDCG@10", "nDCG@10"),
        ("a='0.7*nDCG@10+0.3*faithfulness'", "'0.7*nDCG@10+0.3*faithfulness'"),
    ],
)
def test_override_to_distribution(override: str, expected: object) -> None:
    assert _parse(override) == expected


def test_a_shuffled_range_is_a_categorical_of_its_values() -> None:
    dist = _parse("a=shuffle(range(1, 4))")
    assert isinstance(dist, CategoricalDistribution) and sorted(dist.choices) == [1, 2, 3]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("a=range(5, 1)", "the range is empty"),
        ("a=glob(*)", "cannot expand glob(...); list the options with choice(...)"),
    ],
)
def test_a_sweep_optuna_cannot_sample_is_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _parse(override)


def test_search_space_splits_sweeps_from_fixed_values_and_later_wins() -> None:
    distributions, fixed = search_space(
        [
            "chunker.size=range(256, 1152, step=128)",  # params first ...
            "retriever.top_k=range(1, 11)",
            "objective=nDCG@10",
            "retriever.top_k=choice(3, 5)",  # ... then the command line replaces
            "chunker.size=512",
        ]
    )
    assert distributions == {"retriever.top_k": CategoricalDistribution([3, 5])}
    assert fixed == {"objective": "nDCG@10", "chunker.size": "512"}


def test_grid_values_enumerate_low_to_high() -> None:
    assert grid_values("a", IntDistribution(256, 1024, step=128)) == [
        256, 384, 512, 640, 768, 896, 1024,
    ]  # fmt: skip
    assert grid_values("a", FloatDistribution(0.1, 0.4, step=0.1)) == [0.1, 0.2, 0.3, 0.4]
    assert grid_values("a", CategoricalDistribution(["x", "y"])) == ["x", "y"]
    with pytest.raises(ConfigError, match="hydra.sweeper.params.lr: the grid sampler takes"):
        grid_values("lr", FloatDistribution(1e-4, 0.1, log=True))


# --- schemas -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_every_sampler_field_is_an_argument_of_its_optuna_class(name: str) -> None:
    schema = SAMPLERS[name]
    target = get_class(schema._target_)
    arguments = set(inspect.signature(target.__init__).parameters)
    fields = {f for f in OmegaConf.structured(schema) if not f.startswith("_")}
    assert fields <= arguments, f"{name}: {sorted(fields - arguments)} not in {target}"


def test_the_sweeper_keeps_the_plugins_keys() -> None:
    conf = OmegaConf.structured(OptunaSweeperConf)
    assert set(conf) == {
        "_target_", "defaults", "sampler", "direction", "storage", "study_name", "n_trials",
        "n_jobs", "max_failure_rate", "params", "custom_search_space",
    }  # fmt: skip
    assert conf.max_failure_rate == 1.0 and conf.direction == "minimize"


# --- trial values ------------------------------------------------------------------------------


def test_trial_values() -> None:
    assert trial_values(0.5, 1) == [0.5]
    assert trial_values([0.5, 2], 2) == [0.5, 2.0]
    reason = "objective faithfulness: faithfulness is NaN: 0 of 3 rows valid (parse_error: 3)"
    with pytest.raises(ObjectiveNaNError, match=r"faithfulness is NaN: 0 of 3 rows valid"):
        trial_values(NaNObjective(reason), 1)
    with pytest.raises(ObjectiveNaNError, match="objective is NaN"):
        trial_values(math.nan, 1)
    with pytest.raises(ObjectiveNaNError, match="returned None, not 1 number"):
        trial_values(None, 1)
    with pytest.raises(ObjectiveNaNError, match="returned 1 values for 2 directions"):
        trial_values([0.5], 2)


# --- a study through ask/tell ------------------------------------------------------------------


class ScoreLauncher:
    """Runs each job in process: its return value is ``score(overrides)``; a raised exception
    is a FAILED job, as Hydra's launchers report it."""

    def __init__(self, score) -> None:
        self.score = score
        self.batches: list[list[dict[str, str]]] = []

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list:
        batch = [dict(o.split("=", 1) for o in overrides) for overrides in job_overrides]
        self.batches.append(batch)
        returns = []
        for job in batch:
            ret = JobReturn(overrides=list(job), status=JobStatus.COMPLETED)
            try:
                ret.return_value = self.score(job)
            except Exception as exc:  # noqa: BLE001 - a failed job, as a launcher reports it
                ret.status, ret.return_value = JobStatus.FAILED, exc
            returns.append(ret)
        return returns


def _sweeper(tmp_path: Path, score, sampler, **settings) -> OptunaSweeper:
    defaults = {
        "direction": "maximize", "storage": optuna.storages.InMemoryStorage(), "study_name": "s",
        "n_trials": 4, "n_jobs": 2, "max_failure_rate": 1.0, "params": None,
        "custom_search_space": None,
    }  # fmt: skip
    sweeper = OptunaSweeper(sampler=sampler, **{**defaults, **settings})
    sweeper.launcher = ScoreLauncher(score)
    sweeper.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    return sweeper


def _top_k_score(job: dict[str, str]) -> float:
    """top_k 3 has no valid row (a NaN objective with its reason); otherwise top_k / 10."""
    k = int(job["retriever.top_k"])
    return NaNObjective(f"objective x: x is NaN at top_k={k}") if k == 3 else k / 10


def test_a_grid_study_fails_the_nan_trial_with_its_reason_and_keeps_the_best(
    tmp_path: Path,
) -> None:
    grid = functools.partial(optuna.samplers.GridSampler, seed=0)  # Hydra's `_partial_: true`
    sweeper = _sweeper(
        tmp_path, _top_k_score, grid, n_trials=10,
        params={"retriever.top_k": "choice(1, 3, 5)", "objective": "x"},
    )  # fmt: skip
    sweeper.sweep([])
    study = optuna.load_study(study_name="s", storage=sweeper.storage)
    trials = {t.params["retriever.top_k"]: t for t in study.trials}
    assert sorted(trials) == [1, 3, 5] and len(study.trials) == 3  # capped at the grid's size
    assert trials[3].state == TrialState.FAIL
    assert trials[3].user_attrs["error"] == "objective x: x is NaN at top_k=3"
    assert trials[5].state == TrialState.COMPLETE and trials[5].value == 0.5
    assert all(t.user_attrs["objective"] == "x" for t in study.trials)  # fixed values kept
    assert sweeper.reasons == {"objective x: x is NaN at top_k=3": 1}
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert best == {"name": "optuna", "best_params": {"retriever.top_k": 5}, "best_value": 0.5}


def test_a_study_of_only_failed_trials_says_why(tmp_path: Path) -> None:
    sampler = optuna.samplers.RandomSampler(seed=0)
    sweeper = _sweeper(tmp_path, _top_k_score, sampler, params={"retriever.top_k": "choice(3)"})
    with pytest.raises(Exception) as info:
        sweeper.sweep([])
    error = info.value.error  # ReportedError: printed as one line
    assert isinstance(error, SweepFailedError)
    assert str(error) == (
        "no trial of the Optuna study completed, so there is no best value: objective x: x "
        "is NaN at top_k=3 (x4). Fix that and sweep again"
    )
    assert not (tmp_path / "sweep" / "optimization_results.yaml").exists()


def test_a_batch_above_max_failure_rate_stops_with_the_jobs_error(tmp_path: Path) -> None:
    def score(job: dict[str, str]) -> float:
        if job["retriever.top_k"] == "0":
            raise ValueError("retriever.top_k must be >= 1, got 0")
        return 1.0

    sampler = optuna.samplers.RandomSampler(seed=0)
    sweeper = _sweeper(
        tmp_path, score, sampler, n_jobs=1, max_failure_rate=0.0,
        params={"retriever.top_k": "choice(0)"},
    )  # fmt: skip
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        sweeper.sweep([])
    assert len(sweeper.launcher.batches) == 1  # stopped after the first batch


def test_the_command_line_overrides_params_and_batches_are_n_jobs(tmp_path: Path) -> None:
    sampler = optuna.samplers.TPESampler(seed=0)
    sweeper = _sweeper(
        tmp_path, _top_k_score, sampler, n_trials=5, n_jobs=2,
        params={"retriever.top_k": "range(1, 11)"},
    )  # fmt: skip
    sweeper.sweep(["retriever.top_k=choice(4, 6)"])
    sizes = [len(b) for b in sweeper.launcher.batches]
    assert sizes == [2, 2, 1]
    seen = {job["retriever.top_k"] for batch in sweeper.launcher.batches for job in batch}
    assert seen <= {"4", "6"}


def test_a_failed_last_grid_point_ends_the_study_with_one_line(tmp_path: Path) -> None:
    # GridSampler.after_trial calls Study.stop when the grid is done, which Optuna refuses
    # outside Study.optimize; the trial is stored all the same and the study ends
    grid = functools.partial(optuna.samplers.GridSampler, seed=0)
    sweeper = _sweeper(tmp_path, _top_k_score, grid, params={"retriever.top_k": "choice(3)"})
    with pytest.raises(Exception) as info:
        sweeper.sweep([])
    assert isinstance(info.value.error, SweepFailedError)
    assert "x is NaN at top_k=3 (x1)" in str(info.value.error)
    (trial,) = optuna.load_study(study_name="s", storage=sweeper.storage).trials
    assert trial.state == TrialState.FAIL and sweeper.grid_done


# --- composed from conf/ -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["optuna", "rag_optuna"])
def test_hydra_sweeper_optuna_is_an_alias_of_ours(
    compose_cfg: Callable[..., DictConfig], name: str
) -> None:
    overrides = [f"hydra/sweeper={name}", "hydra/sweeper/sampler=grid", "hydra.sweeper.n_jobs=1"]
    cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    sweeper = instantiate(cfg.hydra.sweeper)
    assert cfg.hydra.sweeper._target_.endswith("RagOptunaSweeper")
    assert isinstance(sweeper.sweeper, OptunaSweeper)
    assert sweeper.sweeper.sampler.func is optuna.samplers.GridSampler  # `_partial_: true`
    assert sweeper.sweeper.max_failure_rate == 1.0 and sweeper.sweeper.directions == ["minimize"]
    cfg = compose("config", overrides=[f"hydra/sweeper={name}"], return_hydra_config=True)
    assert isinstance(instantiate(cfg.hydra.sweeper.sampler), optuna.samplers.TPESampler)


def test_a_misspelled_sweeper_key_fails_at_compose(compose_cfg: Callable[..., DictConfig]) -> None:
    with pytest.raises(ConfigCompositionException, match="n_trial"):
        compose(
            config_name="config",
            overrides=["hydra/sweeper=optuna", "hydra.sweeper.n_trial=3"],
            return_hydra_config=True,
        )


@pytest.mark.slow  # composes a trial's config
def test_a_misspelled_swept_key_fails_before_any_job(
    compose_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    overrides = ["hydra/sweeper=optuna", f"hydra.sweep.dir={tmp_path}/sweep"]
    config = compose("config", overrides=overrides, return_hydra_config=True)
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
    sampler = optuna.samplers.RandomSampler(seed=0)
    sweeper = _sweeper(tmp_path, _top_k_score, sampler, params={"retriver.top_k": "choice(3)"})
    sweeper.hydra_context = HydraContext(config_loader=loader, callbacks=Callbacks())
    sweeper.config = config
    with pytest.raises(ConfigCompositionException, match="retriver.top_k"):
        sweeper.sweep([])
    assert sweeper.launcher.batches == []  # no job ran
