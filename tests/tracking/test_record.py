"""The run record (``tracking/record.py``) and the store's plain records (``tracking/store.py``):
a per-query table written by the code before the record existed (bf63fbd: ``tests/data/
old_run``, three columns groups cut from a ``judge.repeats=2`` run on the fakes) is read back
cell by cell, written again byte for byte, and read by export and compare; a table older still
(no ``reference_contexts``, ``keywords``, ``cached``, ``<m>.flip``) takes the defaults; the
``RunStore`` returns plain records and the package's own errors."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from rag_experiments.analysis.compare import compare_tables, per_query_frame
from rag_experiments.analysis.runs import MetricInfo
from rag_experiments.commands.export import table_samples
from rag_experiments.data import mlflow_traces
from rag_experiments.errors import TrackingError
from rag_experiments.metrics import calibration, repeats
from rag_experiments.records import MetricSpec, MetricValue, RagResponse, Sample
from rag_experiments.runner import EvalResult
from rag_experiments.tracking import record
from rag_experiments.tracking.mlflow_tracker import _frame, ensure_experiment, open_client
from rag_experiments.tracking.record import (
    ARTIFACTS,
    PARAMS,
    TAGS,
    PerQueryRow,
    metric_columns,
    read_rows,
    write_rows,
)
from rag_experiments.tracking.store import RunRecord, RunStore

OLD = Path(__file__).parent / "data" / "old_run"
OLD_CSV = OLD / "per_query_results.csv"
METRICS = ["nDCG@10", "faithfulness", "context_utilization", "answer_judge.accuracy_raw", "refusal"]


def _old_table() -> pd.DataFrame:
    return pd.read_csv(OLD_CSV, dtype={"id": str})  # as RunStore.read_table reads it


def test_a_table_written_by_the_old_code_is_read_cell_by_cell() -> None:
    rows = read_rows(_old_table().to_dict("records"))
    assert [r.id for r in rows] == ["s022", "s039"]
    first = rows[0]
    assert first.question_type == "condition_trigger" and first.answerable is True
    assert first.user_input.startswith("What causes a user account to be locked")
    assert first.response == "## 5." and first.error is None and first.error_message is None
    assert first.reference_doc_ids == ["it-access-policy"]
    assert first.keywords == ["locked for 30 minutes", "8 failed sign-in attempts", "15 minutes"]
    assert first.retrieved_doc_ids is not None and len(first.retrieved_doc_ids) == 5
    assert first.retrieved_ids is not None and first.retrieved_ids[0] == "vendor-management#6"
    assert len(first.retrieved_contexts) == 5 and first.retrieved_sources is not None
    assert first.latency_ms == 17.353 and first.cached is False and first.no_response is False
    assert list(first.values) == METRICS  # the metric columns, in table order
    # nDCG@10: the one relevant document (it-access-policy) is ranked 4th by row 1 and 2nd by
    # row 2 among the retrieved doc ids: 1 / log2(4 + 1) and 1 / log2(2 + 1).
    assert first.retrieved_doc_ids.index("it-access-policy") == 3
    assert first.values["nDCG@10"] == pytest.approx(1 / math.log2(5))
    assert rows[1].values["nDCG@10"] == pytest.approx(1 / math.log2(3))
    # judged with repeats=2: the fake judge agrees with itself (sd 0, no flip); a metric
    # without a reference is NaN with its reason and has neither sd nor verdict
    assert first.values["faithfulness"] == 0.5 and first.reasons["faithfulness"] is None
    assert first.sd["faithfulness"] == 0.0 and first.flips["faithfulness"] is False
    assert math.isnan(first.values["context_utilization"])
    assert first.reasons["context_utilization"] == "has_reference"
    assert math.isnan(first.sd["context_utilization"])
    assert first.flips["context_utilization"] is None
    assert first.values["answer_judge.accuracy_raw"] == 4.0
    assert "refusal" not in first.sd and "refusal" not in first.flips  # not judged


def test_the_writer_writes_the_old_shape_byte_for_byte() -> None:
    rows = read_rows(_old_table().to_dict("records"))
    # what the tracker's log_table does with EvalResult.rows(): lists as JSON text, to CSV
    written = _frame(write_rows(rows)).to_csv(index=False)
    assert written == OLD_CSV.read_text(encoding="utf-8")


def test_eval_result_rows_are_the_typed_rows_as_cells() -> None:
    sample = Sample(id="q1", user_input="Who?", reference="Ann", reference_doc_ids=["d1"])
    response = RagResponse(response="Ann", retrieved_contexts=["Ann did"], latency_ms=12.34567)
    specs = [MetricSpec("Hit@1"), MetricSpec("faithfulness")]
    values = [{"Hit@1": MetricValue(1.0), "faithfulness": MetricValue.nan("no_claims")}]
    result = EvalResult([sample], [response], values, specs)
    result.spread, result.flips = {"faithfulness": [0.25]}, {"faithfulness": [True]}
    (cells,) = result.rows()
    assert list(cells)[:3] == ["id", "question_type", "answerable"]
    assert list(cells)[-6:] == [
        "Hit@1",
        "Hit@1.reason",
        "faithfulness",
        "faithfulness.reason",
        "faithfulness.sd",
        "faithfulness.flip",
    ]
    assert cells["latency_ms"] == 12.346 and cells["retrieved_contexts"] == ["Ann did"]
    assert cells["Hit@1"] == 1.0 and cells["Hit@1.reason"] is None
    assert math.isnan(cells["faithfulness"]) and cells["faithfulness.reason"] == "no_claims"
    assert cells["faithfulness.sd"] == 0.25 and cells["faithfulness.flip"] is True
    # read back through the CSV, the row is the one written
    text = _frame(result.rows()).to_csv(index=False)
    (back,) = read_rows(pd.read_csv(io.StringIO(text), dtype={"id": str}).to_dict("records"))
    assert back.id == "q1" and back.reference_doc_ids == ["d1"] and back.values["Hit@1"] == 1.0
    assert back.reasons["faithfulness"] == "no_claims" and back.flips == {"faithfulness": True}


def test_a_table_older_than_some_columns_takes_their_defaults() -> None:
    old = _old_table().drop(
        columns=["reference_contexts", "keywords", "cached"]
        + [c for c in _old_table().columns if c.endswith(".flip")]
    )
    (first, _) = read_rows(old.to_dict("records"))
    assert first.reference_contexts == [] and first.keywords == [] and first.cached is False
    assert first.flips == {} and first.sd["faithfulness"] == 0.0


def test_metric_columns_leave_out_the_fixed_and_the_suffixed_ones() -> None:
    assert metric_columns(_old_table().columns) == METRICS


def test_export_reads_the_old_table_as_samples_with_recorded_answers() -> None:
    samples = table_samples(_old_table().to_dict("records"))
    assert [s.id for s in samples] == ["s022", "s039"]
    first = samples[0]
    assert first.recorded is not None and first.recorded.response == "## 5."
    assert first.recorded.latency_ms == 17.353
    assert first.reference_doc_ids == ["it-access-policy"] and first.answerable


def test_compare_reads_the_old_table_a_run_against_itself_differs_by_zero() -> None:
    frame = per_query_frame(read_rows(_old_table().to_dict("records")))
    specs = [MetricInfo("nDCG@10"), MetricInfo("faithfulness")]
    result = compare_tables(frame, frame, specs, n_resamples=50)
    by_metric = {s.metric: s for s in result.overall()}
    assert by_metric["nDCG@10"].n == 2 and by_metric["nDCG@10"].diff == 0.0
    mean = (1 / math.log2(5) + 1 / math.log2(3)) / 2
    assert by_metric["nDCG@10"].mean_a == pytest.approx(mean)


def test_the_trace_tags_the_loader_reads_are_the_ones_the_record_declares() -> None:
    assert mlflow_traces.QUESTION_TYPE_TAG == TAGS.question_type
    assert mlflow_traces.ANSWERABLE_TAG == TAGS.answerable


def test_the_judge_repeat_names_of_the_metrics_are_the_ones_the_record_declares() -> None:
    """``metrics/`` may not import ``tracking/`` (import contract), so the repeats module
    spells its column and run-value suffixes itself: they must be the record's."""
    assert (repeats.SD_SUFFIX, repeats.FLIP_SUFFIX) == (record.SD_SUFFIX, record.FLIP_SUFFIX)
    assert repeats.JUDGE_SD_SUFFIX == record.JUDGE_SD_SUFFIX
    assert repeats.FLIP_RATE_SUFFIX == record.FLIP_RATE_SUFFIX
    assert tuple(f".{s}" for s in calibration.SUFFIXES) == record.CALIBRATION_SUFFIXES


def test_run_store_returns_plain_records_and_the_package_errors(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    writer = open_client(uri)  # the writing side creates the store
    exp = ensure_experiment(writer, "record-test", uri)
    parent = writer.create_run(exp, run_name="parent").info.run_id
    child = writer.create_run(exp, run_name="shard-0", tags={TAGS.parent_run_id: parent})
    run_id = child.info.run_id
    writer.log_param(run_id, PARAMS.shard_index, "0")
    writer.log_metric(run_id, "nDCG_at_10", 0.5)
    writer.set_tag(run_id, TAGS.dataset_digest, "abc")
    writer.log_text(run_id, OLD_CSV.read_text(encoding="utf-8"), ARTIFACTS.per_query_csv)
    specs = json.loads((OLD / "metric_specs.json").read_text(encoding="utf-8"))
    writer.log_dict(run_id, specs, ARTIFACTS.metric_specs)
    writer.set_terminated(run_id)

    seen: list[dict[str, str]] = []
    store = RunStore(uri, on_run=lambda params: seen.append(dict(params)))
    record = store.get_run(run_id)
    assert isinstance(record, RunRecord)
    assert (record.run_id, record.experiment_id, record.experiment_name) == (
        run_id,
        exp,
        "record-test",
    )
    assert record.name == "shard-0" and record.status == "FINISHED"
    assert record.start_time is not None and record.end_time is not None
    assert record.params == {PARAMS.shard_index: "0"} and record.metrics == {"nDCG_at_10": 0.5}
    assert record.tags[TAGS.dataset_digest] == "abc" and record.artifact_uri
    assert seen == [{PARAMS.shard_index: "0"}]  # the caller's hook saw the run's params
    assert [r.run_id for r in store.child_runs(exp, parent)] == [run_id]
    assert [r.name for r in store.find_runs([exp], order_by=["attributes.run_name ASC"])] == [
        "parent",
        "shard-0",
    ]
    found = store.experiment_by_name("record-test")
    assert found is not None and found.experiment_id == exp
    assert store.experiment_by_name("nope") is None
    assert store.has_artifact(run_id, ARTIFACTS.metric_specs)
    assert not store.has_artifact(run_id, ARTIFACTS.judge_audit)
    assert json.loads(store.read_text(run_id, ARTIFACTS.metric_specs)) == specs
    rows = store.read_rows(run_id)
    assert rows == read_rows(_old_table().to_dict("records"))
    assert isinstance(rows[0], PerQueryRow)
    with pytest.raises(TrackingError, match="not found at"):
        store.get_run("0" * 32)
    with pytest.raises(TrackingError, match=f"cannot fetch {ARTIFACTS.config}"):
        store.read_text(run_id, ARTIFACTS.config)
    with pytest.raises(TrackingError, match="cannot search runs"):
        store.find_runs([exp], "tags.k ==== 1")
