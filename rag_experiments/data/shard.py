"""Sharded evaluation: ``shard.count=N shard.index=i`` evaluates one deterministic part of the
samples, so one large evaluation runs as N jobs on any launcher::

    rag-exp run -m shard.count=4 shard.index=0,1,2,3 …     # 4 jobs under one parent run
    rag-exp merge <parent run id>                           # one run, as if unsharded

Sample ``s`` belongs to shard ``int(sha256(s.id).hexdigest(), 16) mod N`` (SHA-256 of the id's
UTF-8 bytes): stable across runs, machines and Python versions (never Python's salted
``hash()``), independent of the sample's position, and the same for every configuration of a
sweep. The shards partition the set the unsharded run evaluates: the selection is applied
*after* the seeded ``max_samples`` subset, so ``max_samples=1000 shard.count=4`` splits those
1,000 samples into four parts. Within a shard the samples keep dataset order; the corpus is
not split (every shard indexes the whole corpus, from the shared vector index cache).

Shards are as equal as a hash makes them: with n samples each holds about n/N (binomial,
standard deviation sqrt(n (1/N)(1 - 1/N))), e.g. 25,000 ± 137 of 100,000 in 4 shards.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from rag_experiments.data.base import EvalDataset
from rag_experiments.errors import ConfigError


def shard_of(sample_id: str, count: int) -> int:
    """The shard of a sample id: ``int(sha256(id).hexdigest(), 16) mod count``.

    Args:
        sample_id: The sample's id (UTF-8 encoded before hashing).
        count: Number of shards, >= 1.

    Returns:
        The shard index in ``[0, count)``.
    """
    return int(hashlib.sha256(sample_id.encode("utf-8")).hexdigest(), 16) % count


def check_shard(count: int, index: int) -> None:
    """Refuse a shard selection that selects nothing sensible.

    Raises:
        ConfigError: ``count`` < 1, or ``index`` outside ``[0, count)``.
    """
    if count < 1:
        raise ConfigError(f"shard.count must be >= 1 (1 = no sharding), got {count}")
    if not 0 <= index < count:
        raise ConfigError(
            f"shard.index must be in [0, shard.count) = [0, {count}), got {index}: sweep "
            f"shard.index=0,…,{count - 1}"
        )


def select_shard(dataset: EvalDataset, count: int = 1, index: int = 0) -> EvalDataset:
    """The samples of shard ``index`` of ``count`` (see the module docstring).

    Args:
        dataset: The dataset as the unsharded run evaluates it (after ``max_samples``).
        count: ``shard.count``; 1 returns ``dataset`` itself.
        index: ``shard.index``.

    Returns:
        A dataset with the shard's samples in dataset order, the same name and corpus; its
        digest is the shard's.

    Raises:
        ConfigError: An invalid ``count``/``index``, or a shard without any sample (more
            shards than the hash spreads the samples over).
    """
    count, index = int(count), int(index)
    check_shard(count, index)
    if count == 1:
        return dataset
    samples = [s for s in dataset.samples if shard_of(s.id, count) == index]
    if not samples:
        raise ConfigError(
            f"shard {index} of {count} holds none of the {len(dataset.samples)} samples of "
            f"{dataset.name}: use fewer shards (shard.count)"
        )
    return replace(dataset, samples=samples)
