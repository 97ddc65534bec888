"""Experiment lifecycle: per-query checkpoints and resume, exact reruns."""
