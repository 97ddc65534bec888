"""The record of a run, declared once: every tag, param, metric-name pattern and artifact name
the package writes into a run or reads back from one, and the per-query row with its one
writer (:meth:`PerQueryRow.to_cells`) and its one reader (:meth:`PerQueryRow.from_cells`,
:func:`read_rows`).

Writers (the runner, :mod:`~rag_experiments.job`, the tracker, ``merge``, ``compare``) and
readers (``rerun``, ``merge``, ``export``, ``compare``, ``report``, ``gate``, grade sheets) import
the names from here, so a reader cannot disagree with a writer (as MLflow's own
``mlflow/utils/mlflow_tags.py`` declares every tag it writes once). It imports nothing of the
package: every layer may use it.

A run written by older code is still read: :meth:`PerQueryRow.from_cells` takes a column that
is missing (tables logged before ``reference_contexts``, ``keywords``, ``cached`` or
``<metric>.flip`` existed) as its default, and every cell as pandas reads a CSV (NaN for an
empty cell, ``True``/``False`` or text for a flag, JSON text for a list).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# --- tags ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tags:
    """Run tag keys (``run.data.tags``).

    Each attribute's value is the tag key; the comment of each says who writes it and who
    reads it. MLflow's own keys are spelled as MLflow spells them
    (``mlflow/utils/mlflow_tags.py``).
    """

    note: str = "mlflow.note.content"
    """The run's description: the caveat of a run on the embedded model (``job.py``,
    the sweep parent on an error); read by ``compare`` and ``report`` (printed as NOTE)."""
    parent_run_id: str = "mlflow.parentRunId"
    """A sweep child's parent run (MLflow); read by :meth:`RunStore.child_runs`."""
    run_name: str = "mlflow.runName"
    """The run's name (MLflow)."""
    error: str = "error"
    """Why a run failed (the tracker, the sweep callback); read by ``merge``."""
    dataset_digest: str = "dataset.digest"
    """Digest of the evaluated samples (the tracker's ``log_dataset``); read by ``compare``
    (same dataset?), ``rerun`` and ``merge`` (same shard?); written by ``compare`` on its run."""
    dataset_questions_digest: str = "dataset.questions_digest"
    """Digest of the questions only (``job.py``, ``merge``); read by ``gate``."""
    dataset_dropped: str = "dataset.dropped"
    """Summary of the dataset rows left out (``job.py``)."""
    dataset_report: str = "dataset.report"
    """The dataset file a ``rag-exp dataset report --log`` run describes."""
    metrics_backend: str = "metrics.backend"
    """The metrics suite's name (``job.py``)."""
    objective_error: str = "objective.error"
    """Why a sweep objective is NaN (``job.py``)."""
    rerun_of: str = "rerun_of"
    """On a rerun: the original run id (``rerun`` writes it through ``run_job``, and finds the
    rerun by it)."""
    merged_from: str = "merged_from"
    """On a merged run: the shard run ids in shard order, comma-separated (``merge``)."""
    merge_parent: str = "merge.parent_run_id"
    """On a merged run: the sweep parent whose shards were merged (``merge``)."""
    shard_count: str = "shard.count"
    """On a merged run: how many shards were merged (``merge``)."""
    compare_run_a: str = "compare.run_a"
    """On a comparison run: the baseline run (``compare``)."""
    compare_run_b: str = "compare.run_b"
    """On a comparison run: the changed run (``compare``)."""
    compare_forced: str = "compare.forced"
    """On a comparison run: ``true`` when ``--force`` compared different datasets."""
    sweep_report: str = "sweep.report"
    """On a sweep parent: the path of its logged report (``report``, the sweep's end)."""
    sweep_params: str = "sweep.params"
    """On a sweep parent: the swept config keys, JSON (the sweep callback); a job names its run
    after them."""
    sweep_failed_children: str = "sweep.failed_children"
    """On a sweep parent: the children that failed when failures were tolerated."""
    job_dir: str = "job.dir"
    """A job's output folder (``lifecycle/resume``); ``resume=`` finds its checkpoint by it."""
    dataset_name: str = "dataset.name"
    """The dataset's name (the tracker's ``log_dataset``)."""
    dataset_source: str = "dataset.source"
    """Where the dataset came from (the tracker's ``log_dataset``)."""
    sweep_dir: str = "sweep.dir"
    """On a sweep parent: the sweep's output folder (the sweep callback); ``report`` finds an
    experiment's latest sweep by it."""
    question_type: str = "question_type"
    """On a trace: the sample's question type (the trace writer); read by
    ``dataset=mlflow_traces``."""
    answerable: str = "answerable"
    """On a trace: ``"false"`` for an unanswerable sample (the trace writer); read by
    ``dataset=mlflow_traces``."""


TAGS = Tags()
"""The run tag keys (:class:`Tags`)."""

VISIBLE_TAGS = frozenset(
    {
        # what the run evaluated, as people filter and search runs in MLflow's UI
        TAGS.dataset_name,
        TAGS.dataset_digest,
        "target",
        "chunker",
        "embedder",
        "retriever",
        "reranker",
        "llm.model",
        "judge.model",
        TAGS.metrics_backend,
        "prompt.answer",
        # how it went
        TAGS.error,
        TAGS.objective_error,
        TAGS.dataset_dropped,
        "traces.error",
        "judge.qualification",
        # what kind of run it is (set only on such runs)
        TAGS.rerun_of,
        TAGS.merged_from,
        TAGS.merge_parent,
        TAGS.compare_run_a,
        TAGS.compare_run_b,
        TAGS.compare_forced,
        TAGS.sweep_report,
        TAGS.sweep_params,
        TAGS.sweep_failed_children,
        TAGS.sweep_dir,
        TAGS.dataset_report,
        "resumed",
        "resumed_after_error",
        TAGS.shard_count,
        "rag_eval.marker",  # pytest_plugin.RUN_TAG: searched for with a tag filter
        "judge_check.data",  # a judge-check run's labeled pairs (qualify/registry.py)
    }
)
"""Our tag keys kept as MLflow tags (with MLflow's own ``mlflow.*``): what people filter and
search runs on in the UI, the run's status, and the kinds of runs (found by a tag filter). A
plain evaluation run shows 11 of them (``dataset.name``, ``dataset.digest``, ``target``,
``chunker``, ``embedder``, ``retriever``, ``llm.model``, ``judge.model``, ``metrics.backend``,
``prompt.answer``, ``judge.qualification``), a failed one adds ``error``. Every other tag the
tracker is given (model providers and digests, cache modes, the index collection, ``job.dir``,
``dataset.source``, ``dataset.questions_digest`` …) goes into the artifact
:attr:`Artifacts.tags`; readers read both (:meth:`~rag_experiments.tracking.store.RunStore.
all_tags`), so a run logged before the split (every tag an MLflow tag) reads the same."""


def is_visible_tag(key: str) -> bool:
    """True for a tag key kept as an MLflow tag: MLflow's own or one of :data:`VISIBLE_TAGS`."""
    return key.startswith("mlflow.") or key in VISIBLE_TAGS


MODEL_IDENTITY_SUFFIXES = (".provider", ".model", ".digest")
"""Tags ``<role>.provider`` / ``.model`` / ``.digest`` of a model the run called (the target's
``describe()``, the judge's identity); ``rerun`` compares them and ``merge`` keeps them."""

OWN_TAG_PREFIXES = ("mlflow.", "dataset.", "version.", "git.", TAGS.error, TAGS.merged_from)
"""Tags a merged run does not copy from its shards: MLflow's own, the dataset's (logged again
for the whole dataset), the environment's (the tracker tags the merging process), errors."""

# --- params ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """Run param keys (the flattened resolved config; :mod:`~rag_experiments.tracking.params`).

    Only the keys a reader looks up by name are declared; every other param is the config
    key it flattens.
    """

    shard_count: str = "shard.count"
    """Shards of a sharded run (``shard.count``); read by ``merge``."""
    shard_index: str = "shard.index"
    """This shard (``shard.index``); read by ``merge``."""


PARAMS = Params()
"""The param keys readers look up (:class:`Params`)."""

# --- metric names ----------------------------------------------------------------------------

SD_SUFFIX = ".sd"
"""Per-query column of a row's spread over judge repeats: ``<metric>.sd``."""
FLIP_SUFFIX = ".flip"
"""Per-query column of whether a row's verdict flips between repeats: ``<metric>.flip``."""
REASON_SUFFIX = ".reason"
"""Per-query column of why a cell is NaN (or a flag on a value): ``<metric>.reason``."""
JUDGE_SD_SUFFIX = ".judge_sd"
"""Run metric: pooled within-row SD over judge repeats, ``<metric>.judge_sd``."""
FLIP_RATE_SUFFIX = ".flip_rate"
"""Run metric: share of rows whose verdict flips between repeats, ``<metric>.flip_rate``."""
CI_LOW_SUFFIX = "_ci_low"
"""Run value: the lower bound of a mean's bootstrap CI, ``<metric>_ci_low``
(``metrics.aggregate.to_metrics``; read by ``report`` and ``gate``)."""
CI_HIGH_SUFFIX = "_ci_high"
"""Run value: the upper bound, ``<metric>_ci_high``."""
N_VALID_SUFFIX = "_n_valid"
"""Run value: the valid cells of a mean, ``<metric>_n_valid``."""
BY_TYPE_PREFIX = "by_type/"
"""Run values of one question type: ``by_type/<type>/<metric>``."""
JUDGE_ERRORS_PREFIX = "judge.errors."
"""Run metric: judged cells lost to one judge error reason, ``judge.errors.<reason>``
(the runner, summed by ``merge``, printed by ``job.py``)."""
LLM_USAGE_SUFFIXES = (
    ".llm_calls",
    ".llm_cache_hits",
    ".llm_cache_hit_rate",
    ".llm_errors",
    ".prompt_tokens",
    ".completion_tokens",
    ".reasoning_tokens",
)
"""Run metrics of one model role's usage, ``<role>.llm_calls`` … (``llm/usage.py`` names them;
``merge`` sums the counters, ``rerun`` leaves them out of its comparison)."""
CALIBRATION_SUFFIXES = (
    ".ppi",
    ".ppi_ci_low",
    ".ppi_ci_high",
    ".ppi_lambda",
    ".labels_mean",
    ".labels_ci_low",
    ".labels_ci_high",
    ".ppi_n_labels",
    ".ppi_n_unlabeled",
    ".ppi_n_excluded",
)
"""Run values of a metric with human labels, ``<metric>.ppi`` … (``metrics/calibration.py``
names them without the dot, as ``SUFFIXES``; recomputed by ``merge``)."""
AT_SIGN = "@"
"""Canonical names carry their cut-off after it (``nDCG@10``)."""
AT_KEY = "_at_"
"""What MLflow keys hold instead of :data:`AT_SIGN` (``nDCG_at_10``;
:func:`~rag_experiments.tracking.names.sanitize_metric_name`)."""


def by_type(question_type: str, key: str) -> str:
    """The run-value key of ``key`` for one question type: ``by_type/<type>/<key>``."""
    return f"{BY_TYPE_PREFIX}{question_type}/{key}"


# --- artifacts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Artifacts:
    """Run-relative artifact paths. Each says who writes it and who reads it."""

    per_query_csv: str = "per_query_results.csv"
    """The per-query table, full text (the tracker's ``log_table`` of
    :meth:`~rag_experiments.runner.EvalResult.rows`); read by every command through
    :func:`read_rows` / ``RunStore.read_table``."""
    per_query_json: str = "per_query.json"
    """The same table for MLflow's UI (``tracking.log_table=true``); read by nobody here."""
    average_csv: str = "average_results.csv"
    """Every aggregate: metric, group, mean, n_valid, n_nan, CI, direction (the runner);
    read by ``report``, ``rerun`` and ``gate`` (:func:`~rag_experiments.analysis.runs.
    run_values`)."""
    metric_specs: str = "metric_specs.json"
    """The metric columns in output order with direction, range, description (the runner);
    read by ``merge``, ``compare``, ``report`` and ``gate``."""
    tags: str = "tags.json"
    """The run's tags kept off its MLflow page (every tag not in :data:`VISIBLE_TAGS`), as
    ``{key: value}`` (the tracker); read with the run's tags by ``rerun``, ``merge``,
    ``resume=``, ``gate`` and judge qualification (``RunStore.all_tags``)."""
    metric_names: str = "metric_names.json"
    """Canonical name → MLflow key of every logged metric (the tracker)."""
    config: str = "config.yaml"
    """The resolved config, secrets redacted (the tracker); read by ``rerun`` and ``merge``."""
    judge_audit: str = "judge_audit.jsonl"
    """Each judged question's judge replies and usage (the runner); read by ``merge``."""
    skipped_files: str = "skipped_files.json"
    """Corpus files that could not be read (the runner)."""
    dropped_rows: str = "dropped_rows.json"
    """Dataset rows left out with their reason (``job.py``, ``merge``)."""
    report_dir: str = "report"
    """Folder of a sweep report (``report``) or a dataset report (``dataset report --log``)."""
    report_html: str = "report/report.html"
    """The sweep report's page (tag :attr:`Tags.sweep_report`)."""
    agreement_dir: str = "agreement"
    """Folder of ``agreement/<sheet_id>.json`` on a graded run (``agreement``)."""

    def table_csv(self, name: str) -> str:
        """The CSV of the table ``name`` the tracker's ``log_table`` wrote:
        ``<name>_results.csv``."""
        return f"{name}_results.csv"


ARTIFACTS = Artifacts()
"""The artifact paths (:class:`Artifacts`)."""

PER_QUERY = "per_query"
"""Name of the per-query table (``log_table(rows, name=PER_QUERY)``)."""

# --- the per-query row -----------------------------------------------------------------------

FIXED_COLUMNS = (
    "id",
    "question_type",
    "answerable",
    "user_input",
    "reference",
    "response",
    "retrieved_contexts",
    "retrieved_ids",
    "retrieved_doc_ids",
    "retrieved_sources",
    "reference_doc_ids",
    "reference_contexts",
    "keywords",
    "no_response",
    "latency_ms",
    "cached",
    "error",
    "error_message",
)
"""The per-query table's columns before the metric columns, in written order."""

METRIC_SUFFIXES = (REASON_SUFFIX, SD_SUFFIX, FLIP_SUFFIX)
"""Suffixes of the columns that belong to a metric column (written in this order after it)."""


def missing(value: Any) -> bool:
    """True for an empty cell: None, or a float NaN (how pandas reads an empty CSV cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def text_cell(value: Any) -> str | None:
    """A text cell: None when empty, else its text."""
    return None if missing(value) else str(value)


def flag_cell(value: Any, default: bool) -> bool:
    """A boolean cell: ``default`` when empty; True for ``True`` (as pandas writes it) and
    for ``true``/``1``/``1.0`` in any case."""
    if missing(value):
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("true", "1", "1.0")


def number_cell(value: Any) -> float:
    """A float cell: NaN when empty."""
    return math.nan if missing(value) else float(value)


def json_cell(value: Any) -> Any:
    """A list or dict cell (JSON text in the CSV, or already a list): None when empty."""
    if missing(value):
        return None
    return json.loads(value) if isinstance(value, str) else value


def str_list_cell(value: Any) -> list[str] | None:
    """A list-of-strings cell: None when empty, each item as text."""
    items = json_cell(value)
    return None if items is None else [str(v) for v in items]


@dataclass(frozen=True)
class PerQueryRow:
    """One row of the per-query table (``per_query_results.csv``): the sample, the answer,
    and every metric's value with its reason (and, with judge repeats, its spread and flip).

    Attributes:
        id: Sample id (text).
        question_type: Question type, None when the sample has none.
        answerable: False for a question whose answer is not in the corpus.
        user_input: The question.
        reference: The reference answer (``""`` when none).
        response: The answer (``""`` when none).
        retrieved_contexts: Retrieved passages, in rank order.
        retrieved_ids: Chunk ids in rank order, None when the target did not record them.
        retrieved_doc_ids: Document ids in rank order, or None.
        retrieved_sources: Per passage, where it came from (dicts), or None.
        reference_doc_ids: Ids of the documents that hold the answer.
        reference_contexts: Passages that hold the answer.
        keywords: Terms a good retrieval surfaces.
        no_response: The target gave no answer.
        latency_ms: Time to answer in ms (rounded to µs when written); NaN when not logged.
        cached: The generator's response cache answered.
        error: Target error code, None on success.
        error_message: Its message, or None.
        values: ``{metric column: value}``, NaN for a NaN cell, in column order.
        reasons: ``{metric column: reason or None}``.
        sd: ``{metric column: SD over the judge repeats}`` for the repeated columns only.
        flips: ``{metric column: verdict flipped between repeats (None with < 2 valid)}`` for
            the repeated columns whose table has ``<metric>.flip``.
    """

    id: str
    question_type: str | None = None
    answerable: bool = True
    user_input: str = ""
    reference: str = ""
    response: str = ""
    retrieved_contexts: list[str] = field(default_factory=list)
    retrieved_ids: list[str] | None = None
    retrieved_doc_ids: list[str] | None = None
    retrieved_sources: list[Any] | None = None
    reference_doc_ids: list[str] = field(default_factory=list)
    reference_contexts: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    no_response: bool = False
    latency_ms: float = math.nan
    cached: bool = False
    error: str | None = None
    error_message: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str | None] = field(default_factory=dict)
    sd: dict[str, float] = field(default_factory=dict)
    flips: dict[str, bool | None] = field(default_factory=dict)

    def to_cells(self) -> dict[str, Any]:
        """The row as the table's cells, in written order: :data:`FIXED_COLUMNS`, then per
        metric ``<metric>``, ``<metric>.reason`` and, when repeated, ``<metric>.sd`` and
        ``<metric>.flip``. Lists stay lists (the tracker writes them as JSON text)."""
        cells: dict[str, Any] = {
            "id": self.id,
            "question_type": self.question_type,
            "answerable": self.answerable,
            "user_input": self.user_input,
            "reference": self.reference,
            "response": self.response,
            "retrieved_contexts": self.retrieved_contexts,
            "retrieved_ids": self.retrieved_ids,
            "retrieved_doc_ids": self.retrieved_doc_ids,
            "retrieved_sources": self.retrieved_sources,
            "reference_doc_ids": self.reference_doc_ids,
            "reference_contexts": self.reference_contexts,
            "keywords": self.keywords,
            "no_response": self.no_response,
            "latency_ms": self.latency_ms,
            "cached": self.cached,
            "error": self.error,
            "error_message": self.error_message,
        }
        for name, value in self.values.items():
            cells[name] = value
            cells[name + REASON_SUFFIX] = self.reasons.get(name)
            if name in self.sd:
                cells[name + SD_SUFFIX] = self.sd[name]
            if name in self.flips:
                cells[name + FLIP_SUFFIX] = self.flips[name]
        return cells

    @classmethod
    def from_cells(
        cls, cells: Mapping[str, Any], metrics: Sequence[str] | None = None
    ) -> PerQueryRow:
        """Read a row back from its cells (a CSV row as pandas reads it, or
        :meth:`to_cells`'s output).

        Args:
            cells: ``{column: cell}``; a missing column takes its default (older tables).
            metrics: The metric columns to read; default :func:`metric_columns` of ``cells``.

        Returns:
            The row.
        """
        names = list(metrics) if metrics is not None else metric_columns(cells)
        latency = cells.get("latency_ms")
        return cls(
            id=text_cell(cells.get("id")) or "",
            question_type=text_cell(cells.get("question_type")),
            answerable=flag_cell(cells.get("answerable"), True),
            user_input=text_cell(cells.get("user_input")) or "",
            reference=text_cell(cells.get("reference")) or "",
            response=text_cell(cells.get("response")) or "",
            retrieved_contexts=str_list_cell(cells.get("retrieved_contexts")) or [],
            retrieved_ids=str_list_cell(cells.get("retrieved_ids")),
            retrieved_doc_ids=str_list_cell(cells.get("retrieved_doc_ids")),
            retrieved_sources=json_cell(cells.get("retrieved_sources")),
            reference_doc_ids=str_list_cell(cells.get("reference_doc_ids")) or [],
            reference_contexts=str_list_cell(cells.get("reference_contexts")) or [],
            keywords=str_list_cell(cells.get("keywords")) or [],
            no_response=flag_cell(cells.get("no_response"), False),
            latency_ms=number_cell(latency),
            cached=flag_cell(cells.get("cached"), False),
            error=text_cell(cells.get("error")),
            error_message=text_cell(cells.get("error_message")),
            values={n: number_cell(cells.get(n)) for n in names},
            reasons={n: text_cell(cells.get(n + REASON_SUFFIX)) for n in names},
            sd={n: number_cell(cells[n + SD_SUFFIX]) for n in names if n + SD_SUFFIX in cells},
            flips={
                n: (None if missing(v) else flag_cell(v, False))
                for n in names
                if (v := cells.get(n + FLIP_SUFFIX, _ABSENT)) is not _ABSENT
            },
        )

    @property
    def has_response(self) -> bool:
        """True when the row carries an answer to score: no target error and not
        ``no_response``."""
        return self.error is None and not self.no_response


_ABSENT = object()


def metric_columns(columns: Iterable[str]) -> list[str]:
    """The metric columns among a table's columns (in order): every column that is not one
    of :data:`FIXED_COLUMNS` and does not end in a :data:`METRIC_SUFFIXES` suffix."""
    return [
        c
        for c in columns
        if c not in FIXED_COLUMNS and not any(c.endswith(s) for s in METRIC_SUFFIXES)
    ]


def read_rows(
    records: Sequence[Mapping[str, Any]], metrics: Sequence[str] | None = None
) -> list[PerQueryRow]:
    """Rows of a per-query table (``frame.to_dict("records")``, or :meth:`PerQueryRow.
    to_cells` dicts) as :class:`PerQueryRow`, in table order.

    Args:
        records: One ``{column: cell}`` per row.
        metrics: Metric columns; default :func:`metric_columns` of the first row.

    Returns:
        One row per record (empty for no records).
    """
    if not records:
        return []
    names = list(metrics) if metrics is not None else metric_columns(records[0])
    return [PerQueryRow.from_cells(r, names) for r in records]


def write_rows(rows: Iterable[PerQueryRow]) -> list[dict[str, Any]]:
    """The per-query table's rows as cells (:meth:`PerQueryRow.to_cells`), what the tracker's
    ``log_table`` takes."""
    return [r.to_cells() for r in rows]


__all__ = [
    "ARTIFACTS",
    "AT_KEY",
    "AT_SIGN",
    "BY_TYPE_PREFIX",
    "CALIBRATION_SUFFIXES",
    "CI_HIGH_SUFFIX",
    "CI_LOW_SUFFIX",
    "FIXED_COLUMNS",
    "FLIP_RATE_SUFFIX",
    "FLIP_SUFFIX",
    "JUDGE_ERRORS_PREFIX",
    "JUDGE_SD_SUFFIX",
    "LLM_USAGE_SUFFIXES",
    "METRIC_SUFFIXES",
    "MODEL_IDENTITY_SUFFIXES",
    "N_VALID_SUFFIX",
    "OWN_TAG_PREFIXES",
    "PARAMS",
    "PER_QUERY",
    "REASON_SUFFIX",
    "SD_SUFFIX",
    "TAGS",
    "Artifacts",
    "Params",
    "PerQueryRow",
    "Tags",
    "by_type",
    "metric_columns",
    "read_rows",
    "write_rows",
]
