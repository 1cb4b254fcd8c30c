"""A fake ``google.cloud.bigquery.Client`` at the boundary, behaving like BigQuery where the
local emulator does not (DESIGN.md §7):

- a second insert with an existing job id answers **409 Conflict** and loads nothing;
- Avro fields are matched to columns **by name**; a missing NULLABLE column reads NULL;
- **ALLOW_FIELD_ADDITION** adds new fields as NULLABLE columns (without it the job fails);
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

Row = dict[str, Any]


@dataclass
class FakeTable:
    columns: list[str]
    rows: list[Row] = field(default_factory=list)
    time_partitioning_field: str | None = None
    time_partitioning_type: str | None = None
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    labels: dict[str, str] = field(default_factory=dict)
    etag: str | None = None

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    @property
    def schema(self) -> list[Any]:
        """Names are all the fake tracks: every column reads as a NULLABLE STRING."""
        from google.cloud import bigquery

        return [bigquery.SchemaField(name, "STRING") for name in self.columns]


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
            names = [f.name for f in config.schema] if config.schema else _field_names(files[0])
            partitioning = config.time_partitioning.field if config.time_partitioning else None
            table = FakeTable(
                names,
                time_partitioning_field=partitioning,
                time_partitioning_type=(
                    config.time_partitioning.type_ if config.time_partitioning else None
                ),
            )
        allow_addition = "ALLOW_FIELD_ADDITION" in (config.schema_update_options or [])
        rows: list[Row] = []
        for reader in files:
            new = [n for n in _field_names(reader) if n not in table.columns]
            if new and not allow_addition:
                raise BadRequest(f"Provided Schema does not match Table. Cannot add fields {new}")
            table.columns += new
            rows += list(reader)
        self.tables[job.destination] = table
        table.rows += [{c: row.get(c) for c in table.columns} for row in rows]
        return len(rows)

    # --- tables and datasets ------------------------------------------------------------------
    def get_table(self, ref):
        _, dataset, table = str(ref).split(".")
        if (dataset, table) not in self.tables:
            raise NotFound(f"Not found: Table {ref}")
        return self.tables[(dataset, table)]

    def update_table(self, table, fields):
        """Only labels, as BigQuery patches them: a ``None`` value removes its key."""
        if list(fields) != ["labels"]:
            raise NotImplementedError(f"the fake updates only a table's labels, not {fields}")
        table.labels = {k: v for k, v in table.labels.items() if v is not None}
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


def _field_names(reader: Any) -> list[str]:
    return [f["name"] for f in reader.writer_schema["fields"]]
