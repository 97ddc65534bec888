"""The SLURM launcher registered with Hydra: ``conf/hydra/launcher/slurm.yaml`` extends
hydra-submitit-launcher's schema ``submitit_slurm`` and sets its ``_target_`` here, so the
multi-node check runs before the job array is submitted. (``hydra/launcher=submitit_local`` is
the plugin's own option, unchanged: its jobs stay on this machine.) submitit is imported only
when a sweep is launched (``pip install 'rag-experiments[slurm]'``)."""

from __future__ import annotations

from rag_experiments.lifecycle.launchers import SubmititLauncher


class RagSlurmLauncher(SubmititLauncher):
    """Jobs as a SLURM job array (submitit), after the multi-node check."""

    EXECUTOR = "slurm"
