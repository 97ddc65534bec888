"""Hydra entry point of ``rag-exp run``: compose the config and hand it to the engine
(:func:`rag_experiments.job.run_job`), which builds the parts with the composition root
(:mod:`rag_experiments.build`), checks them and runs them.

Only this module and the sweepers' launch go through Hydra; the engine and the runner never
import it."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig, OmegaConf

from rag_experiments.config import register
from rag_experiments.config.paths import root_paths
from rag_experiments.config.reporting import reported
from rag_experiments.errors import ConfigError, TrackingUnavailableError, UsageError
from rag_experiments.job import GATE_IN_SWEEP, run_job
from rag_experiments.locations import CONF_DIR

register()  # schemas and resolvers, before @hydra.main composes


def _resumable(exc: TrackingUnavailableError) -> TrackingUnavailableError:
    """The outage error reworded with this job's folder and exact resume command."""
    from hydra.core.hydra_config import HydraConfig

    from rag_experiments.tracking.resilience import resumable_message, resume_command

    job_dir, overrides = None, []
    if HydraConfig.initialized():
        job_dir = HydraConfig.get().runtime.output_dir
        overrides = list(HydraConfig.get().overrides.task)
    command = resume_command(exc.run_id or "", overrides)
    message = resumable_message(exc, job_dir, command)
    return TrackingUnavailableError(message, exc.what, exc.run_id)


def refuse_gated_sweep(args: list[str]) -> None:
    """Refuse ``rag-exp run -m … gate=…`` before Hydra starts the sweep, so no folder, parent
    run or job is made: each job's gate would set the one exit code of the sweep. A gate on
    the command line counts when it is set (``gate=default``, ``+gate=…``) or swept
    (``gate=null,default``, ``gate.baseline=a,b``); ``gate=null`` and ``~gate`` do not.
    (Hydra's callbacks cannot refuse it: Hydra turns their errors into warnings.)

    Args:
        args: The arguments of ``rag-exp run``.

    Raises:
        UsageError: A multirun with a gate (:data:`~rag_experiments.job.GATE_IN_SWEEP`,
            exit code 2).
    """
    if not ({"-m", "--multirun"} & set(args) or "hydra.mode=MULTIRUN" in args):
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    texts = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(texts)
    except HydraException:  # Hydra reports it, with its own message
        return
    for o in overrides:
        if o.key_or_group.split(".")[0] != "gate" or o.is_delete():
            continue
        if o.is_sweep_override() or o.value() is not None:
            raise UsageError(GATE_IN_SWEEP)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def hydra_main(cfg: DictConfig) -> float | None:
    """``rag-exp run [overrides…]``. Our own errors leave as one line, exit code 1
    (:mod:`rag_experiments.config.reporting`)."""
    from hydra.core.hydra_config import HydraConfig

    with reported():
        if OmegaConf.is_missing(cfg, "dataset") or not cfg.dataset:
            raise ConfigError("no dataset selected: pass dataset=<name>")
        # one store, caches and datasets whatever hydra.job.chdir says: paths are the ones
        # of the folder the command was started in
        root_paths(cfg, HydraConfig.get().runtime.cwd)
        try:
            return run_job(cfg)
        except TrackingUnavailableError as exc:  # one line: what failed and how to resume
            raise _resumable(exc) from exc
