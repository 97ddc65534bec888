"""Secrets typed on the command line never stay in the files Hydra writes, nor on the console.

Hydra saves every job's config, its own config and the overrides as typed, in plain text,
under ``<job folder>/.hydra/`` (``config.yaml``, ``hydra.yaml``, ``overrides.yaml``) and the
sweep's ``multirun.yaml``, and echoes the overrides of a failed job
(``Error executing job with overrides: [...]``). :class:`RedactSecretsCallback` (listed under
``hydra.callbacks`` of ``conf/config.yaml`` and ``conf/generate.yaml``) rewrites those files
when the job starts, right after Hydra wrote them and before any work;
:func:`~rag_experiments.common.redact.scrubbed_console` (around every ``rag-exp`` command)
scrubs the console. A secret is the value of a
secret-looking key (``api_key``, ``token``, ``password``, ``Authorization`` …) or a ``Bearer``
credential (:mod:`rag_experiments.common.redact`); it becomes ``***REDACTED***``.

Prefer ``api_key_env`` (the name of an environment variable): the key then appears nowhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rag_experiments.common.redact import scrub, secret_values

HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
"""What Hydra writes into ``<job folder>/<hydra.output_subdir>``."""


def config_secrets(config: DictConfig) -> set[str]:
    """The secret values of a job's full config (with its ``hydra`` node): secret keys'
    values and the values of secret overrides (``hydra.overrides.task``)."""
    found = secret_values(OmegaConf.to_container(config, resolve=False))
    overrides = OmegaConf.select(config, "hydra.overrides.task", default=None)
    if overrides is not None:
        found |= secret_values(list(overrides))
    return found


def scrub_file(path: Path, secrets: set[str]) -> bool:
    """Rewrite ``path`` with :func:`~rag_experiments.common.redact.scrub` applied.

    Returns:
        True when the file changed; False when it is missing or held nothing secret.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    clean = scrub(text, secrets)
    if clean == text:
        return False
    path.write_text(clean, encoding="utf-8")
    return True


class RedactSecretsCallback(Callback):
    """Hydra callback: at the start of every job, scrub the secrets of its config and
    overrides from ``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml`` and the sweep's
    ``multirun.yaml`` (Hydra wrote them just before ``on_job_start``)."""

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        secrets = config_secrets(config)
        if not secrets:
            return
        hydra = config.hydra
        if hydra.output_subdir is not None:
            folder = Path(hydra.runtime.output_dir) / str(hydra.output_subdir)
            for name in HYDRA_FILES:
                scrub_file(folder / name, secrets)
        if hydra.mode == RunMode.MULTIRUN:
            scrub_file(Path(hydra.runtime.cwd) / str(hydra.sweep.dir) / "multirun.yaml", secrets)
