"""rag-experiments' Hydra launchers (``hydra/launcher=ray_local|ray_cluster|slurm``); their
code is :mod:`rag_experiments.lifecycle.launchers` (Hydra instantiates a launcher only from a
class defined in the ``hydra_plugins`` package)."""
