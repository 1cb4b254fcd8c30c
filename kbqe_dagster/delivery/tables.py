"""The destination table of Storage Write appends, made ready before any row of a range is
appended: the dataset and the table exist (created with the layout a load would give it:
columns from the file schema, time partitioning, clustering), and the columns a newer schema
adds exist before rows that carry them arrive (the load path gets both from its load job's
CREATE_IF_NEEDED and ALLOW_FIELD_ADDITION; appends have neither).

Built in the stage task from picklable :class:`TableKeeperSettings`; one keeper per task
remembers what it made ready, so a range pays one metadata read per table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.config.table_layout import TableLayout
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.bigquery.jobs import LoadRequest, load_job_config
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

log = logging.getLogger(__name__)

# Kafka's legal topic characters: a topic is written into the query text as a literal.
_KAFKA_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


@dataclass(frozen=True)
class TableKeeperSettings:
    """How a stage task reaches BigQuery's table metadata: the fields of the ``bigquery``
    resource (resources/bigquery/resource.py), picklable."""

    project: str
    location: str | None = None
    api_endpoint: str | None = None
    anonymous_credentials: bool = False
    emulator: bool = False
    partition_expiration_days: int | None = None
    create_datasets: bool = True
    # The resource's base64 service account key (None: ADC); travels to the task, never shown.
    gcp_credentials: str | None = field(default=None, repr=False)

    @classmethod
    def of(
        cls,
        resource: BigQueryResource,
        partition_expiration_days: int | None = None,
        create_datasets: bool = True,
    ) -> TableKeeperSettings:
        return cls(
            resource.project,
            resource.location,
            resource.api_endpoint,
            resource.anonymous_credentials,
            resource.emulator,
            partition_expiration_days,
            create_datasets,
            resource.gcp_credentials,
        )

    def keeper(self) -> BigQueryTableKeeper:
        resource = BigQueryResource(
            project=self.project,
            location=self.location,
            api_endpoint=self.api_endpoint,
            anonymous_credentials=self.anonymous_credentials,
            emulator=self.emulator,
            gcp_credentials=self.gcp_credentials,
        )
        return BigQueryTableKeeper(resource.loads(), self)


@dataclass
class BigQueryTableKeeper:
    """Makes tables ready for appends (module docstring)."""

    loads: Any  # GoogleBigQueryLoads or EmulatorBigQueryLoads
    settings: TableKeeperSettings
    ready: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    def ensure(
        self, dataset: str, table: str, file_schema: Mapping[str, Any], layout: TableLayout
    ) -> None:
        """``dataset.table`` exists and has every column of ``file_schema``."""
        columns = bigquery_schema_from_avro(dict(file_schema), f"{dataset}.{table}")
        wanted = frozenset(c["name"].lower() for c in columns)
        if wanted <= self.ready.get((dataset, table), frozenset()):
            return
        request = LoadRequest(
            job_id="",
            dataset=dataset,
            table=table,
            source_uris=(),
            partition_field=layout.partition_column,
            partition_expiration_days=self.settings.partition_expiration_days,
            avro_schema=file_schema,
            clustering_fields=layout.clustering,
            partitioning=layout.partitioning,
        )
        # The metadata (free), not a query: on the emulator it is also the schema appends are
        # made by, which must hold every column (see _add_columns).
        found = self._metadata_schema(dataset, table)
        if found is None:
            if self.settings.create_datasets:
                self.loads.ensure_dataset(dataset)
            self._create(request)
            existing = wanted
        else:
            existing = frozenset(f.name.lower() for f in found[0])
            if not wanted <= existing:
                self._add_columns(request, columns, existing)
                existing = existing | wanted
        self.ready[(dataset, table)] = existing

    def offsets_present(
        self,
        dataset: str,
        table: str,
        columns: tuple[str, str, str],
        topic: str,
        partition: int,
        first: int,
        last: int,
    ) -> frozenset[int]:
        """The Kafka offsets of ``topic[partition]`` between ``first`` and ``last`` (inclusive)
        that ``dataset.table`` holds rows of (``columns``: the topic, partition and offset
        columns); empty when the table does not exist. A query, billed for the three columns
        it scans: the delivery sink asks only before a range's rows go to a new stream
        (core/protocol/delivery.py, "A stream gone")."""
        from google.api_core.exceptions import NotFound

        topic_col, partition_col, offset_col = columns
        if not set(topic) <= _KAFKA_TOPIC_CHARS:
            raise ValueError(f"{topic!r} is not a Kafka topic name")
        sql = (
            f"SELECT DISTINCT `{offset_col}` FROM `{self.loads.project}.{dataset}.{table}` "
            f"WHERE `{topic_col}` = '{topic}' AND `{partition_col}` = {int(partition)} "
            f"AND `{offset_col}` BETWEEN {int(first)} AND {int(last)}"
        )
        try:
            return frozenset(int(row[0]) for row in self.loads.client.query_and_wait(sql))
        except NotFound:
            return frozenset()

    def _metadata_schema(self, dataset: str, table: str) -> tuple[list, Any] | None:
        """The table's columns from its metadata (free); None when it does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            meta = self.loads.client.get_table(f"{self.loads.project}.{dataset}.{table}")
        except NotFound:
            return None
        return list(meta.schema), getattr(meta, "created", None)

    def _create(self, request: LoadRequest) -> None:
        from google.cloud import bigquery

        config = load_job_config(request)
        table = bigquery.Table(
            f"{self.loads.project}.{request.dataset}.{request.table}", schema=config.schema
        )
        table.time_partitioning = config.time_partitioning
        if request.clustering_fields:
            table.clustering_fields = list(request.clustering_fields)
        log.info(
            "%s.%s: creating the table for Storage Write appends", request.dataset, request.table
        )
        self.loads.client.create_table(table, exists_ok=True)

    def _add_columns(
        self, request: LoadRequest, columns: list[dict], existing: frozenset[str]
    ) -> None:
        from google.cloud import bigquery

        ref = f"{self.loads.project}.{request.dataset}.{request.table}"
        if self.settings.emulator:
            # The emulator stores a column added by ALTER TABLE (its load path's way,
            # resources/bigquery/emulator.py) but appends by the schema tables.patch records:
            # it needs both (the gap is pinned in resources/test_storage_write_on_local_stack.py).
            self.loads._add_new_columns(request, set(existing))
        meta = self.loads.client.get_table(ref)
        known = {f.name.lower() for f in meta.schema}
        added = [
            bigquery.SchemaField.from_api_repr(c) for c in columns if c["name"].lower() not in known
        ]
        if not added:
            return
        log.info(
            "%s: adding column(s) %s before appending rows that carry them",
            ref,
            ", ".join(f.name for f in added),
        )
        meta.schema = list(meta.schema) + added
        self.loads.client.update_table(meta, ["schema"])
