"""The statistical defaults of the paired comparison and the gate, in a module that imports
nothing: the config schema (``GateConf``) reads the gate's defaults from here at start-up
without loading scipy and the comparison, so each default is written once."""

from __future__ import annotations

N_RESAMPLES = 9999
"""Bootstrap resamples and random sign patterns per test (scipy's default)."""

ALPHA = 0.05
"""Family-wise error rate of the gate's ``max_drop`` tests (Holm across the gated metrics)."""

MIN_PAIRS = 5
"""Fewest paired rows (rows with a value) a gate rule decides on; fewer: undecided."""

SEED = 0
"""Seed of the bootstrap and the permutation test."""
