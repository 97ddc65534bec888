"""Multi-row INSERTs of whole traces into the tables of MLflow's database store.

On a database store (``sqlite:///…``, ``postgresql://…``) the trace, tag, metadata, assessment
and span rows of a chunk of questions are made from their plain values
(:class:`~rag_experiments.tracking.trace_shape.TraceParts`) directly (no OpenTelemetry span, no
MLflow entity: the span content is what MLflow's ``translate_span_when_storing`` gives for our
spans, the LLM cost looked up only for a model MLflow has a price for) and go in one
transaction as multi-row INSERTs on MLflow's own tables (:func:`_insert_sql`; one ``COPY`` per
table on PostgreSQL, :func:`insert_rows`; ``tests/tracking/test_traces.py`` checks this path and
MLflow's API store the same rows, column for column).

**Schema revision.** The rows follow MLflow's tables at one schema revision
(:data:`SCHEMA_REVISION`). :meth:`SqlTraceWriter.open` reads the database's revision (MLflow's
alembic table ``alembic_version``) and writes only at that revision; at any other one it logs
one line saying why and returns None, so the caller uses MLflow's own API instead.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow.entities import (
    TraceState,
)
from mlflow.tracing.constant import (
    SpanAttributeKey,
    SpansLocation,
    TokenUsageKey,
    TraceMetadataKey,
    TraceTagKey,
)
from mlflow.tracing.otel.translation import sanitize_attributes
from mlflow.tracing.utils import (
    calculate_cost_by_model_and_token_usage,
    dump_span_attribute_value,
    encode_span_id,
)

from rag_experiments.errors import TrackingError
from rag_experiments.tracking.trace_shape import (
    TRACES_PER_TRANSACTION,
    AssessmentParts,
    SpanParts,
    TraceParts,
    assessment_id,
    chunks,
    otel_span_id,
    trace_metadata,
)

log = logging.getLogger(__name__)

SCHEMA_REVISION = "dc11669786a5"
"""MLflow's database schema revision (its alembic head) that the rows written here were written
and tested against: the head of MLflow 3.17.2, the installed version when this was recorded,
found with ``python -c "from mlflow.store.db.utils import _get_latest_schema_revision as h;
print(h())"`` (also the ``version_num`` of ``alembic_version`` in a store that MLflow creates).
After an MLflow upgrade whose head differs, the writer steps aside (MLflow's API writes the
traces) until ``tests/tracking/test_traces.py`` passes at the new head and this is set to it."""

_REVISION_REPORTED: set[tuple[str, str | None]] = set()
"""(store URL, revision) pairs whose fallback was already logged (one line per store)."""


def schema_revision(store: Any) -> str | None:
    """The schema revision of a database store: ``version_num`` of MLflow's alembic table
    ``alembic_version``, or None when it cannot be read (no such table or row)."""
    import sqlalchemy

    try:
        with store.engine.connect() as connection:
            row = connection.execute(
                sqlalchemy.text("SELECT version_num FROM alembic_version")
            ).first()
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    return str(row[0]) if row is not None else None


def _at_known_revision(store: Any) -> bool:
    """Whether ``store``'s schema is at :data:`SCHEMA_REVISION`; when not, one log line per
    store says why traces take MLflow's API instead."""
    revision = schema_revision(store)
    if revision == SCHEMA_REVISION:
        return True
    where = store.engine.url.render_as_string(hide_password=True)
    if (where, revision) not in _REVISION_REPORTED:
        _REVISION_REPORTED.add((where, revision))
        log.info(
            "MLflow store %s is at schema revision %s, not %s (the revision the multi-row trace "
            "writer was tested against): traces go through MLflow's API (slower)",
            where,
            revision,
            SCHEMA_REVISION,
        )
    return False


class TraceIdConflictError(TrackingError):
    """A trace id to write already belongs to another experiment of the store (the batch
    endpoint answers it with 409); traces are never overwritten across experiments."""


class SqlTraceWriter:
    """Multi-row INSERTs of trace infos, tags, metadata and assessments into the tables of
    MLflow's database store (see :func:`_insert_sql`)."""

    replaced = 0
    """Traces replaced while writing (none: :meth:`delete_existing` replaces them first)."""

    def __init__(self, store: Any, experiment: Any, models: Any) -> None:
        import sqlalchemy

        self.store = store
        self.experiment = experiment
        self.models = models
        self._sqlalchemy = sqlalchemy
        assessments = models.SqlAssessments
        self._assessment_columns = {
            a.key: a.columns[0].key for a in sqlalchemy.inspect(assessments).column_attrs
        }

    @staticmethod
    def _models(store: Any) -> Any:
        """MLflow's table models when ``store`` is a database store this code knows, else None
        (a server, another MLflow layout, trace rollups on, a schema revision other than
        :data:`SCHEMA_REVISION`)."""
        from mlflow.store.tracking.rest_store import RestStore

        if isinstance(store, RestStore):  # a server: skip the SQL store's imports
            return None
        try:
            from mlflow.store.tracking.dbmodels import models
            from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
            from mlflow.store.tracking.utils.sql_trace_rollups import rollups_enabled
            from mlflow.store.tracking.utils.trace_analytics import (  # noqa: F401 - layout check
                PROMOTED_TRACE_METADATA_KEYS,
                analytics_columns_from_metadata,
                assessment_aggregate,
                validate_trace_name,
            )
        except ImportError:  # another MLflow layout
            return None
        if type(store) is not SqlAlchemyStore or rollups_enabled():
            return None
        if not _at_known_revision(store):
            return None
        return models

    @classmethod
    def supports(cls, store: Any) -> bool:
        """Whether ``store`` is a database store this writer can write to."""
        return cls._models(store) is not None

    @classmethod
    def open(cls, store: Any, experiment_id: str) -> SqlTraceWriter | None:
        """A writer for ``store`` (a client's store, or a tracking server's own backend store
        in :mod:`~rag_experiments.tracking.server_app`), or None when :meth:`supports` says no
        (another MLflow layout or schema revision, a server): then the API is used."""
        models = cls._models(store)
        if models is None:
            return None
        return cls(store, store.get_experiment(experiment_id), models)

    def delete_existing(self, trace_ids: Sequence[str]) -> int:
        """Delete the traces among ``trace_ids`` that this writer's experiment holds (with
        MLflow's own ``delete_traces``, which removes their spans and assessments); returns
        how many.

        Raises:
            TraceIdConflictError: One of ``trace_ids`` belongs to another experiment (it is
                never overwritten; nothing is deleted).
        """
        table = self.models.SqlTraceInfo.__table__
        experiment_id = int(self.experiment.experiment_id)
        found: list[str] = []
        elsewhere: dict[str, int] = {}
        with self.store.ManagedSessionMaker() as session:
            for chunk in chunks(trace_ids, 500):
                query = self._sqlalchemy.select(table.c.request_id, table.c.experiment_id).where(
                    table.c.request_id.in_(list(chunk))
                )
                for trace_id, owner in session.execute(query):
                    if int(owner) == experiment_id:
                        found.append(trace_id)
                    else:
                        elsewhere[trace_id] = int(owner)
        if elsewhere:
            trace_id, owner = next(iter(elsewhere.items()))
            raise TraceIdConflictError(
                f"{len(elsewhere)} trace id(s) of experiment {experiment_id} already exist in "
                f"another experiment (e.g. {trace_id} in experiment {owner}); traces are never "
                "overwritten across experiments: log the run into its own experiment"
            )
        for chunk in chunks(found, TRACES_PER_TRANSACTION):
            self.store.delete_traces(
                experiment_id=self.experiment.experiment_id,
                max_timestamp_millis=None,
                max_traces=None,
                trace_ids=list(chunk),
            )
        return len(found)

    def write(self, chunk: Sequence[TraceParts]) -> None:
        """Write the traces of ``chunk`` with their assessments and spans in ONE transaction
        (:func:`_insert_sql`)."""
        _insert_sql(self, chunk)

    def close(self) -> None:
        """Nothing to release (the store's engine is MLflow's)."""


def _insert_sql(writer: SqlTraceWriter, chunk: Sequence[TraceParts]) -> None:
    """Write the traces of ``chunk`` with their assessments and spans in ONE transaction of a
    database store.

    MLflow writes one trace per transaction through ORM objects (``start_trace``), then its
    spans (``log_spans``: an upsert, then per-trace updates and tag merges). Here the rows the
    two calls leave behind for a new trace are inserted with one multi-row INSERT per table,
    built from the plain values of each trace (no OpenTelemetry span, no MLflow entity): the
    trace info (with the analytics columns ``start_trace`` derives from metadata and the
    token usage and cost ``log_spans`` aggregates from the spans; payload generation 1, as
    after one ``log_spans``), tags with the artifact location and the spans' location,
    metadata marked finalized, the assessments as ``SqlAssessments.from_mlflow_entity`` maps
    them, and the spans as ``log_spans`` stores them (:func:`_span_rows`). The rollup rebuild
    queue (off unless ``MLFLOW_SQL_TRACE_ROLLUPS_ENABLED``) is not maintained, so with
    rollups on the API is used. ``tests/tracking/test_traces.py`` checks that both paths store the
    same rows (re-run it when MLflow is upgraded: this relies on the store's tables and value
    mapping).
    """
    from mlflow.store.tracking.utils.trace_analytics import (
        PROMOTED_TRACE_METADATA_KEYS,
        analytics_columns_from_metadata,
        assessment_aggregate,
        validate_trace_name,
    )

    m = writer.models
    store = writer.store
    span_rows: list[dict[str, Any]] = []
    experiment = writer.experiment
    experiment_id = int(experiment.experiment_id)
    info_rows: list[dict[str, Any]] = []
    tag_rows: list[dict[str, Any]] = []
    metadata_rows: list[dict[str, Any]] = []
    assessment_rows: list[dict[str, Any]] = []
    analytics_keys: set[str] = set()
    columns = writer._assessment_columns
    now_ms = int(time.time() * 1000)
    spans_location = SpansLocation.TRACKING_STORE.value
    for parts in chunk:
        trace_id = parts.trace_id
        metadata = trace_metadata(parts)
        analytics = analytics_columns_from_metadata(metadata)
        analytics_keys.update(analytics)
        for key in PROMOTED_TRACE_METADATA_KEYS:
            metadata.pop(key, None)
        metadata[TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
        usage = _span_rows(parts, experiment_id, span_rows)
        analytics = {**usage, **analytics}  # start_trace's values take precedence
        analytics_keys.update(usage)
        info_rows.append(
            {
                "db_payload_generation": 1,
                "request_id": trace_id,
                "experiment_id": experiment_id,
                "timestamp_ms": parts.request_time,
                "execution_time_ms": parts.execution_duration,
                "status": (TraceState.ERROR if parts.failed else TraceState.OK).value,
                "client_request_id": parts.client_request_id,
                "request_preview": parts.request_preview,
                "response_preview": parts.response_preview,
                "trace_name": validate_trace_name(parts.tags.get(TraceTagKey.TRACE_NAME)),
                **analytics,
            }
        )
        location = store._get_trace_artifact_location_tag(experiment, trace_id)
        tags = {k: v for k, v in parts.tags.items() if k != TraceTagKey.TRACE_NAME}
        tags[location.key] = location.value
        tags[TraceTagKey.SPANS_LOCATION] = spans_location
        tag_rows.extend({"request_id": trace_id, "key": k, "value": v} for k, v in tags.items())
        metadata_rows.extend(
            {"request_id": trace_id, "key": k, "value": v} for k, v in sorted(metadata.items())
        )
        root_span_id = encode_span_id(otel_span_id(parts.otel_trace_id, 1))
        for a in parts.assessments:
            row = _assessment_row(a, parts, root_span_id, experiment_id, now_ms)
            row["aggregate_value"], row["is_numeric_value"] = assessment_aggregate(a.value)
            assessment_rows.append({columns[k]: v for k, v in row.items()})
    for row in info_rows:  # one column set for the multi-row INSERT
        for key in analytics_keys:
            row.setdefault(key, None)
    with store.ManagedSessionMaker(read_only=False) as session:
        insert_rows(session, m.SqlTraceInfo.__table__, info_rows)
        insert_rows(session, m.SqlTraceTag.__table__, tag_rows)
        insert_rows(session, m.SqlTraceMetadata.__table__, metadata_rows)
        insert_rows(session, m.SqlAssessments.__table__, assessment_rows)
        insert_rows(session, m.SqlSpan.__table__, span_rows)


def insert_rows(session: Any, table: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (all with the same keys) into ``table`` in ``session``'s transaction.

    On PostgreSQL through psycopg 3 the rows go in one ``COPY table (columns) FROM STDIN``
    (text format, ``psycopg.Copy.write_row``), the values passed through the columns' own
    SQLAlchemy bind processors first: the same rows as the INSERT, in one stream instead of
    one pipelined ``INSERT`` per row, which was half the server's trace time (measured:
    ``bench/logging_throughput.py``). Elsewhere (sqlite), or when a column left out of the rows
    has a Python-side default that ``COPY`` would not apply, one multi-row ``INSERT``.
    """
    if not rows:
        return
    connection = session.connection()
    keys = list(rows[0])
    omitted_defaults = any(c.default is not None for c in table.columns if c.name not in keys)
    dialect = connection.dialect
    if dialect.name != "postgresql" or dialect.driver != "psycopg" or omitted_defaults:
        session.execute(table.insert(), rows)
        return
    processors = [table.c[k].type.bind_processor(dialect) for k in keys]
    columns = ", ".join(dialect.identifier_preparer.quote(table.c[k].name) for k in keys)
    name = dialect.identifier_preparer.format_table(table)
    cursor = connection.connection.driver_connection.cursor()
    with cursor.copy(f"COPY {name} ({columns}) FROM STDIN") as copy:  # noqa: S608 - our names
        for row in rows:
            values = [row[k] for k in keys]
            for i, process in enumerate(processors):
                if process is not None and values[i] is not None:
                    values[i] = process(values[i])
            copy.write_row(values)


@functools.lru_cache(maxsize=64)
def _model_has_price(model: str) -> bool:
    """Whether MLflow's cost lookup knows ``model`` (a probe of 1 prompt token: the lookup
    returns no cost for a model it does not know, whatever the token counts)."""
    usage = {TokenUsageKey.INPUT_TOKENS: 1, TokenUsageKey.OUTPUT_TOKENS: 0}
    return calculate_cost_by_model_and_token_usage(model, usage) is not None


def _span_content(parts: TraceParts, span: SpanParts) -> dict[str, Any]:
    """A span as ``translate_span_when_storing`` gives it for our spans: ``Span.to_dict`` of
    the span :func:`entities` makes (attributes dumped as ``LiveSpan`` dumps them), with
    MLflow's own double-dump sanitising and the LLM cost when the model has a price (none of
    the other OpenTelemetry conventions it translates occur in our attributes)."""
    attributes = {
        SpanAttributeKey.REQUEST_ID: dump_span_attribute_value(parts.trace_id),
        SpanAttributeKey.SPAN_TYPE: dump_span_attribute_value(span.span_type),
        SpanAttributeKey.INPUTS: dump_span_attribute_value(span.inputs),
        SpanAttributeKey.OUTPUTS: dump_span_attribute_value(span.outputs),
    }
    for key, value in span.attributes.items():
        attributes[key] = dump_span_attribute_value(value)
    attributes = sanitize_attributes(attributes)
    usage = span.attributes.get(SpanAttributeKey.CHAT_USAGE)
    model = span.attributes.get(SpanAttributeKey.MODEL)
    if usage and isinstance(model, str) and _model_has_price(model):
        if cost := calculate_cost_by_model_and_token_usage(model, usage):
            attributes[SpanAttributeKey.LLM_COST] = dump_span_attribute_value(cost)
    return {
        "trace_id": base64.b64encode(parts.otel_trace_id.to_bytes(16, "big")).decode(),
        "span_id": base64.b64encode(
            otel_span_id(parts.otel_trace_id, span.n).to_bytes(8, "big")
        ).decode(),
        "parent_span_id": None
        if span.n == 1
        else base64.b64encode(otel_span_id(parts.otel_trace_id, 1).to_bytes(8, "big")).decode(),
        "name": span.name,
        "start_time_unix_nano": span.start_ns,
        "end_time_unix_nano": span.end_ns,
        "events": [],
        "status": {
            "code": "STATUS_CODE_ERROR" if span.error else "STATUS_CODE_OK",
            "message": "",
        },
        "attributes": attributes,
        "links": [],
    }


def _span_rows(parts: TraceParts, experiment_id: int, out: list[dict[str, Any]]) -> dict[str, Any]:
    """Append the ``spans`` rows of one trace to ``out``, as ``SqlAlchemyStore.log_spans``
    writes them; return the trace info's token and cost columns it aggregates from them
    (tree-aware, MLflow's own aggregation)."""
    from mlflow.store.tracking.sqlalchemy_store import (
        _span_aggregation_node,
        _try_parse_json_string,
    )
    from mlflow.store.tracking.utils.trace_analytics import (
        COST_COLUMN_BY_KEY,
        TOKEN_COLUMN_BY_KEY,
        bounded_model_dimension,
        finite_float_or_none,
        token_count_or_none,
    )
    from mlflow.tracing.utils import (
        TraceJSONEncoder,
        aggregate_cost_from_span_nodes,
        aggregate_usage_from_span_nodes,
    )

    usage_nodes = []
    cost_nodes = []
    root_id = encode_span_id(otel_span_id(parts.otel_trace_id, 1))
    for span in parts.spans:
        span_dict = _span_content(parts, span)
        attributes = span_dict["attributes"]
        span_id = encode_span_id(otel_span_id(parts.otel_trace_id, span.n))
        parent_id = None if span.n == 1 else root_id
        usage_nodes.append(
            _span_aggregation_node(span_id, parent_id, attributes, SpanAttributeKey.CHAT_USAGE)
        )
        cost_nodes.append(
            _span_aggregation_node(span_id, parent_id, attributes, SpanAttributeKey.LLM_COST)
        )
        cost: dict[str, Any] = {}
        if attributes.get(SpanAttributeKey.LLM_COST):
            try:
                cost = json.loads(attributes[SpanAttributeKey.LLM_COST])
            except (TypeError, ValueError):
                cost = {}
        out.append(
            {
                "trace_id": parts.trace_id,
                "experiment_id": experiment_id,
                "span_id": span_id,
                "parent_span_id": parent_id,
                "name": span.name,
                "type": span.span_type,
                "status": "ERROR" if span.error else "OK",
                "start_time_unix_nano": span.start_ns,
                "end_time_unix_nano": span.end_ns,
                "content": json.dumps(span_dict, cls=TraceJSONEncoder, ensure_ascii=False),
                "input_cost": finite_float_or_none(cost.get("input_cost")),
                "output_cost": finite_float_or_none(cost.get("output_cost")),
                "total_cost": finite_float_or_none(cost.get("total_cost")),
                "model_name": bounded_model_dimension(
                    _try_parse_json_string(attributes.get(SpanAttributeKey.MODEL))
                ),
                "model_provider": bounded_model_dimension(
                    _try_parse_json_string(attributes.get(SpanAttributeKey.MODEL_PROVIDER))
                ),
            }
        )
    columns: dict[str, Any] = {}
    usage = aggregate_usage_from_span_nodes(usage_nodes) or {}
    for key, column in TOKEN_COLUMN_BY_KEY.items():
        if (value := token_count_or_none(usage.get(key))) is not None:
            columns[column] = value
    total_cost = aggregate_cost_from_span_nodes(cost_nodes) or {}
    for key, column in COST_COLUMN_BY_KEY.items():
        if (value := finite_float_or_none(total_cost.get(key))) is not None:
            columns[column] = value
    return columns


def _assessment_row(
    a: AssessmentParts, parts: TraceParts, span_id: str, experiment_id: int, now_ms: int
) -> dict[str, Any]:
    """The ``assessments`` row of one assessment, keyed by ``SqlAssessments`` attribute, as
    ``SqlAssessments.from_mlflow_entity`` maps the entity :func:`entities` makes of it."""
    error = None
    if a.error_code is not None:
        error = json.dumps(
            {"error_code": a.error_code, "error_message": a.rationale, "stack_trace": None}
        )
    return {
        "assessment_id": assessment_id(parts.trace_id, a.name),
        "trace_id": parts.trace_id,
        "name": a.name,
        "assessment_type": "expectation" if a.expectation else "feedback",
        "value": json.dumps(a.value),
        "error": error,
        "created_timestamp": now_ms,
        "last_updated_timestamp": now_ms,
        "source_type": a.source_type,
        "source_id": a.source_id,
        "run_id": None,
        "span_id": span_id,
        "rationale": None if a.expectation else a.rationale,
        "overrides": None,
        "valid": True,
        "assessment_metadata": None,
        "experiment_id": experiment_id,
        "trace_timestamp_ms": parts.request_time,
    }
