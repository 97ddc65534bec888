"""The read side of the MLflow store (``tracking/store.py``): a relative sqlite URI resolves
against the working directory, runs are found by filter (all of them, in the order asked),
a sweep's children by their parent tag, and a missing run or table is one TrackingError."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.errors import TrackingError
from rag_experiments.tracking.client import ensure_experiment, open_client
from rag_experiments.tracking.store import (
    child_runs,
    find_runs,
    get_run,
    open_store,
    read_table,
)


def test_open_store_refuses_an_in_memory_store() -> None:
    with pytest.raises(TrackingError, match="in-memory"):
        open_store("sqlite:///:memory:")


def test_find_runs_child_runs_get_run_and_read_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    writer = open_client(uri)  # the writing side creates the store
    exp = ensure_experiment(writer, "store-test", uri)
    parent = writer.create_run(exp, run_name="parent").info.run_id
    children = []
    for i in range(3):
        run = writer.create_run(exp, run_name=f"child-{i}", tags={MLFLOW_PARENT_RUN_ID: parent})
        writer.set_tag(run.info.run_id, "k", str(i % 2))
        children.append(run.info.run_id)
    other = writer.create_run(exp, run_name="other").info.run_id

    monkeypatch.chdir(tmp_path)
    client = open_store("sqlite:///mlruns.db")  # relative: against the working directory
    assert client.tracking_uri == uri
    assert sorted(r.info.run_id for r in child_runs(client, exp, parent)) == sorted(children)
    odd = find_runs(client, [exp], "tags.k = '1'")
    assert [r.info.run_id for r in odd] == [children[1]]
    by_name = find_runs(client, [exp], order_by=["attributes.run_name ASC"])
    assert [r.info.run_name for r in by_name] == [
        "child-0",
        "child-1",
        "child-2",
        "other",
        "parent",
    ]
    assert get_run(client, other).info.run_name == "other"
    with pytest.raises(TrackingError, match="not found at"):
        get_run(client, "0" * 32)
    with pytest.raises(TrackingError, match="cannot search runs"):
        find_runs(client, [exp], "tags.k ==== 1")

    writer.log_text(other, "id,score\n007,0.5\n", "per_query_results.csv")
    table = read_table(client, other)
    assert table["id"].tolist() == ["007"] and table["score"].tolist() == [0.5]  # id stays a str
    with pytest.raises(TrackingError, match="cannot fetch per_query_results.csv"):
        read_table(client, parent)


def test_a_run_id_prefix_resolves_to_the_one_run_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41 (7): ``compare``/``gate``/``report`` take the 8-character ids the MLflow UI
    shows; a prefix of several runs is refused with both listed."""
    from types import SimpleNamespace

    from mlflow import MlflowClient

    from rag_experiments.tracking import store as store_module
    from rag_experiments.tracking.store import RunStore

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("e")
    one = client.create_run(exp, run_name="r1").info.run_id
    store = RunStore(uri)
    assert store.resolve_run_id(one[:8]) == one
    assert store.resolve_run_id(one.upper()[:8]) == one
    assert store.resolve_run_id(one) == one
    assert store.resolve_run_id("production") == "production"  # an alias: unchanged
    assert store.resolve_run_id("abc") == "abc"  # under 6 digits: not looked up
    twins = [
        SimpleNamespace(info=SimpleNamespace(run_id=f"abcdef12{c * 24}", run_name=f"n{c}"))
        for c in "01"
    ]
    monkeypatch.setattr(store_module, "find_runs", lambda *a, **k: twins)
    with pytest.raises(TrackingError, match=r"'abcdef12' matches 2 runs.*\(n0\).*\(n1\)"):
        store.resolve_run_id("abcdef12")
