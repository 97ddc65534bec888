"""Compose a config of ``conf/`` with Hydra's compose API, for commands that are not Hydra
apps (``rag-exp judge-check``, ``rag-exp dataset report``); :func:`compose_once` for the Hydra
app itself (``rag-exp run``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from omegaconf import DictConfig

from rag_experiments.errors import ConfigError


def compose_config(config_name: str, overrides: list[str]) -> DictConfig:
    """Compose ``conf/<config_name>.yaml`` with Hydra ``overrides`` (``judge=ollama``).

    Hydra's global state is cleared before and after, so the call works in any process.

    Raises:
        ConfigError: An override does not parse or names an unknown key (the message names
            the schema's closest keys) or option.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    from rag_experiments.config import register
    from rag_experiments.config.keys import check_keys, explain
    from rag_experiments.locations import CONF_DIR

    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides)
    except HydraException as exc:
        ours = explain(exc)  # an unknown key: the schema's closest keys first
        lead = f"{ours}{'' if ours.endswith(('.', '?')) else '.'} " if ours else ""
        raise ConfigError(f"{lead}{config_name} {' '.join(overrides)}: {exc}") from None
    finally:
        GlobalHydra.instance().clear()
    check_keys(cfg)  # keys added with `+` that no schema declares
    return cfg


_RUN_MODE_OVERRIDE = "hydra.mode=RUN"
"""The override Hydra's ``_run_app`` appends for a run whose config sets no ``hydra.mode``."""


@contextmanager
def compose_once() -> Iterator[None]:
    """Hydra composes a run's config once instead of twice while the block runs.

    ``@hydra.main`` composes the whole config twice for ``rag-exp run`` (hydra-core 1.3,
    ``hydra/_internal/utils.py:_run_hydra``): ``Hydra.get_mode`` composes it (in MULTIRUN
    mode) only to read ``hydra.mode``, then ``Hydra.run`` composes it again in RUN mode with
    ``hydra.mode=RUN`` appended to the overrides (~0.3-0.5 CPU s each). In the block,
    ``get_mode`` composes in RUN mode and keeps the config; ``Hydra.run``'s composition of the
    same overrides then takes it, with ``hydra.mode=RUN`` applied as Hydra applies that
    override (the value set, the line appended to ``hydra.overrides.hydra``) and Hydra's
    logging configured as its ``compose_config`` does: the same config, node for node
    (``tests/config/test_compose_once.py``). Whenever the RUN composition fails (a sweep override
    without ``-m``, a missing default) Hydra's own ``get_mode`` decides, and a composition
    of other overrides or in MULTIRUN mode (``-m``) is Hydra's own: errors and sweeps are
    unchanged.
    """
    import hydra._internal.hydra as hydra_module
    from hydra._internal.hydra import Hydra
    from hydra.core.utils import configure_log
    from hydra.types import RunMode

    original_get_mode = Hydra.get_mode
    original_compose = Hydra.compose_config
    kept: dict[str, Any] = {}

    def get_mode(self: Any, config_name: str | None, overrides: list[str]) -> Any:
        try:
            cfg = original_compose(
                self, config_name=config_name, overrides=list(overrides), run_mode=RunMode.RUN
            )
        except Exception:  # noqa: BLE001 - Hydra's own get_mode decides (and swallows it too)
            return original_get_mode(self, config_name, overrides)
        kept.update(name=config_name, overrides=list(overrides), cfg=cfg)
        return cfg.hydra.mode

    def compose_config(
        self: Any,
        config_name: str | None,
        overrides: list[str],
        run_mode: Any,
        with_log_configuration: bool = False,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        cfg = kept.pop("cfg", None)
        before = kept.pop("overrides", None)
        same = (
            cfg is not None
            and run_mode == RunMode.RUN
            and from_shell
            and validate_sweep_overrides
            and kept.pop("name", None) == config_name
            and list(overrides[: len(before)]) == before
            and list(overrides[len(before) :]) in ([], [_RUN_MODE_OVERRIDE])
        )
        if not same:
            return original_compose(
                self,
                config_name=config_name,
                overrides=overrides,
                run_mode=run_mode,
                with_log_configuration=with_log_configuration,
                from_shell=from_shell,
                validate_sweep_overrides=validate_sweep_overrides,
            )
        if len(overrides) > len(before):  # as Hydra applies the override it appended
            cfg.hydra.mode = RunMode.RUN
            cfg.hydra.overrides.hydra.append(_RUN_MODE_OVERRIDE)
        if with_log_configuration:  # what Hydra.compose_config does after composing
            configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)
            hydra_module.log = logging.getLogger(hydra_module.__name__)
            self._print_debug_info(config_name, overrides, run_mode)
        return cfg

    Hydra.get_mode = get_mode  # type: ignore[method-assign]
    Hydra.compose_config = compose_config  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = original_get_mode  # type: ignore[method-assign]
        Hydra.compose_config = original_compose  # type: ignore[method-assign]


@contextmanager
def prompt_previews() -> Iterator[None]:
    """While the block runs, the config Hydra prints for ``--cfg job`` (and ``--cfg all``)
    shows each YAML rubric's prompt under its suite entry as ``prompt_preview``
    (:func:`~rag_experiments.config.keys.add_prompt_previews`). Only the printed copy
    (``Hydra.get_sanitized_cfg``, called by ``show_cfg`` alone) changes: a run's config is
    untouched."""
    from hydra._internal.hydra import Hydra

    from rag_experiments.config.keys import add_prompt_previews

    original = Hydra.get_sanitized_cfg

    def get_sanitized_cfg(self: Any, cfg: DictConfig, cfg_type: str) -> DictConfig:
        out = original(self, cfg, cfg_type)
        add_prompt_previews(out)
        return out

    Hydra.get_sanitized_cfg = get_sanitized_cfg  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_sanitized_cfg = original  # type: ignore[method-assign]
