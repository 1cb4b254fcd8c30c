"""BigQuery for the load coordinator: submit a load job under a chosen id, ask what became of
it, count a table's rows, make sure a dataset exists, and the opt-in duplicate-offset query
(DESIGN.md §4). One interface (:class:`BigQueryLoads`) over ``google-cloud-bigquery``, the
same against BigQuery and the local emulator; the coordinator never sees the client.

The load job configuration is fixed by the design: AVRO with ``use_avro_logical_types``,
WRITE_APPEND, CREATE_IF_NEEDED, DAY time partitioning on the event-date column (expiration
optional), schema update options ALLOW_FIELD_ADDITION and ALLOW_FIELD_RELAXATION, and labels
naming the pipeline and the destination. A job for a table that does not exist yet carries
the schema derived from its first file (``resources/bigquery_schema.py`` explains why).

Submission answers are classified by ``core.load_lifecycle.classify_submit``: 409 Conflict
means "this job id already exists", i.e. already submitted — never a failure.

Emulator gap, named: the emulator's ``outputRows`` is the table's row count after the job,
not the rows the job appended (``test_emulator_gap_output_rows_is_the_table_total_not_the_
rows_appended``). With ``output_rows_is_table_total`` (set for the local stack only) the
resource counts the table's rows right before and right after each job it submits, waiting
for the job (the emulator runs jobs synchronously), and reports the difference; a job it did
not submit itself (an earlier process) then has no row figure. On BigQuery the flag is off
and the figure is the job's own statistics, which cost nothing.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from datetime import date
from typing import Any, Mapping, Protocol, Sequence

import dagster as dg
from pydantic import Field

from kbqe_dagster.core.errors import LoadError
from kbqe_dagster.core.load_lifecycle import (
    ObservedJob,
    ObservedKind,
    SubmitOutcome,
    classify_submit,
)
from kbqe_dagster.resources.bigquery_schema import bigquery_schema_from_avro

log = logging.getLogger(__name__)

PIPELINE_LABEL = "kbqe_dagster"
ROWS_FROM_JOB = "job statistics"
ROWS_FROM_TABLE_DELTA = "emulator: table row count after the job minus before it"
ROWS_UNAVAILABLE = "unavailable: emulator job not submitted by this process"
_LABEL_UNSAFE = re.compile(r"[^a-z0-9_-]")


@dataclass(frozen=True)
class LoadRequest:
    """One load job: ``source_uris`` appended to ``dataset.table`` under ``job_id``."""

    job_id: str
    dataset: str
    table: str
    source_uris: tuple[str, ...]
    partition_field: str
    """The DATE column of the table's DAY partitions (the event date)."""
    partition_expiration_days: int | None = None
    avro_schema: Mapping[str, Any] | None = None
    """The files' Avro schema, given only when the table does not exist yet."""


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

    def table_row_count(self, dataset: str, table: str) -> int | None: ...

    def ensure_dataset(self, dataset: str) -> None: ...

    def duplicate_offsets(
        self, dataset: str, table: str, key_columns: Sequence[str], date_column: str,
        since: date, limit: int = 10,
    ) -> DuplicateOffsets: ...


def load_job_config(request: LoadRequest, labels: Mapping[str, str] | None = None):
    """The ``LoadJobConfig`` of DESIGN.md §4 for ``request``."""
    from google.cloud import bigquery

    expiration = request.partition_expiration_days
    config = bigquery.LoadJobConfig(
        source_format=bigquery.SourceFormat.AVRO,
        use_avro_logical_types=True,
        write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
        create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
        time_partitioning=bigquery.TimePartitioning(
            type_=bigquery.TimePartitioningType.DAY,
            field=request.partition_field,
            expiration_ms=expiration * 86_400_000 if expiration else None,
        ),
        schema_update_options=[
            bigquery.SchemaUpdateOption.ALLOW_FIELD_ADDITION,
            bigquery.SchemaUpdateOption.ALLOW_FIELD_RELAXATION,
        ],
        labels=dict(labels if labels is not None else job_labels(request)),
    )
    if request.avro_schema is not None:
        source = request.source_uris[0] if request.source_uris else request.job_id
        columns = bigquery_schema_from_avro(dict(request.avro_schema), source)
        config.schema = [bigquery.SchemaField.from_api_repr(c) for c in columns]
    return config


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


def _status_code(error: BaseException) -> int | None:
    """The HTTP status of a google-api-core error; ``None`` when no answer came back."""
    code = getattr(error, "code", None)
    return code if isinstance(code, int) else None


class GoogleBigQueryLoads:
    """:class:`BigQueryLoads` over a ``google.cloud.bigquery.Client`` (or a fake of it)."""

    def __init__(
        self, client: Any, *, location: str | None = None,
        output_rows_is_table_total: bool = False, max_bytes_billed: int | None = None,
        job_timeout_s: float = 600.0, add_columns_before_load: bool = False,
    ) -> None:
        self.client = client
        self.location = location
        self.output_rows_is_table_total = output_rows_is_table_total
        self.add_columns_before_load = add_columns_before_load
        self.max_bytes_billed = max_bytes_billed
        self.job_timeout_s = job_timeout_s
        self._appended: dict[str, int] = {}

    @property
    def project(self) -> str:
        return str(self.client.project)

    def _table_ref(self, dataset: str, table: str) -> str:
        return f"{self.project}.{dataset}.{table}"

    # --- load jobs ----------------------------------------------------------------------------
    def submit_load(self, request: LoadRequest) -> SubmitResult:
        from google.api_core.exceptions import GoogleAPICallError, GoogleAPIError
        from google.auth.exceptions import TransportError

        if self.add_columns_before_load and request.avro_schema is not None:
            request = self._widen_existing_table(request)
        config = load_job_config(request)
        before = self._rows_or_zero(request) if self.output_rows_is_table_total else None
        try:
            job = self.client.load_table_from_uri(
                list(request.source_uris), self._table_ref(request.dataset, request.table),
                job_id=request.job_id, job_config=config, location=self.location,
            )
        except GoogleAPICallError as error:
            return self._refused(request, _status_code(error), error)
        except (GoogleAPIError, TransportError, OSError) as error:
            # No answer (retry deadline, transport, timeout; requests' errors are OSErrors):
            # the job may exist or not, and resubmitting the same id is safe either way.
            return self._refused(request, None, error)
        if before is not None:
            self._measure_appended(request, job, before)
        return SubmitResult(classify_submit(200))

    @property
    def wants_file_schema(self) -> bool:
        """True when every load needs its files' Avro schema, not only a table's first load."""
        return self.add_columns_before_load

    def _widen_existing_table(self, request: LoadRequest) -> LoadRequest:
        """Emulator gap (DESIGN.md §7): it ignores ALLOW_FIELD_ADDITION, so columns a newer
        schema adds are added with DDL before the load, as BigQuery would do in the load.
        Returns the request without a schema when the table exists (BigQuery's own path)."""
        from google.api_core.exceptions import NotFound

        ref = self._table_ref(request.dataset, request.table)
        try:
            table = self.client.get_table(ref)
        except NotFound:
            return request  # created by the load from the request's schema
        existing = {f.name.lower() for f in table.schema}
        wanted = bigquery_schema_from_avro(dict(request.avro_schema or {}), request.job_id)
        for column in (c for c in wanted if c["name"].lower() not in existing):
            if column["type"] == "RECORD" or column["mode"] == "REPEATED":
                log.warning("%s: cannot add nested column %s before the load (emulator)", ref, column["name"])
                continue
            log.info("%s: adding column %s %s (emulated field addition)", ref, column["name"], column["type"])
            # IF NOT EXISTS: the emulator's table metadata does not list columns added by
            # ALTER TABLE, so every later load of the newer schema asks again.
            self.client.query(f"ALTER TABLE `{request.dataset}.{request.table}` "
                              f"ADD COLUMN IF NOT EXISTS `{column['name']}` {column['type']}").result()
        return replace(request, avro_schema=None)

    def _refused(self, request: LoadRequest, code: int | None, error: BaseException) -> SubmitResult:
        outcome = classify_submit(code)
        log.log(
            logging.INFO if outcome is SubmitOutcome.ALREADY_SUBMITTED else logging.WARNING,
            "load job %s (%s.%s): submission answered %s: %s",
            request.job_id, request.dataset, request.table, code or "nothing", error,
        )
        return SubmitResult(outcome, code, str(error))

    def _rows_or_zero(self, request: LoadRequest) -> int:
        return self.table_row_count(request.dataset, request.table) or 0

    def _measure_appended(self, request: LoadRequest, job: Any, before: int) -> None:
        try:
            job.result(timeout=self.job_timeout_s)
        except Exception:  # a failed job appended nothing; its error is read when polled
            return
        after = self._rows_or_zero(request)
        self._appended[request.job_id] = after - before

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
        rows, source = getattr(job, "output_rows", None), ROWS_FROM_JOB
        if self.output_rows_is_table_total:
            rows = self._appended.get(job_id)
            source = ROWS_FROM_TABLE_DELTA if rows is not None else ROWS_UNAVAILABLE
        started, ended = getattr(job, "started", None), getattr(job, "ended", None)
        seconds = (ended - started).total_seconds() if started and ended else None
        return JobReport(
            ObservedJob(ObservedKind.DONE_OK),
            output_rows=rows,
            output_bytes=getattr(job, "output_bytes", None),
            input_files=getattr(job, "input_files", None),
            input_file_bytes=getattr(job, "input_file_bytes", None),
            bad_records=_bad_records(job),
            seconds=seconds,
            rows_source=source,
        )

    # --- tables and datasets ------------------------------------------------------------------
    def table_exists(self, dataset: str, table: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self.client.get_table(self._table_ref(dataset, table))
        except NotFound:
            return False
        return True

    def table_row_count(self, dataset: str, table: str) -> int | None:
        """Rows in the table from its metadata (free; kbqe never streams, so no buffer is
        left out); ``None`` when the table does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            return int(self.client.get_table(self._table_ref(dataset, table)).num_rows or 0)
        except NotFound:
            return None

    def ensure_dataset(self, dataset: str) -> None:
        from google.cloud import bigquery

        ref = bigquery.Dataset(f"{self.project}.{dataset}")
        if self.location:
            ref.location = self.location
        ref.labels = {"pipeline": PIPELINE_LABEL}
        self.client.create_dataset(ref, exists_ok=True)

    # --- checks -------------------------------------------------------------------------------
    def duplicate_offsets(
        self, dataset: str, table: str, key_columns: Sequence[str], date_column: str,
        since: date, limit: int = 10,
    ) -> DuplicateOffsets:
        """Kafka positions present more than once in the partitions since ``since`` — a query
        that is billed for the bytes of the key columns it scans (capped by
        ``max_bytes_billed``)."""
        from google.cloud import bigquery

        if len(key_columns) != 3:
            raise ValueError(f"expected (topic, partition, offset) columns, got {key_columns}")
        topic, partition, offset = (f"`{c}`" for c in key_columns)
        sql = (
            f"SELECT {topic}, {partition}, {offset}, COUNT(*) AS copies "
            f"FROM `{self._table_ref(dataset, table)}` "
            f"WHERE `{date_column}` >= DATE '{since.isoformat()}' "
            f"GROUP BY {topic}, {partition}, {offset} HAVING COUNT(*) > 1 "
            f"ORDER BY copies DESC LIMIT {int(limit)}"
        )
        config = bigquery.QueryJobConfig(
            labels={"pipeline": PIPELINE_LABEL}, maximum_bytes_billed=self.max_bytes_billed
        )
        job = self.client.query(sql, job_config=config, location=self.location)
        rows = tuple((str(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in job.result())
        return DuplicateOffsets(rows, getattr(job, "total_bytes_processed", None))


def _bad_records(job: Any) -> int | None:
    stats = getattr(job, "_properties", {}).get("statistics", {}).get("load", {})
    value = stats.get("badRecords")
    return int(value) if value is not None else None


class BigQueryResource(dg.ConfigurableResource):
    """BigQuery for load jobs and checks. Production uses Application Default Credentials;
    the local stack points ``api_endpoint`` at the emulator with anonymous credentials."""

    project: str = Field(description="GCP project that runs the load jobs and owns the datasets.")
    location: str | None = Field(
        default=None, description="Dataset and job location (US, EU, europe-west1, ...)."
    )
    api_endpoint: str | None = Field(
        default=None, description="API endpoint override: the local BigQuery emulator."
    )
    anonymous_credentials: bool = Field(
        default=False, description="No credentials at all (the local emulator only)."
    )
    output_rows_is_table_total: bool = Field(
        default=False,
        description=(
            "Emulator gap: its outputRows is the table total after the load. When true the "
            "rows a job appended are measured as a before/after row count (local stack only)."
        ),
    )
    add_columns_before_load: bool = Field(
        default=False,
        description=(
            "Emulator gap: it ignores ALLOW_FIELD_ADDITION. When true, columns that a newer "
            "schema adds are added with ALTER TABLE before the load (local stack only)."
        ),
    )
    max_bytes_billed: int = Field(
        default=10 * 1024**3,
        description="Cap on the bytes billed by the opt-in duplicate-offset check query.",
    )

    def client(self) -> Any:
        from google.cloud import bigquery

        options: dict[str, Any] = {"project": self.project, "location": self.location}
        if self.anonymous_credentials:
            from google.auth.credentials import AnonymousCredentials

            options["credentials"] = AnonymousCredentials()
        if self.api_endpoint:
            options["client_options"] = {"api_endpoint": self.api_endpoint}
        return bigquery.Client(**options)

    def loads(self) -> GoogleBigQueryLoads:
        if not self.project:
            raise LoadError("the bigquery resource needs a project")
        return GoogleBigQueryLoads(
            self.client(), location=self.location,
            output_rows_is_table_total=self.output_rows_is_table_total,
            add_columns_before_load=self.add_columns_before_load,
            max_bytes_billed=self.max_bytes_billed,
        )


__all__ = [
    "BigQueryLoads",
    "BigQueryResource",
    "DuplicateOffsets",
    "GoogleBigQueryLoads",
    "JobReport",
    "LoadRequest",
    "SubmitResult",
    "job_labels",
    "load_job_config",
]
