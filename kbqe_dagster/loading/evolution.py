"""Before a load job is submitted, its table takes the schema of the job's files: a column
whose field the files lack (a newer schema deleted it) or make optional is relaxed to NULLABLE,
a field they add becomes a NULLABLE column, and a field whose type or repetition changed is
refused, naming the table, the column and what to do (core/load/evolution.py decides; the
BigQuery resource applies it by a metadata update, free).

Why not leave it to the load job's ``ALLOW_FIELD_RELAXATION``: a load of a file that lacks a
REQUIRED column is refused ("Field ... is missing in new schema"; Kafka Connect's BigQuery sink
patches the table before its load jobs for the same reason), so the job would fail, be retried
and quarantine its files; a metadata update first is free and leaves nothing to the option. A refusal here fails the attempt
before any job exists, with the message the quarantine note then carries.

One metadata read and one header read per table and schema id per coordinator run: the
files of one schema id of a table share their schema (file names carry the id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kbqe_dagster.core.load.evolution import plan_schema_change
from kbqe_dagster.core.load.state import LoadJobRecord
from kbqe_dagster.core.record.column_descriptions import describe_columns
from kbqe_dagster.loading.avro_header import read_avro_schema
from kbqe_dagster.resources.bigquery import BigQueryLoads
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro
from kbqe_dagster.resources.staging_store import StagingStore


class TableEvolution:
    """Makes each table of a coordinator run ready for its jobs' files (module docstring)."""

    def __init__(
        self,
        store: StagingStore,
        bigquery: BigQueryLoads,
        descriptions: Callable[[str, str], Mapping[str, str]] | None = None,
    ) -> None:
        self.store = store
        self.bigquery = bigquery
        self.descriptions = descriptions or (lambda dataset, table: {})
        """Fixed descriptions of kbqe's columns of a table (TableLayout.column_descriptions)."""
        self._ready: set[tuple[str, str, int]] = set()

    def prepare(self, job: LoadJobRecord) -> Mapping[str, Any] | None:
        """Evolves ``job``'s table for its files; returns the files' Avro schema when the
        load request must carry it (a table to create, or the emulator's path), else None.

        Raises :class:`SchemaChangeRefusedError` for a change BigQuery cannot make."""
        dataset, table = job.table_id
        key = (dataset, table, job.schema_id)
        ready = key in self._ready
        if ready and not self.bigquery.wants_file_schema:
            return None
        schema = read_avro_schema(self.store, job.files[0])
        if ready:
            return schema
        staged = describe_columns(
            bigquery_schema_from_avro(schema, self.store.uri(job.files[0])),
            schema,
            self.descriptions(dataset, table),
        )
        name = f"{dataset}.{table}"
        evolved = self.bigquery.evolve_table(
            dataset, table, lambda current: plan_schema_change(name, current, staged)
        )
        if evolved is None:
            return schema  # no table yet: the load creates it from this schema
        self._ready.add(key)
        return schema if self.bigquery.wants_file_schema else None
