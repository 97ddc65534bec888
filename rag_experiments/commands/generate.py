"""Hydra entry point of ``rag-exp generate``: compose ``conf/generate.yaml`` and run the
generation job (:func:`rag_experiments.generate.app.run_generate`)."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from rag_experiments.generate.app import run_generate  # registers the generate schema
from rag_experiments.locations import CONF_DIR


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="generate")
def generate_main(cfg: DictConfig) -> None:
    """``rag-exp generate [overrides…]``."""
    run_generate(cfg)


def generate_command(argv: list[str]) -> int:
    """``rag-exp generate …``: run Hydra on ``conf/generate.yaml``; 130 after Ctrl-C."""
    sys.argv = ["rag-exp generate", *argv]
    try:
        generate_main()
    except KeyboardInterrupt:
        print(
            "rag-exp generate: interrupted; the accepted pairs are saved. Run the same "
            "command again to resume.",
            file=sys.stderr,
        )
        return 130
    return 0
