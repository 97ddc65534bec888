"""Sharded evaluation: ``shard.count``/``shard.index`` partition the samples by a SHA-256 of the
id, and ``rag-exp merge`` joins a sweep over ``shard.index`` into one run whose metrics equal
the unsharded run's exactly; a missing or unfinished shard makes merge refuse, naming it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from omegaconf import DictConfig

from rag_experiments.analysis.runs import run_values
from rag_experiments.build import load_dataset
from rag_experiments.commands.merge import MERGED_FROM_TAG, ShardMergeError, merge
from rag_experiments.commands.rerun import _VOLATILE_SUFFIXES
from rag_experiments.data.base import EvalDataset
from rag_experiments.data.shard import select_shard, shard_of
from rag_experiments.errors import ConfigError
from rag_experiments.records import Sample
from rag_experiments.tracking.store import RunStore, all_tags, read_table
from tests.lifecycle.test_sweep import RUN_TIMEOUT_S

FAST = ["llm=fake", "embedder=hash", "metrics=retrieval", "progress=false"]


def _dataset(ids: list[str]) -> EvalDataset:
    return EvalDataset("d", [Sample(id=i, user_input=f"question {i}") for i in ids])


def test_shard_of_is_sha256_of_the_id_mod_count() -> None:
    # sha256(b"a") = ca978112…afee48bb (FIPS 180-2 test vector family; `printf a | sha256sum`)
    digest = 0xCA978112CA1BBDCAFAC231B39A23DC4DA786EFF8147C4E72B9807785AFEE48BB
    assert shard_of("a", 16) == 0xB == digest % 16  # the last hex digit
    assert shard_of("a", 2) == 1  # 0x…bb is odd
    assert shard_of("a", 1) == 0


def test_shard_of_does_not_depend_on_pythons_hash_seed() -> None:
    ids = [f"q{i}" for i in range(50)]
    code = (
        f"from rag_experiments.data.shard import shard_of;print([shard_of(i, 7) for i in {ids!r}])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outs == {f"{[shard_of(i, 7) for i in ids]}\n"}


def test_shards_partition_the_samples_in_dataset_order() -> None:
    ids = [f"id-{i}" for i in range(200)]
    full = _dataset(ids)
    parts = [select_shard(full, 4, i) for i in range(4)]
    seen = [s.id for p in parts for s in p.samples]
    assert sorted(seen) == sorted(ids) and len(set(seen)) == len(ids)  # disjoint, complete
    for i, part in enumerate(parts):
        got = [s.id for s in part.samples]
        assert got == [x for x in ids if shard_of(x, 4) == i]  # dataset order kept
        assert 30 <= len(got) <= 70  # 50 ± 4.3 sd expected (binomial 200, 1/4)
    assert select_shard(full, 1, 0) is full
    assert parts[0].digest != full.digest


@pytest.mark.parametrize(
    ("count", "index", "message"),
    [
        (0, 0, "shard.count must be >= 1"),
        (3, 3, r"shard.index must be in \[0, shard.count\) = \[0, 3\), got 3"),
        (3, -1, "got -1"),
    ],
)
def test_invalid_shards_are_refused(count: int, index: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        select_shard(_dataset(["a", "b"]), count, index)


def test_an_empty_shard_is_refused() -> None:
    # "a" is in shard 1 of 2 (see above), so shard 0 of a one-sample dataset is empty
    with pytest.raises(ConfigError, match="shard 0 of 2 holds none of the 1 samples"):
        select_shard(_dataset(["a"]), 2, 0)


def _rag_exp(cwd: Path, uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("HYDRA_FULL_ERROR", None)
    cmd = [sys.executable, "-m", "rag_experiments", *args]
    if args[0] == "run":  # the fast defaults first: the test's own overrides win
        base = [*FAST, f"tracking.uri={uri}", f"paths.cache_dir={cwd / 'cache'}"]
        flags = [a for a in args[1:] if a.startswith("-")]  # -m before the overrides
        cmd = [*cmd[:4], *flags, *base, *(a for a in args[1:] if not a.startswith("-"))]
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _whole_and_merged(tmp_path: Path, count: int, *overrides: str) -> tuple[Any, ...]:
    """Run the unsharded evaluation (``run_name=whole``) and a sweep over ``count`` shards with
    the same ``overrides``, merge it; return ``(client, uri, whole, parent, shards in index
    order, merged run)``."""
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    _rag_exp(tmp_path, uri, "run", "run_name=whole", *overrides)
    indices = ",".join(map(str, range(count)))
    _rag_exp(
        tmp_path, uri, "run", "-m", f"shard.count={count}", f"shard.index={indices}", *overrides
    )
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("rag-experiments").experiment_id
    runs = client.search_runs([exp])
    (whole,) = [r for r in runs if r.info.run_name == "whole"]
    shards = [r for r in runs if MLFLOW_PARENT_RUN_ID in r.data.tags]
    shards.sort(key=lambda r: int(r.data.params["shard.index"]))
    (parent,) = [r for r in runs if r.info.run_id == shards[0].data.tags[MLFLOW_PARENT_RUN_ID]]
    assert [int(r.data.params["shard.index"]) for r in shards] == list(range(count))
    done = _rag_exp(tmp_path, uri, "merge", parent.info.run_id, "--tracking-uri", uri)
    merged = client.get_run(done.stdout.split("into run ")[1].split()[0])
    return client, uri, whole, parent, shards, merged


def _comparable(metrics: dict[str, float]) -> dict[str, float]:
    """Every metric but timings and LLM usage counters (per process by nature) and the
    merge's own ``shards.*``."""
    return {
        k: v
        for k, v in metrics.items()
        if not k.endswith(_VOLATILE_SUFFIXES) and not k.startswith("shards.")
    }


@pytest.mark.slow
def test_merged_shards_equal_the_unsharded_run(tmp_path: Path) -> None:
    client, uri, whole, parent, by_index, merged = _whole_and_merged(tmp_path, 3)
    merged_id = merged.info.run_id
    n = whole.data.metrics["n_samples"]
    assert sum(r.data.metrics["n_samples"] for r in by_index) == n == 69  # the bundled sample
    assert MLFLOW_PARENT_RUN_ID not in merged.data.tags
    assert merged.data.tags[MERGED_FROM_TAG] == ",".join(r.info.run_id for r in by_index)
    assert merged.data.tags["shard.count"] == "3"

    # every metric but the timings and LLM usage counters (per process by nature) is equal
    store = RunStore(client.tracking_uri)
    # logged + average_results.csv
    expected = _comparable(run_values(store, store.get_run(whole.info.run_id)))
    got = _comparable(run_values(store, store.get_run(merged.info.run_id)))
    assert got == expected
    assert any(k.startswith("by_type/") and k.endswith("_ci_low") for k in got)
    # a shard's own mean differs from the whole's: the merge did not just copy one shard
    assert any(r.data.metrics["nDCG_at_10"] != expected["nDCG_at_10"] for r in by_index)

    # the same dataset input and per-query table, in the same order
    merged_tags, whole_tags = all_tags(client, merged), all_tags(client, whole)
    for tag in ("dataset.digest", "dataset.name", "dataset.source"):  # source: in tags.json
        assert merged_tags[tag] == whole_tags[tag]
    (inp,) = merged.inputs.dataset_inputs
    assert inp.dataset.digest == whole.data.tags["dataset.digest"][:36]
    a = read_table(client, whole.info.run_id).drop(columns="latency_ms")
    b = read_table(client, merged_id).drop(columns="latency_ms")
    assert a.equals(b)
    assert merged.data.params["shard.count"] == "1"  # it stands for the unsharded evaluation
    assert merged.data.params["retriever.top_k"] == whole.data.params["retriever.top_k"]

    # a shard that did not finish, or is missing, makes merge refuse and name it
    client.set_terminated(by_index[1].info.run_id, "FAILED")
    with pytest.raises(ShardMergeError, match=f"shard 1 of 3 \\(run {by_index[1].info.run_id}"):
        merge(parent.info.run_id, uri)
    client.delete_run(by_index[2].info.run_id)
    with pytest.raises(ShardMergeError, match=r"shard\(s\) 2 of 3 missing"):
        merge(parent.info.run_id, uri)
    with pytest.raises(ShardMergeError, match="has no child runs"):
        merge(whole.info.run_id, uri)


@pytest.mark.slow
def test_merged_judged_shards_equal_the_unsharded_run(tmp_path: Path) -> None:
    """The judged metrics (fake judge) of 2 shards: the same scores, judge usage and audit."""
    judged = ("metrics=custom", "judge=fake", "max_samples=24")
    client, _, whole, _, shards, merged = _whole_and_merged(tmp_path, 2, *judged)
    expected = _comparable(whole.data.metrics)
    assert _comparable(merged.data.metrics) == expected
    assert expected["n_samples"] == 24 and expected["judge_calls_per_question"] > 0
    assert "faithfulness" in expected or "faithfulness_n_valid" in expected
    assert sum(r.data.metrics["judge_calls"] for r in shards) == expected["judge_calls"]
    audit = {}
    for run in (whole, merged):
        path = client.download_artifacts(run.info.run_id, "judge_audit.jsonl")
        audit[run.info.run_id] = Path(path).read_text(encoding="utf-8")
    assert audit[whole.info.run_id] == audit[merged.info.run_id]


@pytest.mark.slow
def test_merge_keeps_judge_noise_questions_digest_and_ppi(
    tmp_path: Path, compose_cfg: Callable[..., DictConfig]
) -> None:
    """With judge.repeats=3 (a fake judge whose faithfulness verdict is a seeded coin on the
    questions holding a marker) and calibration.labels, the merged run has the unsharded run's
    per-query <m>.sd/<m>.flip columns, judge_sd, flip_rate, PPI estimates and questions digest
    (the unsharded run computes them itself: the reference)."""
    ids = [s.id for s in load_dataset(compose_cfg("max_samples=24")).samples]
    labels = tmp_path / "labels.jsonl"
    half = ids[: len(ids) // 2]  # PPI needs labeled and unlabeled rows
    lines = [{"id": i, "metric": "faithfulness", "value": k % 2} for k, i in enumerate(half)]
    labels.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    noisy = "{claims:[{claim:x,context:0},{claim:y,context:0}]}"
    client, uri, whole, _, _, merged = _whole_and_merged(
        tmp_path, 2, "metrics=custom", "judge=fake", "max_samples=24", "judge.repeats=3",
        "judge.noisy_marker=password", f"+judge.noisy_responses.FaithfulnessOutput={noisy}",
        f"calibration.labels={labels}",
    )  # fmt: skip
    want, got = whole.data.metrics, merged.data.metrics
    assert 0 < want["faithfulness.flip_rate"] < 1  # some rows flip, some do not
    assert want["faithfulness.judge_sd"] > 0
    for key in ("faithfulness.judge_sd", "faithfulness.flip_rate", "faithfulness.ppi",
                "faithfulness.ppi_ci_low", "faithfulness.ppi_ci_high", "faithfulness.labels_mean",
                "faithfulness.ppi_n_labels", "answer_judge.accuracy.flip_rate"):  # fmt: skip
        assert got[key] == pytest.approx(want[key], rel=1e-12), key
    assert _comparable(got) == _comparable(want)
    tag = "dataset.questions_digest"  # kept in tags.json
    assert all_tags(client, merged)[tag] == all_tags(client, whole)[tag]
    a = read_table(client, whole.info.run_id)
    b = read_table(client, merged.info.run_id)
    for col in ("faithfulness.sd", "faithfulness.flip"):
        assert a[col].astype(str).tolist() == b[col].astype(str).tolist(), col
    # the pooled judge_sd of the whole run, by hand from its per-query SDs
    sds = [s for s in a["faithfulness.sd"] if not math.isnan(s)]
    assert want["faithfulness.judge_sd"] == pytest.approx(
        math.sqrt(sum(s * s for s in sds) / len(sds))
    )
    flips = [str(f) == "True" for f in a["faithfulness.flip"] if str(f) in ("True", "False")]
    assert want["faithfulness.flip_rate"] == pytest.approx(sum(flips) / len(flips))

    # without the labels file where merge runs, the merged run has no PPI and says so
    labels.unlink()
    parent_id = merged.data.tags["merge.parent_run_id"]
    again = client.get_run(merge(parent_id, uri))
    assert "faithfulness.ppi" not in again.data.metrics
    assert again.data.metrics["faithfulness.flip_rate"] == want["faithfulness.flip_rate"]
