"""BigQuery's own load path: :class:`BigQueryLoads` over a ``google.cloud.bigquery.Client``.

Submit a load job under a chosen id, ask what became of it, count a table's rows, make sure a
dataset exists, and the opt-in duplicate-offset query (DESIGN.md §4). Submission answers are
classified by ``core.load_lifecycle.classify_submit``: 409 Conflict means "this job id already
exists", i.e. already submitted — never a failure. The local emulator's differences live in
``emulator.py``, a subclass, not in flags here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any

from kbqe_dagster.core.load.evolution import SchemaChange
from kbqe_dagster.core.load.lifecycle import (
    ObservedJob,
    ObservedKind,
    SubmitOutcome,
    classify_submit,
)
from kbqe_dagster.core.load.notices import Column
from kbqe_dagster.core.record.table_options import TableMetadata, TableUpdate
from kbqe_dagster.resources.bigquery.jobs import (
    PIPELINE_LABEL,
    ROWS_FROM_JOB,
    DuplicateOffsets,
    JobReport,
    LoadRequest,
    SubmitResult,
    TableColumns,
    load_job_config,
)

log = logging.getLogger(__name__)

_EVOLVE_ATTEMPTS = 3
"""Reads and updates of a table's schema before giving up on concurrent writers."""


def _status_code(error: BaseException) -> int | None:
    """The HTTP status of a google-api-core error; ``None`` when no answer came back."""
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


class GoogleBigQueryLoads:
    """:class:`BigQueryLoads` over a ``google.cloud.bigquery.Client`` (or a fake of it)."""

    wants_file_schema = False
    """Only a table's first load carries its files' schema; BigQuery widens tables itself."""

    def __init__(
        self,
        client: Any,
        *,
        location: str | None = None,
        max_bytes_billed: int | None = None,
        job_timeout_s: float = 600.0,
    ) -> None:
        self.client = client
        self.location = location
        self.max_bytes_billed = max_bytes_billed
        self.job_timeout_s = job_timeout_s
        self._read_tables: dict[tuple[str, str], Any] = {}

    @property
    def project(self) -> str:
        return str(self.client.project)

    def _table_ref(self, dataset: str, table: str) -> str:
        return f"{self.project}.{dataset}.{table}"

    # --- load jobs ----------------------------------------------------------------------------
    def submit_load(self, request: LoadRequest) -> SubmitResult:
        try:
            self.client.load_table_from_uri(
                list(request.source_uris),
                self._table_ref(request.dataset, request.table),
                job_id=request.job_id,
                job_config=load_job_config(request),
                location=self.location,
            )
        except Exception as error:  # noqa: BLE001 - classified, never raised
            return self._refused(request, error)
        return SubmitResult(classify_submit(200))

    def _refused(self, request: LoadRequest, error: BaseException) -> SubmitResult:
        """A submission that raised: an answer from BigQuery (its status decides), or none at
        all (retry deadline, transport, timeout; requests' errors are OSErrors): then the job
        may exist or not, and resubmitting the same id is safe either way."""
        from google.api_core.exceptions import GoogleAPICallError, GoogleAPIError
        from google.auth.exceptions import TransportError

        if isinstance(error, GoogleAPICallError):
            code = _status_code(error)
        elif isinstance(error, (GoogleAPIError, TransportError, OSError)):
            code = None
        else:
            raise error
        outcome = classify_submit(code)
        log.log(
            logging.INFO if outcome is SubmitOutcome.ALREADY_SUBMITTED else logging.WARNING,
            "load job %s (%s.%s): submission answered %s: %s",
            request.job_id,
            request.dataset,
            request.table,
            code or "nothing",
            error,
        )
        return SubmitResult(outcome, code, str(error))

    def job_report(self, job_id: str) -> JobReport:
        from google.api_core.exceptions import NotFound

        try:
            job = self.client.get_job(job_id, location=self.location)
        except NotFound:
            return JobReport(ObservedJob(ObservedKind.UNKNOWN))
        state = getattr(job, "state", None)
        if state == "PENDING":
            return JobReport(ObservedJob(ObservedKind.PENDING))
        if state != "DONE":
            return JobReport(ObservedJob(ObservedKind.RUNNING))
        error = getattr(job, "error_result", None)
        if error:
            detail = error.get("message") or error.get("reason") or str(error)
            where = error.get("location")
            text = f"{detail} (at {where})" if where else str(detail)
            return JobReport(ObservedJob(ObservedKind.DONE_ERROR, text))
        return self._done_report(job_id, job)

    def _done_report(self, job_id: str, job: Any) -> JobReport:
        started, ended = getattr(job, "started", None), getattr(job, "ended", None)
        seconds = (ended - started).total_seconds() if started and ended else None
        return JobReport(
            ObservedJob(ObservedKind.DONE_OK),
            output_rows=getattr(job, "output_rows", None),
            output_bytes=getattr(job, "output_bytes", None),
            input_files=getattr(job, "input_files", None),
            input_file_bytes=getattr(job, "input_file_bytes", None),
            bad_records=_bad_records(job),
            seconds=seconds,
            rows_source=ROWS_FROM_JOB,
        )

    # --- tables and datasets ------------------------------------------------------------------
    def table_exists(self, dataset: str, table: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self.client.get_table(self._table_ref(dataset, table))
        except NotFound:
            return False
        return True

    reports_bytes_processed = True
    """Whether a query job's ``total_bytes_processed`` is BigQuery's billing figure."""

    def table_schema(self, dataset: str, table: str) -> tuple[list[Any], Any] | None:
        """The table's schema (``SchemaField``s, nested fields included) and creation time,
        from its metadata (free); None when the table does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            meta = self.client.get_table(self._table_ref(dataset, table))
        except NotFound:
            return None
        return self._schema(dataset, table, meta), getattr(meta, "created", None)

    def _schema(self, dataset: str, table: str, meta: Any) -> list[Any]:
        return list(meta.schema)

    def table_fields(self, dataset: str, table: str) -> list[dict[str, Any]] | None:
        """The table's columns as its metadata lists them (free), in BigQuery's REST form
        with their modes and nested fields; None when the table does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            meta = self.client.get_table(self._table_ref(dataset, table))
        except NotFound:
            return None
        return [f.to_api_repr() for f in meta.schema]

    def evolve_table(
        self, dataset: str, table: str, plan: Callable[[list[dict[str, Any]]], SchemaChange]
    ) -> tuple[SchemaChange, list[dict[str, Any]]] | None:
        """Gives ``dataset.table`` the schema ``plan`` makes of its current columns
        (core/load/evolution.py: relaxed and added columns; a refusal raises from ``plan``),
        by a metadata update (tables.patch: free). Returns the change and the columns after
        it; None when the table does not exist.

        The update carries the etag of the read: when another writer changed the schema in
        between (two stage tasks relaxing the same column), it fails and the change is planned
        again from the table as it is then."""
        from google.api_core.exceptions import NotFound, PreconditionFailed
        from google.cloud import bigquery

        ref = self._table_ref(dataset, table)
        for attempt in range(_EVOLVE_ATTEMPTS):
            try:
                meta = self.client.get_table(ref)
            except NotFound:
                return None
            current = [f.to_api_repr() for f in meta.schema]
            change = plan(current)
            if not change.changes:
                return change, current
            self._before_schema_update(dataset, table, change)
            meta.schema = [bigquery.SchemaField.from_api_repr(c) for c in change.schema]
            try:
                self.client.update_table(meta, ["schema"])
            except PreconditionFailed:
                if attempt + 1 == _EVOLVE_ATTEMPTS:
                    raise
                continue
            log.info("%s.%s: before rows of its files' schema: %s", dataset, table, change.summary)
            return change, list(change.schema)
        raise AssertionError("unreachable")  # pragma: no cover

    def _before_schema_update(self, dataset: str, table: str, change: SchemaChange) -> None:
        """What must happen before the metadata update (the emulator: its storage first)."""

    def table_columns(self, dataset: str, table: str) -> TableColumns | None:
        """The table's top-level columns and creation time; None when it does not exist."""
        found = self.table_schema(dataset, table)
        if found is None:
            return None
        schema, created = found
        return TableColumns(
            tuple(Column(f.name, f.field_type, f.mode or "NULLABLE") for f in schema), created
        )

    def table_row_count(self, dataset: str, table: str) -> int | None:
        """Rows in the table from its metadata (free; kbqe never streams, so no buffer is
        left out); ``None`` when the table does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            return int(self.client.get_table(self._table_ref(dataset, table)).num_rows or 0)
        except NotFound:
            return None

    def table_labels(self, dataset: str, table: str) -> dict[str, str] | None:
        """The table's labels (metadata: free); ``None`` when the table does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            meta = self.client.get_table(self._table_ref(dataset, table))
        except NotFound:
            return None
        return dict(meta.labels or {})

    def add_table_labels(self, dataset: str, table: str, labels: Mapping[str, str]) -> None:
        """Adds ``labels`` to the table, keeping every label it has. The update carries the
        etag of the read, so a concurrent change of the labels fails it instead of being
        overwritten."""
        meta = self.client.get_table(self._table_ref(dataset, table))
        meta.labels = {**(meta.labels or {}), **labels}
        self.client.update_table(meta, ["labels"])

    def table_metadata(self, dataset: str, table: str) -> TableMetadata | None:
        """What kbqe keeps in step on the table (labels, description, clustering, partition
        expiration), from one metadata read (free); None when it does not exist. The read is
        kept for :meth:`update_table_options`, whose update then carries its etag."""
        from google.api_core.exceptions import NotFound

        try:
            meta = self.client.get_table(self._table_ref(dataset, table))
        except NotFound:
            return None
        self._read_tables[(dataset, table)] = meta
        return table_metadata_of(meta)

    def update_table_options(
        self, dataset: str, table: str, update: TableUpdate, read: Any = None
    ) -> None:
        """Patch the fields of ``update`` on the table as ``read`` (a ``Table`` the caller
        read), else as :meth:`table_metadata` read it last, else read now; a concurrent change
        since that read fails the update (etag) rather than being overwritten."""
        from google.cloud import bigquery

        meta = read if read is not None else self._read_tables.pop((dataset, table), None)
        if meta is None:
            meta = self.client.get_table(self._table_ref(dataset, table))
        if "labels" in update.fields:
            meta.labels = {**(meta.labels or {}), **update.labels}
        if "description" in update.fields:
            meta.description = update.description
        if "clustering_fields" in update.fields:
            meta.clustering_fields = list(update.clustering) if update.clustering else None
        if "time_partitioning" in update.fields:
            current = meta.time_partitioning
            meta.time_partitioning = bigquery.TimePartitioning(
                type_=current.type_, field=current.field, expiration_ms=update.expiration_ms
            )
        if "require_partition_filter" in update.fields:
            meta.require_partition_filter = update.require_partition_filter
        self.client.update_table(meta, list(update.fields))

    def ensure_dataset(self, dataset: str) -> None:
        from google.cloud import bigquery

        ref = bigquery.Dataset(f"{self.project}.{dataset}")
        if self.location:
            ref.location = self.location
        ref.labels = {"pipeline": PIPELINE_LABEL}
        self.client.create_dataset(ref, exists_ok=True)

    # --- checks -------------------------------------------------------------------------------
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
    ) -> DuplicateOffsets:
        """Kafka positions present more than once in the partitions since ``since`` — a query
        that is billed for the bytes of the key columns it scans (capped by
        ``max_bytes_billed``). ``timestamp_column``: ``date_column`` is an HOUR table's
        TIMESTAMP partition column, compared with ``since``'s 00:00 UTC (so it prunes)."""
        from google.cloud import bigquery

        if len(key_columns) != 3:
            raise ValueError(f"expected (topic, partition, offset) columns, got {key_columns}")
        topic, partition, offset = (f"`{c}`" for c in key_columns)
        sql = (
            f"SELECT {topic}, {partition}, {offset}, COUNT(*) AS copies "
            f"FROM `{self._table_ref(dataset, table)}` "
            f"WHERE `{date_column}` >= {'TIMESTAMP' if timestamp_column else 'DATE'} "
            f"'{since.isoformat()}' "
            f"GROUP BY {topic}, {partition}, {offset} HAVING COUNT(*) > 1 "
            f"ORDER BY copies DESC LIMIT {int(limit)}"
        )
        config = bigquery.QueryJobConfig(
            labels={"pipeline": PIPELINE_LABEL}, maximum_bytes_billed=self.max_bytes_billed
        )
        job = self.client.query(sql, job_config=config, location=self.location)
        rows = tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in job.result())
        return DuplicateOffsets(rows, getattr(job, "total_bytes_processed", None))


def table_metadata_of(meta: Any) -> TableMetadata:
    """The options of a ``google.cloud.bigquery.Table`` that kbqe keeps in step."""
    partitioning = getattr(meta, "time_partitioning", None)
    expiration = getattr(partitioning, "expiration_ms", None)
    return TableMetadata(
        labels=dict(getattr(meta, "labels", None) or {}),
        description=getattr(meta, "description", None),
        clustering=tuple(getattr(meta, "clustering_fields", None) or ()),
        partitioned=partitioning is not None,
        expiration_ms=int(expiration) if expiration else None,
        require_partition_filter=_requires_partition_filter(meta, partitioning),
        partition_type=getattr(partitioning, "type_", None) if partitioning else None,
        partition_field=getattr(partitioning, "field", None) if partitioning else None,
    )


def _requires_partition_filter(meta: Any, partitioning: Any) -> bool:
    """The table's own flag; when it states none, its partitioning's (where a creating load's
    ``timePartitioning.requirePartitionFilter`` may be all a table has)."""
    own = getattr(meta, "require_partition_filter", None)
    if own is not None:
        return bool(own)
    return bool((getattr(partitioning, "_properties", None) or {}).get("requirePartitionFilter"))


def _bad_records(job: Any) -> int | None:
    stats = getattr(job, "_properties", {}).get("statistics", {}).get("load", {})
    value = stats.get("badRecords")
    return int(value) if value is not None else None
