"""A fake ``google.cloud.bigquery.Client`` at the boundary, behaving like BigQuery where the
local emulator does not (DESIGN.md §7):

- a second insert with an existing job id answers **409 Conflict** and loads nothing;
- Avro fields are matched to columns **by name**; a missing NULLABLE column reads NULL;
- **ALLOW_FIELD_ADDITION** adds new fields as NULLABLE columns (without it the job fails);
- a file that lacks a REQUIRED column's field, or has a field of another type than its
  column, fails the job ("Field x is missing in new schema": a REQUIRED column is never
  relaxed by a load whose file lacks the field; the table must be relaxed first);
- ``update_table(table, ["schema"])`` takes only what tables.patch takes: no column dropped,
  no type changed, a mode only relaxed (REQUIRED to NULLABLE), no REQUIRED column added;
- ``output_rows`` is the rows *this* job appended;
- a missing table is created from the job's ``schema`` or, like BigQuery, from the file.

It reads the source files through ``read(uri)`` (a local staging directory in the tests) and
lets a test hold jobs RUNNING, fail them, hide a job from ``get_job`` (a lagging read) or
refuse an insert without an answer. Only what the load resource calls is implemented.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
from google.api_core.exceptions import BadRequest, Conflict, NotFound, ServiceUnavailable

from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

Row = dict[str, Any]


@dataclass
class FakeTable:
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    fields: dict[str, dict] = field(default_factory=dict)
    """Column name → its REST form (type, mode); a column not listed is a NULLABLE STRING."""
    proposed: list[dict] = field(default_factory=list)
    """The schema assigned to ``schema``, until ``update_table`` applies it."""
    time_partitioning_field: str | None = None
    time_partitioning_type: str | None = None
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    labels: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    description: str | None = None
    clustering_fields: list[str] | None = None
    time_partitioning: Any = None
    """The creating load's ``TimePartitioning`` (type, field, expiration), as BigQuery keeps it."""
    require_partition_filter: bool | None = None
    """The creating load's ``timePartitioning.requirePartitionFilter``, as the table's own."""

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    @property
    def schema(self) -> list[Any]:
        from google.cloud import bigquery

        return [bigquery.SchemaField.from_api_repr(self.field(name)) for name in self.columns]

    @schema.setter
    def schema(self, value: list[Any]) -> None:
        self.proposed = [f.to_api_repr() for f in value]  # applied by update_table

    def field(self, name: str) -> dict:
        return self.fields.get(name) or {"name": name, "type": "STRING", "mode": "NULLABLE"}


@dataclass
class FakeJob:
    job_id: str
    destination: tuple[str, str]
    uris: list[str]
    config: Any
    state: str = "RUNNING"
    error_result: dict | None = None
    output_rows: int | None = None
    started: datetime | None = None
    ended: datetime | None = None
    output_bytes: int | None = None
    input_files: int | None = None
    input_file_bytes: int | None = None
    _properties: dict = field(default_factory=dict)

    def result(self, timeout: float | None = None) -> FakeJob:
        if self.state != "DONE":
            raise TimeoutError(f"fake job {self.job_id} is still {self.state}")
        if self.error_result:
            raise BadRequest(self.error_result["message"])
        return self


@dataclass
class _QueryJob:
    rows: list[tuple]
    total_bytes_processed: int = 0

    def result(self) -> list[tuple]:
        return self.rows


class FakeBigQueryClient:
    project = "fake-project"

    def __init__(self, read: Callable[[str], bytes] = lambda uri: Path(uri).read_bytes()) -> None:
        self.read = read
        self.datasets: set[str] = set()
        self.tables: dict[tuple[str, str], FakeTable] = {}
        self.jobs: dict[str, FakeJob] = {}
        self.inserts: list[str] = []  # every insert attempt's job id, 409s included
        self.hold = False  # True: jobs stay RUNNING until finish()
        self.fail_tables: dict[tuple[str, str], int] = {}  # table → jobs that will fail
        self.hidden: set[str] = set()  # get_job answers 404 once for these
        self.unanswered_inserts = 0  # inserts that raise 503 before anything is created
        self.on_insert: Callable[[str], None] | None = None
        self.schema_updates: list[list[dict]] = []  # every tables.patch of a schema
        self.table_reads: list[tuple[str, str]] = []  # every get_table, by (dataset, table)
        self.table_updates: list[tuple[tuple[str, ...], dict[str, Any]]] = []  # mask, values

    # --- jobs ---------------------------------------------------------------------------------
    def load_table_from_uri(self, uris, destination, job_id=None, job_config=None, location=None):
        self.inserts.append(job_id)
        if self.on_insert is not None:
            self.on_insert(job_id)
        if self.unanswered_inserts:
            self.unanswered_inserts -= 1
            raise ServiceUnavailable("backend error")
        if job_id in self.jobs:
            raise Conflict(f"Already Exists: Job {self.project}:{job_id}")
        _, dataset, table = destination.split(".")
        job = FakeJob(job_id, (dataset, table), list(uris), job_config, started=datetime.now(UTC))
        self.jobs[job_id] = job
        if not self.hold:
            self._run(job)
        return job

    def finish(self) -> None:
        for job in self.jobs.values():
            if job.state != "DONE":
                self._run(job)

    def get_job(self, job_id, location=None):
        if job_id in self.hidden:
            self.hidden.discard(job_id)
            raise NotFound(f"Not found: Job {self.project}:{job_id}")
        if job_id not in self.jobs:
            raise NotFound(f"Not found: Job {self.project}:{job_id}")
        return self.jobs[job_id]

    def _run(self, job: FakeJob) -> None:
        job.state = "DONE"
        job.ended = (job.started or datetime.now(UTC)) + timedelta(seconds=2)
        if self.fail_tables.get(job.destination, 0) > 0:
            self.fail_tables[job.destination] -= 1
            job.error_result = {"reason": "backendError", "message": "injected failure"}
            return
        try:
            job.output_rows = self._load(job)
        except BadRequest as error:
            job.error_result = {"reason": "invalid", "message": str(error.message)}

    def _load(self, job: FakeJob) -> int:
        config = job.config
        files = [fastavro.reader(io.BytesIO(self.read(uri))) for uri in job.uris]
        table = self.tables.get(job.destination)
        if table is None:
            if job.destination[0] not in self.datasets:
                raise BadRequest(f"Not found: Dataset {job.destination[0]}")
            columns = (
                [f.to_api_repr() for f in config.schema]
                if config.schema
                else _file_columns(files[0])
            )
            partitioning = config.time_partitioning.field if config.time_partitioning else None
            properties = config._properties["load"].get("destinationTableProperties", {})
            table = FakeTable(
                [c["name"] for c in columns],
                fields={c["name"]: c for c in columns},
                time_partitioning_field=partitioning,
                time_partitioning_type=(
                    config.time_partitioning.type_ if config.time_partitioning else None
                ),
                labels=dict(properties.get("labels", {})),
                description=properties.get("description"),
                clustering_fields=config.clustering_fields,
                time_partitioning=config.time_partitioning,
                require_partition_filter=(
                    config.time_partitioning._properties.get("requirePartitionFilter")
                    if config.time_partitioning
                    else None
                ),
            )
        allow_addition = "ALLOW_FIELD_ADDITION" in (config.schema_update_options or [])
        rows: list[Row] = []
        for reader in files:
            staged = {c["name"]: c for c in _file_columns(reader)}
            new = [n for n in staged if n not in table.columns]
            if new and not allow_addition:
                raise BadRequest(f"Provided Schema does not match Table. Cannot add fields {new}")
            for name in table.columns:
                column = table.field(name)
                if name not in staged and column.get("mode") == "REQUIRED":
                    raise BadRequest(
                        "Provided Schema does not match Table. "
                        f"Field {name} is missing in new schema"
                    )
                if name in staged and staged[name]["type"] != column["type"]:
                    raise BadRequest(
                        "Provided Schema does not match Table. Field "
                        f"{name} has changed type from {column['type']} to {staged[name]['type']}"
                    )
            for name in new:
                mode = "REPEATED" if staged[name]["mode"] == "REPEATED" else "NULLABLE"
                table.fields[name] = {**staged[name], "mode": mode}
            table.columns += new
            rows += list(reader)
        self.tables[job.destination] = table
        table.rows += [{c: row.get(c) for c in table.columns} for row in rows]
        return len(rows)

    # --- tables and datasets ------------------------------------------------------------------
    def get_table(self, ref):
        _, dataset, table = str(ref).split(".")
        self.table_reads.append((dataset, table))
        if (dataset, table) not in self.tables:
            raise NotFound(f"Not found: Table {ref}")
        return self.tables[(dataset, table)]

    _UPDATABLE = (
        "labels",
        "description",
        "clustering_fields",
        "time_partitioning",
        "require_partition_filter",
    )

    def update_table(self, table, fields):
        """The schema, with tables.patch's rules (module docstring), or the fields kbqe's
        table options change, recorded with their field mask; labels as BigQuery patches
        them (a ``None`` value removes its key)."""
        if list(fields) == ["schema"]:
            return self._patch_schema(table)
        if not set(fields) <= set(self._UPDATABLE):
            raise NotImplementedError(
                f"the fake updates a schema or {self._UPDATABLE}, not {fields}"
            )
        self.table_updates.append((tuple(fields), {f: getattr(table, f) for f in fields}))
        table.labels = {k: v for k, v in table.labels.items() if v is not None}
        return table

    def _patch_schema(self, table: FakeTable) -> FakeTable:
        proposed = {c["name"]: c for c in table.proposed}
        self.schema_updates.append(table.proposed)
        for name in table.columns:
            was, now = table.field(name), proposed.get(name)
            if now is None:
                raise BadRequest(f"Provided Schema does not match Table. Field {name} is missing")
            if now["type"] != was["type"]:
                raise BadRequest(f"Field {name} has changed type from {was['type']}")
            if was.get("mode", "NULLABLE") != now.get("mode", "NULLABLE") and (
                was.get("mode"),
                now.get("mode"),
            ) != ("REQUIRED", "NULLABLE"):
                raise BadRequest(f"Field {name} has changed mode from {was.get('mode')}")
        for name, column in proposed.items():
            if name not in table.columns and column.get("mode") == "REQUIRED":
                raise BadRequest(f"Cannot add required field {name}")
        table.columns = list(proposed)
        table.fields = dict(proposed)
        return table

    def create_dataset(self, dataset, exists_ok=False):
        self.datasets.add(dataset.dataset_id)
        return dataset

    # --- queries: only the duplicate-offset query of the resource --------------------------
    _DUPLICATES = re.compile(
        r"SELECT `(\w+)`, `(\w+)`, `(\w+)`, COUNT\(\*\) AS copies FROM `[\w-]+\.(\w+)\.(\w+)` "
        r"WHERE `(\w+)` >= DATE '([\d-]+)'"
    )

    def query(self, sql, job_config=None, location=None, **kwargs):
        match = self._DUPLICATES.match(sql)
        if match is None:
            raise NotImplementedError(f"the fake answers only the duplicate-offset query: {sql}")
        topic, partition, offset, dataset, table, date_column, since = match.groups()
        table_rows = self.tables[(dataset, table)].rows if (dataset, table) in self.tables else []
        copies: dict[tuple, int] = {}
        for row in table_rows:
            if str(row.get(date_column)) >= since:
                key = (row[topic], row[partition], row[offset])
                copies[key] = copies.get(key, 0) + 1
        rows = [(*k, n) for k, n in sorted(copies.items()) if n > 1]
        return _QueryJob(rows)

    def rows(self, dataset: str, table: str) -> list[Row]:
        """The table's rows as a query would return them: every column, NULL when absent."""
        found = self.tables[(dataset, table)]
        return [{c: row.get(c) for c in found.columns} for row in found.rows]


def _file_columns(reader: Any) -> list[dict]:
    """The columns BigQuery derives from a file's Avro schema."""
    return bigquery_schema_from_avro(reader.writer_schema, "fake load")
