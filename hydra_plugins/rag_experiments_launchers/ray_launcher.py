"""The Ray launcher registered with Hydra: schema ``hydra/launcher=rag_ray`` (the options
``ray_local`` and ``ray_cluster`` in ``conf/hydra/launcher/`` extend it). Ray itself is imported
only when a sweep is launched (``pip install 'rag-experiments[ray]'``).

No ``from __future__ import annotations`` here: Hydra's plugin scanner runs this module before
it is in ``sys.modules``, where ``dataclasses`` cannot resolve string annotations.
"""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from rag_experiments.lifecycle.launchers import RayLauncher


class RagRayLauncher(RayLauncher):
    """:class:`rag_experiments.lifecycle.launchers.RayLauncher`, registered with Hydra."""


@dataclass
class RagRayLauncherConf:
    """Arguments of :class:`~rag_experiments.lifecycle.launchers.RayLauncher`: ``address``
    (``local`` = start a Ray instance here and stop it after; else the cluster to join),
    ``multi_node`` (check tracking and shared paths first), ``init`` (more ``ray.init``
    arguments), ``remote`` (``ray.remote`` options of each job)."""

    _target_: str = "hydra_plugins.rag_experiments_launchers.ray_launcher.RagRayLauncher"
    address: str = "local"
    multi_node: bool = False
    init: dict[str, Any] = field(default_factory=dict)
    remote: dict[str, Any] = field(default_factory=lambda: {"num_cpus": 1, "max_retries": 0})


ConfigStore.instance().store(
    group="hydra/launcher", name="rag_ray", node=RagRayLauncherConf, provider="rag_experiments"
)
