"""Compose a config of ``conf/`` with Hydra's compose API, for commands that are not Hydra
apps (``rag-exp judge-check``, ``rag-exp dataset report``)."""

from __future__ import annotations

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
