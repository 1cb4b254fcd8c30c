"""The local BigQuery emulator's load path: BigQuery's behaviour, rebuilt where the emulator
differs (DESIGN.md §7; each gap is pinned by a ``test_emulator_gap_*`` contract test).

* **Columns by name.** BigQuery matches an Avro file's fields to a table's columns by name,
  so a file of an older schema loads into a table that a newer schema widened (the missing
  columns read NULL). The emulator matches by position and refuses such a file. Here a load
  into an existing table goes through a temporary table created from the file's own schema,
  then ``INSERT INTO table (columns) SELECT columns FROM temporary`` names every column.
* **Field addition.** The emulator ignores ALLOW_FIELD_ADDITION: the columns a newer schema
  adds are added with ``ALTER TABLE`` before the load, as BigQuery would add them in the load
  (records, arrays and maps too, with their BigQuery type).
* **REQUIRED not enforced.** The emulator stores a NULL in a REQUIRED column, where BigQuery
  refuses the row; the columns a newer schema's files lack are relaxed all the same
  (``evolve_table``, a metadata update the emulator keeps), so its tables read as BigQuery's.
* **Avro maps.** BigQuery loads an Avro map as a REPEATED RECORD of ``key``/``value``; the
  emulator's DuckDB reads it as a MAP and cannot cast that into the table's list of structs,
  so any load of a file with a map fails there, the creating one included (it creates the
  table, then its insert fails). For such files the temporary table is created by DDL with
  the maps as ``MAP<STRING, T>``, and the by-name INSERT converts every column that holds a
  map at any depth (``MAP_ENTRIES``, ``LIST_TRANSFORM`` over arrays and map values,
  ``STRUCT`` for records; built from the files' Avro schema by ``emulator_maps.py``). A table
  such files would create is created first, with the schema the creating load carries, then
  loaded by name: the column is BigQuery's REPEATED RECORD whichever load created the table,
  and reads back as ``[{key, value}, ...]``.
* **Table options of a creating load.** BigQuery creates the table with the load's time
  partitioning, clustering and destination table properties (labels, description); the
  emulator creates it bare, but keeps them when they come by a table update. A creating load
  of a table partitioned otherwise than the default (DAY on ``_event_date``) or with ``tables:`` options
  (clustering, expiration, labels, description, partition filter) is followed by that update, so the table
  reads back as on BigQuery and the next load finds it in step (its partitioning too: the
  load coordinator refuses a table partitioned otherwise than configured).
* **Rows appended.** The emulator's ``outputRows`` is the table's total after a load. The
  by-name INSERT reports the rows it added itself (DML statistics, readable from any process);
  a load that creates its table appends to an empty table, so the total is its figure.

**Exactly once is kept** because the job id the coordinator recorded is given to the *last*
step, the INSERT (or the creating load). The coordinator resubmits a recorded id only when
BigQuery does not know it; a process killed after the temporary load but before the INSERT
leaves that id unknown, and the resubmission redoes the temporary load (its table is
replaced) before the one INSERT. A temporary table left by a killed process is replaced by
the next attempt of the same job and is otherwise harmless.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import replace
from typing import Any

from kbqe_dagster.core.load.evolution import SchemaChange
from kbqe_dagster.core.load.lifecycle import ObservedJob, ObservedKind, classify_submit
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.resources.bigquery.emulator_maps import (
    holds_map,
    select_list,
    sql_type,
    staging_columns_ddl,
)
from kbqe_dagster.resources.bigquery.google_client import GoogleBigQueryLoads
from kbqe_dagster.resources.bigquery.jobs import (
    ROWS_FROM_CREATED_TABLE,
    ROWS_FROM_DML,
    ROWS_UNAVAILABLE,
    JobReport,
    LoadRequest,
    SubmitResult,
    load_job_config,
    new_table,
)
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

log = logging.getLogger(__name__)

TEMP_TABLE_PREFIX = "_kbqe_load_"
"""Temporary tables of by-name loads: ``<dataset>._kbqe_load_<job id>``."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def temp_table_name(job_id: str) -> str:
    return (TEMP_TABLE_PREFIX + _UNSAFE.sub("_", job_id))[:1024]


class EmulatorBigQueryLoads(GoogleBigQueryLoads):
    """:class:`BigQueryLoads` for the local BigQuery emulator (module docstring)."""

    wants_file_schema = True
    """Every load carries its files' schema: it names the columns of the by-name INSERT and
    the columns to add before it."""

    def __init__(self, client: Any, **options: Any) -> None:
        super().__init__(client, **options)
        self._created: dict[str, int] = {}
        """Rows of the creating loads this process submitted, by job id."""

    # --- load jobs ----------------------------------------------------------------------------
    def submit_load(self, request: LoadRequest) -> SubmitResult:
        if request.avro_schema is None:
            raise ValueError(
                f"load job {request.job_id}: the emulator path needs the files' "
                "Avro schema (wants_file_schema)"
            )
        try:
            existing = self._existing_columns(request)
            if existing is None and not self._holds_maps(request):
                return self._load_creating_the_table(request)
            if existing is None:
                # DuckDB cannot cast the files' maps into the table's repeated records, so
                # the creating load would create the table and then fail: create it, then
                # load by name, which converts them (emulator_maps.py).
                self._create_table(request)
            else:
                self._add_new_columns(request, existing)
            return self._load_by_name(request)
        except Exception as error:  # noqa: BLE001 - classified like BigQuery's own answers
            return self._refused(request, error)

    reports_bytes_processed = False  # it answers 0 for every query

    def _existing_columns(self, request: LoadRequest) -> set[str] | None:
        found = self.table_schema(request.dataset, request.table)
        return None if found is None else {f.name.lower() for f in found[0]}

    def _schema(self, dataset: str, table: str, meta: Any) -> list[Any]:
        # The table's metadata does not list columns added by ALTER TABLE; a query's result
        # schema does (without modes: NULLABLE, as every column the emulator path adds).
        return list(
            self.client.query(f"SELECT * FROM `{dataset}.{table}` LIMIT 0", job_retry=None)
            .result()
            .schema
        )

    def _load_creating_the_table(self, request: LoadRequest) -> SubmitResult:
        job = self.client.load_table_from_uri(
            list(request.source_uris),
            self._table_ref(request.dataset, request.table),
            job_id=request.job_id,
            job_config=load_job_config(request),
            location=self.location,
        )
        try:
            job.result(timeout=self.job_timeout_s)
        except Exception:  # noqa: BLE001 - a failed job appended nothing; read when polled
            return SubmitResult(classify_submit(200))
        # The table did not exist: everything in it now was appended by this job.
        self._created[request.job_id] = self.table_row_count(request.dataset, request.table) or 0
        self._record_created_options(request)
        return SubmitResult(classify_submit(200))

    def _record_created_options(self, request: LoadRequest) -> None:
        """What BigQuery's creating load records and the emulator's does not (module
        docstring), given to the new table by one update: a table with options, or partitioned
        otherwise than DAY on the event date (the default, which nothing reads back)."""
        options = bool(
            request.clustering_fields
            or request.table_labels
            or request.description is not None
            or request.partition_expiration_days
            or request.require_partition_filter
        )
        # A DAY table on the event date without options is what every test creates: the
        # coordinator never compares its partitioning (it states none), so the emulator's bare
        # table serves, and its creating load costs no metadata round trips.
        default = request.partitioning is Partitioning.DAY and not request.custom_partition_column
        if not options and (default or request.partitioning is Partitioning.NONE):
            return
        from google.cloud import bigquery

        ref = self._table_ref(request.dataset, request.table)
        fields = ["time_partitioning", "clustering_fields", "labels", "description"]
        if request.require_partition_filter:
            fields.append("require_partition_filter")
        # Bounded: the emulator answers some tables' updates with a 500 every time, which the
        # default retry would repeat for 10 minutes while holding the load pool.
        retry = bigquery.DEFAULT_RETRY.with_deadline(30)
        try:
            meta = self.client.get_table(ref, retry=retry)
            wanted = new_table(request, ref)
            for name in fields:
                setattr(meta, name, getattr(wanted, name))
            self.client.update_table(meta, fields, retry=retry)
        except Exception as error:  # noqa: BLE001 - the rows are loaded; only metadata missing
            if options:
                raise
            log.warning(
                "%s.%s: could not record the partitioning of the created table (emulator): %s",
                request.dataset,
                request.table,
                error,
            )

    def _create_table(self, request: LoadRequest) -> None:
        """The empty table the creating load would make (same schema, partitioning and
        clustering), for files whose maps that load cannot insert (emulator_maps.py)."""
        from google.cloud import bigquery

        table = new_table(request, self._table_ref(request.dataset, request.table))
        log.info(
            "%s.%s: creating the table before a load of files with maps (emulator)",
            request.dataset,
            request.table,
        )
        # A bounded retry: the emulator answers some schemas with a 500 every time (a nested
        # field named like a DuckDB keyword), which the default retry would repeat for 10
        # minutes while holding the load pool; the coordinator resubmits a transient answer.
        self.client.create_table(
            table, exists_ok=True, retry=bigquery.DEFAULT_RETRY.with_deadline(30)
        )

    def _add_new_columns(self, request: LoadRequest, existing: set[str]) -> None:
        ref = f"{request.dataset}.{request.table}"
        for column in self._file_columns(request):
            if column["name"].lower() in existing:
                continue
            kind = sql_type(column)
            log.info("%s: adding column %s %s (emulated field addition)", ref, column["name"], kind)
            # IF NOT EXISTS: two loads of the newer schema may race for the same column.
            self.client.query(
                f"ALTER TABLE `{ref}` ADD COLUMN IF NOT EXISTS `{column['name']}` {kind}",
                job_retry=None,
            ).result()

    def _before_schema_update(self, dataset: str, table: str, change: SchemaChange) -> None:
        # The emulator stores a column added by ALTER TABLE and appends through the Storage
        # Write API by the schema tables.patch records: a new column needs both, the storage
        # first (the gap is pinned in resources/test_storage_write_on_local_stack.py).
        # Relaxing is the metadata alone: it never enforces REQUIRED
        # (test_emulator_gap_required_mode_not_enforced).
        ref = f"{dataset}.{table}"
        for column in change.schema:
            if column["name"] in change.added:
                self.client.query(
                    f"ALTER TABLE `{ref}` ADD COLUMN IF NOT EXISTS `{column['name']}` "
                    f"{sql_type(column)}",
                    job_retry=None,
                ).result()

    def _load_by_name(self, request: LoadRequest) -> SubmitResult:
        temp = temp_table_name(request.job_id)
        temp_ref = self._table_ref(request.dataset, temp)
        self.client.delete_table(temp_ref, not_found_ok=True)  # a killed attempt's leftover
        temp_request = replace(
            request,
            table=temp,
            partition_expiration_days=None,
            table_labels={},
            description=None,
            require_partition_filter=False,  # read whole by the INSERT
        )
        columns = self._file_columns(request, keep_maps=True)
        if any(holds_map(c) for c in columns):
            # The files' maps stay maps in the temporary table; the INSERT converts them.
            self.client.query(
                f"CREATE TABLE `{request.dataset}.{temp}` ({staging_columns_ddl(columns)})",
                job_retry=None,
                location=self.location,
            ).result()
            temp_request = replace(temp_request, avro_schema=None)
        staged = self.client.load_table_from_uri(
            list(request.source_uris),
            temp_ref,
            job_id=f"{request.job_id}-by-name-{uuid.uuid4().hex[:8]}",
            job_config=load_job_config(temp_request),
            location=self.location,
        )
        try:
            staged.result(timeout=self.job_timeout_s)
        except Exception as error:  # noqa: BLE001 - the file itself was refused
            self.client.delete_table(temp_ref, not_found_ok=True)
            log.warning(
                "load job %s (%s.%s): the files were refused: %s",
                request.job_id,
                request.dataset,
                request.table,
                error,
            )
            return SubmitResult(classify_submit(400), 400, f"files refused: {error}")
        names = ", ".join(f"`{c['name']}`" for c in columns)
        insert = self.client.query(
            f"INSERT INTO `{request.dataset}.{request.table}` ({names}) "
            f"SELECT {select_list(columns)} FROM `{request.dataset}.{temp}`",
            job_id=request.job_id,
            job_retry=None,
            location=self.location,
        )
        try:
            insert.result(timeout=self.job_timeout_s)
        except Exception:  # noqa: BLE001 - its error is the job's, read when polled
            pass
        self.client.delete_table(temp_ref, not_found_ok=True)
        return SubmitResult(classify_submit(200))

    @staticmethod
    def _file_columns(request: LoadRequest, *, keep_maps: bool = False) -> list[dict]:
        return bigquery_schema_from_avro(
            dict(request.avro_schema or {}), request.job_id, keep_maps=keep_maps
        )

    def _holds_maps(self, request: LoadRequest) -> bool:
        return any(holds_map(c) for c in self._file_columns(request, keep_maps=True))

    # --- reports ------------------------------------------------------------------------------
    def _done_report(self, job_id: str, job: Any) -> JobReport:
        report = super()._done_report(job_id, job)
        dml_rows = getattr(job, "num_dml_affected_rows", None)
        if getattr(job, "job_type", None) == "query" and dml_rows is not None:
            rows, source = int(dml_rows), ROWS_FROM_DML
        elif job_id in self._created:
            rows, source = self._created[job_id], ROWS_FROM_CREATED_TABLE
        else:
            # A creating load submitted by an earlier process: its outputRows is the table's
            # total now, which later loads may have grown, so there is no honest figure.
            rows, source = None, ROWS_UNAVAILABLE
        return replace(
            report, observed=ObservedJob(ObservedKind.DONE_OK), output_rows=rows, rows_source=source
        )
