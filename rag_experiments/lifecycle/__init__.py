"""Experiment lifecycle: per-query checkpoints and resume, the sweep objective, the sweeper and
launchers (Hydra plugins). Reruns and shard merges are commands (:mod:`rag_experiments.commands`);
shard selection is data (:mod:`rag_experiments.data.shard`)."""
