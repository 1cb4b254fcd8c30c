"""BigQuery load jobs as the coordinator sees them: the request, the answers, the report, and
the one interface (:class:`BigQueryLoads`) every implementation offers.

The load job configuration is fixed by the design: AVRO with ``use_avro_logical_types``,
WRITE_APPEND, CREATE_IF_NEEDED, DAY time partitioning on the event-date column (HOUR on the
event-hour column for a table configured ``partitioning: hour``, MONTH or YEAR on the event
date, each on the ``partition_column`` where one is configured; none for ``partitioning:
none``; expiration optional; never a partition decorator: the job appends to the table),
schema update options ALLOW_FIELD_ADDITION and ALLOW_FIELD_RELAXATION, and labels naming the
pipeline and the destination. A job for a table that does not exist yet carries
the schema derived from its first file (``resources/bigquery/schema.py`` explains why), all
NULLABLE for a table configured ``all_columns_nullable``. Before any job the table takes its
files' schema (:meth:`BigQueryLoads.evolve_table`, core/load/evolution.py): a column whose
field the files lack or make optional is relaxed, one they add is added NULLABLE.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol

from kbqe_dagster.core.config.table_layout import TableLayout
from kbqe_dagster.core.load.evolution import SchemaChange, all_nullable
from kbqe_dagster.core.load.lifecycle import ObservedJob, SubmitOutcome
from kbqe_dagster.core.load.notices import Column
from kbqe_dagster.core.record.column_descriptions import describe_columns
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.core.record.table_options import TableMetadata, TableUpdate
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

PIPELINE_LABEL = "kbqe_dagster"
ROWS_FROM_JOB = "job statistics"
ROWS_FROM_CREATED_TABLE = "emulator: rows of the table the load created"
ROWS_UNAVAILABLE = "unavailable: emulator load that created its table in another process"
ROWS_FROM_DML = "emulator: rows the by-name INSERT of the load added"
_LABEL_UNSAFE = re.compile(r"[^a-z0-9_-]")


@dataclass(frozen=True)
class LoadRequest:
    """One load job: ``source_uris`` appended to ``dataset.table`` under ``job_id``."""

    job_id: str
    dataset: str
    table: str
    source_uris: tuple[str, ...]
    partition_field: str
    """The column of the table's time partitions: the event date (DAY, MONTH, YEAR), the
    event hour (HOUR), or the configured ``partition_column``. Unused for ``none``."""
    partition_expiration_days: int | None = None
    avro_schema: Mapping[str, Any] | None = None
    """The files' Avro schema, given only when the table does not exist yet."""
    clustering_fields: tuple[str, ...] = ()
    """Clustering of a table this load creates (a keyed changelog: by partition and offset,
    so that the MERGE's offset ranges prune blocks)."""
    partitioning: Partitioning = Partitioning.DAY
    """The unit of the table's time partitions (core/record/partitioning.py)."""
    all_columns_nullable: bool = False
    """A table this load creates gets only NULLABLE (or REPEATED) columns."""
    table_labels: Mapping[str, str] = field(default_factory=dict)
    """Labels of a table this load creates (``tables:``; not the job's own labels)."""
    description: str | None = None
    """Description of a table this load creates (``tables:``)."""
    require_partition_filter: bool = False
    """A table this load creates requires a partition filter in queries (``tables:``)."""
    column_descriptions: Mapping[str, str] = field(default_factory=dict)
    """Fixed descriptions of kbqe's columns in a table this load creates (the files' ``doc``
    describes the others: core/record/column_descriptions.py)."""
    custom_partition_column: bool = False
    """``partition_field`` is a column of the records (``tables:`` ``partition_column``)."""

    @classmethod
    def into(
        cls,
        layout: TableLayout,
        *,
        job_id: str,
        dataset: str,
        table: str,
        source_uris: tuple[str, ...],
        partition_expiration_days: int | None,
        avro_schema: Mapping[str, Any] | None,
    ) -> LoadRequest:
        """A load into a table of ``layout``: what the table is created with comes from the
        layout, in one place for the load path and the Storage Write tables' creating load."""
        return cls(
            job_id=job_id,
            dataset=dataset,
            table=table,
            source_uris=source_uris,
            partition_field=layout.partition_column,
            partition_expiration_days=partition_expiration_days,
            avro_schema=avro_schema,
            clustering_fields=layout.clustering,
            partitioning=layout.partitioning,
            all_columns_nullable=layout.all_columns_nullable,
            table_labels=layout.options.labels,
            description=layout.options.description,
            require_partition_filter=bool(layout.options.require_partition_filter),
            column_descriptions=layout.column_descriptions,
            custom_partition_column=layout.user_partition_column,
        )


@dataclass(frozen=True)
class TableColumns:
    """A table's top-level columns (free metadata) and when it was created."""

    columns: tuple[Column, ...]
    created: datetime | None = None


@dataclass(frozen=True)
class SubmitResult:
    outcome: SubmitOutcome
    status_code: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class JobReport:
    """What BigQuery says about one job id, with the load statistics when it is done."""

    observed: ObservedJob
    output_rows: int | None = None
    output_bytes: int | None = None
    input_files: int | None = None
    input_file_bytes: int | None = None
    bad_records: int | None = None
    seconds: float | None = None
    """Job run time (start to end), when BigQuery reports both."""
    rows_source: str = ROWS_FROM_JOB


@dataclass(frozen=True)
class DuplicateOffsets:
    """Result of the duplicate-offset query: up to ``limit`` (topic, partition, offset,
    copies) and the bytes the query was billed for."""

    duplicates: tuple[tuple[str, int, int, int], ...]
    bytes_processed: int | None


class BigQueryLoads(Protocol):
    """What the load coordinator and the checks need from BigQuery."""

    wants_file_schema: bool
    """True when every load request must carry its files' Avro schema (the emulator widens
    tables itself); otherwise only a table's first load carries it."""

    def submit_load(self, request: LoadRequest) -> SubmitResult: ...

    def job_report(self, job_id: str) -> JobReport: ...

    def table_exists(self, dataset: str, table: str) -> bool: ...

    def table_fields(self, dataset: str, table: str) -> list[dict[str, Any]] | None: ...

    def evolve_table(
        self, dataset: str, table: str, plan: Callable[[list[dict[str, Any]]], SchemaChange]
    ) -> tuple[SchemaChange, list[dict[str, Any]]] | None: ...

    def table_row_count(self, dataset: str, table: str) -> int | None: ...

    def table_columns(self, dataset: str, table: str) -> TableColumns | None: ...

    def ensure_dataset(self, dataset: str) -> None: ...

    def table_labels(self, dataset: str, table: str) -> dict[str, str] | None: ...

    def add_table_labels(self, dataset: str, table: str, labels: Mapping[str, str]) -> None: ...

    def table_metadata(self, dataset: str, table: str) -> TableMetadata | None: ...

    def update_table_options(self, dataset: str, table: str, update: TableUpdate) -> None: ...

    def duplicate_offsets(
        self,
        dataset: str,
        table: str,
        key_columns: Sequence[str],
        date_column: str,
        since: date,
        limit: int = 10,
        *,
        timestamp_column: bool = False,
    ) -> DuplicateOffsets: ...


def load_job_config(request: LoadRequest, labels: Mapping[str, str] | None = None):
    """The ``LoadJobConfig`` of DESIGN.md §4 for ``request``."""
    from google.cloud import bigquery

    config = bigquery.LoadJobConfig(
        source_format=bigquery.SourceFormat.AVRO,
        use_avro_logical_types=True,
        write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
        create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
        time_partitioning=_time_partitioning(request),
        schema_update_options=[
            bigquery.SchemaUpdateOption.ALLOW_FIELD_ADDITION,
            bigquery.SchemaUpdateOption.ALLOW_FIELD_RELAXATION,
        ],
        labels=dict(labels if labels is not None else job_labels(request)),
    )
    if request.clustering_fields:
        config.clustering_fields = list(request.clustering_fields)
    if request.require_partition_filter and config.time_partitioning is not None:
        # The load API has the flag only in its timePartitioning (the client marks that
        # property deprecated in favour of the table's, which a load cannot set): written
        # to the resource directly. Should BigQuery ever ignore it, the next run's table
        # update sets the table's own flag (loading/coordinator.py).
        config.time_partitioning._properties["requirePartitionFilter"] = True
    # Used by BigQuery only when the load creates the table; an existing table is brought in
    # step by a table update instead (loading/coordinator.py).
    if request.description is not None:
        config.destination_table_description = request.description
    if request.table_labels:
        config._properties["load"].setdefault("destinationTableProperties", {})["labels"] = dict(
            request.table_labels
        )
    if request.avro_schema is not None:
        source = request.source_uris[0] if request.source_uris else request.job_id
        columns = describe_columns(
            bigquery_schema_from_avro(dict(request.avro_schema), source),
            request.avro_schema,
            request.column_descriptions,
        )
        if request.all_columns_nullable:
            columns = all_nullable(columns)
        config.schema = [bigquery.SchemaField.from_api_repr(c) for c in columns]
    return config


def new_table(request: LoadRequest, ref: str):
    """The ``bigquery.Table`` the load of ``request`` would create at ``ref``: its files'
    schema, time partitioning, clustering, labels, description and partition filter (for paths that create a
    table before writing to it: Storage Write appends, the emulator's map loads)."""
    from google.cloud import bigquery

    config = load_job_config(request)
    table = bigquery.Table(ref, schema=config.schema)
    table.time_partitioning = config.time_partitioning
    if request.clustering_fields:
        table.clustering_fields = list(request.clustering_fields)
    if request.table_labels:
        table.labels = dict(request.table_labels)
    if request.description is not None:
        table.description = request.description
    if request.require_partition_filter:
        table.require_partition_filter = True
    return table


def _time_partitioning(request: LoadRequest):
    """The table's ``TimePartitioning`` (``bigquery.TimePartitioningType`` values are plain
    strings); None for an unpartitioned table."""
    from google.cloud import bigquery

    kind = request.partitioning.bigquery_type
    if kind is None:
        return None
    expiration = request.partition_expiration_days
    return bigquery.TimePartitioning(
        type_=kind,
        field=request.partition_field,
        expiration_ms=expiration * 86_400_000 if expiration else None,
    )


def job_labels(request: LoadRequest) -> dict[str, str]:
    """Labels of a load job: the pipeline and the destination (BigQuery label rules:
    lowercase letters, digits, ``_`` and ``-``, at most 63 characters)."""
    return {
        "pipeline": PIPELINE_LABEL,
        "kbqe_dataset": _label_value(request.dataset),
        "kbqe_table": _label_value(request.table),
    }


def _label_value(text: str) -> str:
    return _LABEL_UNSAFE.sub("_", text.lower())[:63]
