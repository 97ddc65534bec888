"""``rag-exp report``: a sweep written straight into an MLflow store (a parent and its
children with known means), reported and checked against values picked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import mlflow
import pytest
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rag_experiments.analysis.report import (
    Child,
    SweepReport,
    _best,
    build_report,
    pareto_front,
    resolve_parent,
    swept_params,
)
from rag_experiments.analysis.runs import MetricInfo
from rag_experiments.cli import main
from rag_experiments.tracking.store import RunStore
from rag_experiments.tracking.sweep import job_run_name, swept_keys

# chunker.size -> (nDCG@10 mean, its CI, refusal mean, latency_ms_p50, judge_calls)
CHILDREN = {
    "128": (0.60, (0.50, 0.70), 0.10, 10.0, 120.0),
    "256": (0.72, (0.63, 0.80), 0.05, 14.0, 120.0),
    "512": (0.70, (0.60, 0.79), 0.02, 30.0, 90.0),
}
SPECS = {
    "nDCG@10": {"higher_is_better": True, "range": [0, 1], "description": ""},
    "refusal": {"higher_is_better": False, "range": [0, 1], "description": ""},
}


def test_pareto_front_by_hand() -> None:
    cost = [1.0, 2.0, 3.0, 4.0, 5.0, 3.0, math.nan]
    quality = [0.5, 0.4, 0.7, 0.6, 0.9, 0.7, 1.0]
    # (2, .4) and (4, .6) are beaten by cheaper better points; the second (3, .7) ties the
    # first; the NaN-cost point is left out
    assert pareto_front(cost, quality) == [0, 2, 4]


def test_swept_params_are_those_that_differ() -> None:
    runs = [{"a": "1", "b": "x", "c": "5"}, {"a": "2", "b": "x", "c": "5"}, {"a": "1", "b": "x"}]
    assert swept_params(runs) == ["a", "c"]


def test_a_swapped_group_shows_as_its_target_only() -> None:
    # -m retriever=dense,bm25 retriever.top_k=3,5: bm25's own keys came with the choice
    dense = {"retriever._target_": "Dense", "retriever.top_k": "3", "seed": "0"}
    bm25 = {"retriever._target_": "Bm25", "retriever.top_k": "5", "retriever.k1": "0.9",
            "retriever.bm25.b": "0.4", "seed": "0"}  # fmt: skip
    assert swept_params([dense, bm25]) == ["retriever._target_", "retriever.top_k"]


def test_best_reports_a_tie_as_a_tie() -> None:
    def child(run_id: str, size: str, hit: float) -> Child:
        return Child(run_id, "FINISHED", {"chunker.size": size}, {"Hit@5": hit},
                     {"Hit@5": hit}, {"Hit@5": hit}, {})  # fmt: skip

    children = [
        child("a" * 32, "256", 1.0),
        child("b" * 32, "512", 0.5),
        child("c" * 32, "1024", 1.0),
    ]
    report = SweepReport(None, children, ["chunker.size"], [MetricInfo("Hit@5")], ["Hit@5"])  # type: ignore[arg-type]
    (row,) = _best(report)
    assert row["n_tied"] == 2 and row["best"] == 1.0
    assert row["config"] == "chunker.size=256 | chunker.size=1024"
    assert row["run_id"] == f"{'a' * 32} {'c' * 32}"


@pytest.fixture
def sweep(tmp_path: Path) -> tuple[str, str]:
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment("sweep-report", artifact_location=(tmp_path / "a").as_uri())
    parent = client.create_run(exp, run_name="17-00-00", tags={"sweep.dir": str(tmp_path)})
    for size, (ndcg, (lo, hi), refusal, latency, calls) in CHILDREN.items():
        child = client.create_run(exp, tags={MLFLOW_PARENT_RUN_ID: parent.info.run_id})
        rid = child.info.run_id
        for key, value in (("chunker.size", size), ("retriever.top_k", "5")):
            client.log_param(rid, key, value)
        for key, value in (
            ("nDCG_at_10", ndcg),
            ("nDCG_at_10_ci_low", lo),
            ("nDCG_at_10_ci_high", hi),
            ("refusal", refusal),
            ("refusal_ci_low", 0.0),
            ("refusal_ci_high", 0.2),
            ("latency_ms_p50", latency),
            ("judge_calls", calls),
        ):
            client.log_metric(rid, key, value)
        client.log_dict(rid, SPECS, "metric_specs.json")
        client.set_terminated(rid, "FINISHED")
    failed = client.create_run(exp, tags={MLFLOW_PARENT_RUN_ID: parent.info.run_id})
    client.log_param(failed.info.run_id, "chunker.size", "1024")
    client.set_terminated(failed.info.run_id, "FAILED")
    client.set_terminated(parent.info.run_id, "FAILED")
    return uri, parent.info.run_id


@pytest.mark.slow
def test_report_ranks_children_and_logs_to_the_parent(
    sweep: tuple[str, str], tmp_path: Path, capsys
) -> None:
    uri, parent_id = sweep
    client = mlflow.MlflowClient(uri)
    store = RunStore(uri)
    assert resolve_parent(store, "sweep-report").run_id == parent_id  # by experiment
    report = build_report(store, resolve_parent(store, parent_id))
    assert report.swept == ["chunker.size"]  # retriever.top_k is the same everywhere
    assert report.key == ["nDCG@10"] and len(report.children) == 4
    assert [c.label for c in report.finished()] == [f"chunker.size={s}" for s in CHILDREN]
    best = {row["metric"]: row for row in report.best}
    assert best["nDCG@10"]["config"] == "chunker.size=256" and best["nDCG@10"]["best"] == 0.72
    assert (best["nDCG@10"]["ci_low"], best["nDCG@10"]["ci_high"]) == (0.63, 0.80)
    assert best["refusal"]["config"] == "chunker.size=512"  # lower is better
    assert best["refusal"]["direction"] == "lower"

    out = tmp_path / "report"
    assert main(["report", parent_id, "--tracking-uri", uri, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "best nDCG@10" in printed and "chunker.size=256" in printed
    # the printed location is where the logged file really is (under the artifact root)
    where = Path(printed.split("report: ", 1)[1].split(" (logged to run", 1)[0])
    assert where.is_file() and where.name == "report.html" and (tmp_path / "a") in where.parents
    logged = {a.path for a in client.list_artifacts(parent_id, "report")}
    assert logged == {
        f"report/{n}"
        for n in (
            "report.html",
            "sweep.csv",
            "best.csv",
            "metric_vs_chunker.size.png",
            "pareto_latency_ms_p50.png",
            "pareto_judge_calls.png",
        )
    }
    assert client.get_run(parent_id).data.tags["sweep.report"] == "report/report.html"
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3  # one line plot, two Pareto plots
    assert "0.7200 [0.630, 0.800]" in page and "FAILED" in page
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from anywhere


@pytest.mark.slow
def test_report_shows_the_childrens_caveat(sweep: tuple[str, str], tmp_path: Path, capsys) -> None:
    uri, parent_id = sweep
    client = mlflow.MlflowClient(uri)
    caveat = "Answers come from the embedded SmolLM2-135M model: a smoke test <not a benchmark>."
    runs = client.search_runs([client.get_run(parent_id).info.experiment_id])
    children = [r for r in runs if r.data.tags.get(MLFLOW_PARENT_RUN_ID) == parent_id]
    for child in children:
        if child.info.status == "FINISHED":  # 3 of the 4 children; the FAILED one has none
            client.set_tag(child.info.run_id, "mlflow.note.content", caveat)
    store = RunStore(uri)
    report = build_report(store, resolve_parent(store, parent_id))
    assert report.notes == {caveat: 3}
    assert report.note_lines() == [f"NOTE (3 of 4 child runs): {caveat}"]

    out = tmp_path / "report"
    assert main(["report", parent_id, "--tracking-uri", uri, "--out", str(out), "--no-log"]) == 0
    assert f"  NOTE (3 of 4 child runs): {caveat}\n" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    assert "NOTE (3 of 4 child runs): Answers come from the embedded SmolLM2-135M" in page
    assert "&lt;not a benchmark&gt;" in page  # escaped

    every = SweepReport(None, [None, None], [], [], [], notes={caveat: 2})  # type: ignore[arg-type, list-item]
    assert every.note_lines() == [f"NOTE: {caveat}"]


def test_swept_keys_and_a_childs_run_name() -> None:
    cli = ["chunker.size=256,512", "retriever.top_k=3,5", "max_samples=8", "+x=choice(1,2)"]
    assert swept_keys(cli, {}) == ["chunker.size", "retriever.top_k", "x"]
    assert swept_keys(["max_samples=8"], {"chunker.size": "256,512"}) == ["chunker.size"]
    nested = {"retriever": {"top_k": "range(1,11)"}, "chunker.size": "choice(256, 512)"}
    assert swept_keys([], nested) == ["retriever.top_k", "chunker.size"]
    job = ["chunker.size=256", "retriever.top_k=3", "max_samples=8"]
    assert job_run_name(job, ["chunker.size", "retriever.top_k"]) == (
        "chunker.size=256,retriever.top_k=3"
    )
    assert job_run_name(job, []) == "chunker.size=256,retriever.top_k=3,max_samples=8"
    assert job_run_name([], ["chunker.size"]) is None


def test_choices_show_as_typed_not_as_class_paths() -> None:
    """Issue 41 (4): ``chunker._target_=rag_experiments.chunking.semantic.SemanticChunker`` is
    shown as what was typed, ``chunker=semantic`` (the bundled option built on that class's
    schema; the group's default when two options share it, a class name when none)."""
    from rag_experiments.analysis.runs import typed_params

    params = {
        "chunker._target_": "rag_experiments.chunking.semantic.SemanticChunker",
        "chunker.size": "256",
        "retriever._target_": "rag_experiments.retrieval.retriever.Retriever",
        "llm._target_": "my_pkg.MyChat",
    }
    assert typed_params(params) == {
        "chunker": "semantic",
        "chunker.size": "256",
        "retriever": "dense",  # dense.yaml and default.yaml: the default in config.yaml
        "llm": "MyChat",
    }


@pytest.mark.parametrize(
    "ticks",
    [
        ["semantic", "fixed"],
        [f"rag_experiments.chunking.{n}.{n.title()}Chunker" for n in ("semantic", "fixed", "none")],
        [f"chunker=semantic,chunker.size={n},top_k={k}" for n in (256, 512) for k in (3, 5)],
    ],
)
def test_category_tick_labels_do_not_overlap_on_the_rendered_figure(ticks: list[str]) -> None:
    """Issue 41 (4): the sweep report's x labels overlapped. Checked on the drawn figure:
    the tick labels' boxes (matplotlib's renderer) are pairwise disjoint."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from rag_experiments.analysis.plots import Series, metric_vs_param_figure

    x = list(range(len(ticks)))
    series = [Series("", x, {"nDCG@10": [0.5] * len(x)}, {"nDCG@10": [0.4] * len(x)},
                     {"nDCG@10": [0.6] * len(x)})]  # fmt: skip
    fig = metric_vs_param_figure("chunker", ["nDCG@10", "MRR@10", "Hit@5"][:1], series, ticks)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    (ax,) = fig.axes
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
    assert len(boxes) == len(ticks)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), (a, b)
