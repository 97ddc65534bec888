"""Hydra launchers beyond one process: Ray (local instance or a cluster) and submitit (local
processes or SLURM), with the check that jobs on other nodes can reach what they share.

``hydra/launcher=`` picks one (configs in ``conf/hydra/launcher/``; the plugin classes that
Hydra instantiates are in ``hydra_plugins/rag_experiments_launchers``):

=================  =====================================  ===========  =====================
option             runs each job                          extra        other nodes?
=================  =====================================  ===========  =====================
``joblib``         in a local process (loky)              (default)    no
``submitit_local`` in a local process (submitit; the       ``[slurm]``  no
                   plugin's own option)
``slurm``          as a SLURM array task (submitit)       ``[slurm]``  yes
``ray_local``      as a Ray task on a Ray instance that   ``[ray]``    no
                   the launcher starts on 127.0.0.1 and
                   stops at the end
``ray_cluster``    as a Ray task on the cluster at        ``[ray]``    yes
                   ``hydra.launcher.address``
=================  =====================================  ===========  =====================

**Why our own Ray launcher.** ``hydra-ray-launcher`` 1.2.2 (the newest) requires
``cloudpickle<3`` while ``joblib`` 1.6 (pulled by ``hydra-joblib-launcher``, which we use)
requires ``cloudpickle>=3``: the two cannot be installed together, and an older joblib would
change a pinned package. :class:`RayLauncher` does what that plugin's local mode does, on
Ray's public API only: ``ray.init(address=…)``, one ``ray.remote`` task per job running
Hydra's ``run_job`` (as the joblib and submitit launchers do), ``ray.get``, ``ray.shutdown``.

**Parent run.** Every job is a child of the sweep's parent MLflow run whatever the launcher:
the parent id travels in ``<sweep dir>/mlflow_parent_run_id``
(:mod:`rag_experiments.tracking.sweep`), which submitit's workers read from the shared sweep
directory (submitit keeps its pickles there, so it is shared by necessity) and which the Ray
task writes on its node before the job starts (a Ray node need not share the sweep dir).

**Multi-node check** (:func:`check_multi_node`, run before any job is submitted): a job on
another node cannot write to this machine's sqlite file nor reach a server on 127.0.0.1, and
a relative cache path names a folder of whichever node the job lands on, so each node would
build its own vector index and LLM cache. ``ray_cluster`` and ``slurm`` refuse such configs
with the fix instead.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf, open_dict

from rag_experiments.config.reporting import reported
from rag_experiments.errors import ConfigError

log = logging.getLogger(__name__)

SHARED_PATH_KEYS = ("cache_dir", "chroma_dir", "embedding_cache", "llm_cache")
"""``paths.*`` keys that every node must see as the same folder or file."""

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def check_multi_node(cfg: DictConfig, launcher: str) -> None:
    """Refuse a config whose jobs, on other nodes, would write to node-local places.

    Args:
        cfg: A job's composed config (``tracking.uri`` and ``paths.*`` are read).
        launcher: The ``hydra/launcher`` option, named in the message.

    Raises:
        ConfigError: ``tracking.uri`` is not an ``http(s)://`` server, or names a loopback
            host (127.0.0.1, localhost); or a ``paths.*`` entry of :data:`SHARED_PATH_KEYS`
            is relative. The message gives the fix.
    """
    uri = str(OmegaConf.select(cfg, "tracking.uri") or "")
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https"):
        raise ConfigError(
            f"hydra/launcher={launcher} runs jobs on other nodes, which cannot write to the "
            f"node-local tracking store tracking.uri={uri}: use tracking=server with an MLflow "
            "server every node reaches (tracking.uri=http://<server host>:5000)"
        )
    if _is_loopback(parsed.hostname or ""):
        raise ConfigError(
            f"hydra/launcher={launcher} runs jobs on other nodes, where tracking.uri={uri} "
            "names the node itself: give the MLflow server's host name or address "
            "(tracking.uri=http://<server host>:5000)"
        )
    relative = [
        f"paths.{key}={value}"
        for key in SHARED_PATH_KEYS
        if (value := OmegaConf.select(cfg, f"paths.{key}")) and not Path(str(value)).is_absolute()
    ]
    if relative:
        raise ConfigError(
            f"hydra/launcher={launcher} runs jobs on other nodes, where the relative "
            f"{', '.join(relative)} would name each node's own folder (a vector index and LLM "
            "cache per node): set paths.cache_dir=<absolute folder on a filesystem every node "
            "mounts> (the other paths follow it)"
        )


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _touches(overrides: Sequence[str], prefixes: tuple[str, ...]) -> bool:
    return any(o.lstrip("+~").startswith(prefixes) for o in overrides)


def check_sweep(launcher: str, config: DictConfig) -> None:
    """:func:`check_multi_node` on the sweep's config, from a launcher's ``setup`` (before any
    job config is composed or submitted; the sweep's parent run, opened by the callback before
    Hydra sets up the launcher, ends FAILED without children).

    Raises:
        ReportedError: The config fails the check (printed as one line).
    """
    with reported():
        check_multi_node(config, launcher)


def check_jobs(
    launcher: str,
    hydra_context: HydraContext,
    config: DictConfig,
    job_overrides: Sequence[Sequence[str]],
) -> None:
    """:func:`check_multi_node` on every job that sweeps ``tracking`` or ``paths`` (a job
    override of those not among the sweep's own overrides); the others share the sweep's
    values, checked by :func:`check_sweep`.

    Raises:
        ReportedError: A job's config fails the check (printed as one line).
    """
    shared = set(OmegaConf.to_container(config.hydra.overrides.task))  # type: ignore[arg-type]
    with reported():
        for overrides in job_overrides:
            if _touches([o for o in overrides if o not in shared], ("tracking", "paths")):
                job_cfg = hydra_context.config_loader.load_sweep_config(config, list(overrides))
                check_multi_node(job_cfg, launcher)


class RayLauncher(Launcher):
    """Run each job of a sweep as a Ray task (``hydra/launcher=ray_local|ray_cluster``).

    Args:
        address: ``local`` starts a new Ray instance on this machine for the sweep and stops
            it at the end; anything else is passed to ``ray.init(address=…)`` to join a
            running cluster (``auto``, ``<head>:6379``, ``ray://<head>:10001``), which is left
            running (the driver only disconnects).
        multi_node: Jobs may run on other nodes: run :func:`check_multi_node` first.
        init: More ``ray.init`` keyword arguments (``num_cpus``, ``_node_ip_address`` …).
        remote: ``ray.remote`` options of each job's task (``num_cpus``, ``num_gpus``,
            ``memory``, ``max_retries`` …): Ray runs as many jobs at once as the resources
            allow.
    """

    def __init__(
        self,
        address: str = "local",
        multi_node: bool = False,
        init: dict[str, Any] | None = None,
        remote: dict[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.multi_node = multi_node
        self.init = _plain(init)
        self.remote = _plain(remote)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Keep what :meth:`launch` needs (Hydra's launcher contract); with ``multi_node``,
        :func:`check_sweep` first.

        Raises:
            ReportedError: The multi-node check failed.
        """
        if self.multi_node:
            check_sweep("ray_cluster", config)
        self.config = config
        self.task_function = task_function
        self.hydra_context = hydra_context

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Run the jobs as Ray tasks and wait for all of them.

        Args:
            job_overrides: One list of overrides per job.
            initial_job_idx: Number of the first job (``hydra.job.num``).

        Returns:
            One :class:`JobReturn` per job, in order (a failed job's return holds its error,
            which the sweeper re-raises).

        Raises:
            ReportedError: Ray is not installed, or the multi-node check failed.
        """
        assert self.config is not None and self.hydra_context is not None  # setup() ran
        launcher = "ray_cluster" if self.multi_node else "ray_local"
        with reported():
            try:
                import ray
            except ImportError as exc:
                raise ConfigError(
                    f"hydra/launcher={launcher} needs Ray: pip install 'rag-experiments[ray]'"
                ) from exc
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        if self.multi_node:
            check_jobs(launcher, self.hydra_context, self.config, job_overrides)
        from rag_experiments.tracking.sweep import read_parent_run_id

        sweep_dir = Path(to_absolute_path(str(self.config.hydra.sweep.dir)))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        parent_id = read_parent_run_id(str(sweep_dir))
        configs = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info("\t#%d : %s", idx, " ".join(filter_overrides(overrides)))
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = f"{cfg.hydra.job.name}_{idx}"
                cfg.hydra.job.num = idx
            configs.append(cfg)
        started = not ray.is_initialized()
        if started:
            log.info("Ray: ray.init(address=%r, %s)", self.address, self.init)
            ray.init(address=self.address, **self.init)
        try:
            task = (
                ray.remote(**self.remote)(run_ray_job) if self.remote else ray.remote(run_ray_job)
            )
            state = Singleton.get_state()
            refs = [
                task.remote(self.hydra_context, cfg, self.task_function, state, parent_id)
                for cfg in configs
            ]
            log.info("Ray launcher: %d jobs submitted, sweep dir %s", len(refs), sweep_dir)
            return list(ray.get(refs))
        finally:
            if started:
                ray.shutdown()  # stops the instance it started; only disconnects from a cluster


def run_ray_job(
    hydra_context: HydraContext,
    sweep_config: DictConfig,
    task_function: TaskFunction,
    singleton_state: dict[Any, Any],
    parent_run_id: str | None,
) -> JobReturn:
    """One job, inside a Ray worker: Hydra's ``run_job`` as the joblib and submitit launchers
    call it, after moving to the driver's working directory when this node has it (relative
    paths then mean what they mean to the driver) and writing the sweep's parent run id into
    the node's sweep directory when it is not there (a node that does not share it)."""
    setup_globals()
    Singleton.set_state(singleton_state)
    cwd = str(sweep_config.hydra.runtime.cwd)
    if os.path.isdir(cwd):
        os.chdir(cwd)
    HydraConfig.instance().set_config(sweep_config)
    if parent_run_id:
        from rag_experiments.tracking.sweep import PARENT_RUN_ID_FILE, write_parent_run_id

        sweep_dir = Path(to_absolute_path(str(sweep_config.hydra.sweep.dir)))
        if not (sweep_dir / PARENT_RUN_ID_FILE).exists():
            write_parent_run_id(sweep_dir, parent_run_id)
    return run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )


class SubmititLauncher(Launcher):
    """``hydra-submitit-launcher``'s launcher for :attr:`EXECUTOR` (``local`` or ``slurm``),
    with :func:`check_multi_node` first for SLURM (``hydra/launcher=slurm``).

    Args:
        **params: The plugin's own parameters (``timeout_min``, ``partition``, ``setup`` …;
            schema ``hydra/launcher=submitit_local|submitit_slurm``), passed through.
    """

    EXECUTOR = "local"
    """``local`` (processes on this machine) or ``slurm`` (set by the plugin subclasses)."""

    def __init__(self, **params: Any) -> None:
        self.executor = self.EXECUTOR
        self.params = params
        self._inner: Any = None
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        """Build the plugin's launcher and set it up (Hydra's launcher contract).

        Raises:
            ReportedError: ``hydra-submitit-launcher`` is not installed.
        """
        launcher = "slurm" if self.executor == "slurm" else "submitit_local"
        with reported():
            try:
                from hydra_plugins.hydra_submitit_launcher import submitit_launcher
            except ImportError as exc:
                raise ConfigError(
                    f"hydra/launcher={launcher} needs submitit: pip install "
                    "'rag-experiments[slurm]'"
                ) from exc
        cls = submitit_launcher.SlurmLauncher if self.executor == "slurm" else None
        cls = cls or submitit_launcher.LocalLauncher
        if self.executor == "slurm":
            check_sweep("slurm", config)
        self._inner = cls(**self.params)
        self._inner.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.config = config
        self.hydra_context = hydra_context

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        """Check (SLURM), then submit through the plugin and wait for every job.

        Raises:
            ReportedError: The multi-node check failed.
        """
        assert self.config is not None and self.hydra_context is not None  # setup() ran
        if self.executor == "slurm":
            check_jobs("slurm", self.hydra_context, self.config, job_overrides)
        return self._inner.launch(job_overrides, initial_job_idx)


def _plain(node: Any) -> dict[str, Any]:
    """A config node (or None) as a plain dict with interpolations resolved."""
    if node is None:
        return {}
    if OmegaConf.is_config(node):
        return dict(OmegaConf.to_container(node, resolve=True))  # type: ignore[arg-type]
    return dict(node)
