"""The destination table of Storage Write appends, made ready before any row of a range is
appended: the dataset and the table exist (created with the layout a load would give it:
columns from the file schema, time partitioning, clustering, all NULLABLE for a table
configured ``all_columns_nullable``), the columns a newer schema adds exist before rows that
carry them arrive, and a REQUIRED column whose field a newer schema deleted (or made
optional) is NULLABLE before rows without it arrive: the writer's proto descriptor, derived
from the file schema, then simply lacks the field, and the API fills NULL
(core/load/evolution.py). The load path does the same before each load job
(loading/evolution.py).

Built in the stage task from picklable :class:`TableKeeperSettings`; one keeper per task
remembers what it made ready, so a range pays one metadata read per table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kbqe_dagster.core.config.table_layout import TableLayout
from kbqe_dagster.core.load.evolution import plan_schema_change
from kbqe_dagster.core.record.column_descriptions import describe_columns
from kbqe_dagster.core.record.partition_filter import every_partition
from kbqe_dagster.core.record.table_options import TableOptions, table_update
from kbqe_dagster.resources.bigquery.jobs import LoadRequest, new_table
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

if TYPE_CHECKING:
    from kbqe_dagster.resources.bigquery.resource import BigQueryResource

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
        # Here, not at the top: a stage task unpickles these settings, and the resource's
        # module imports dagster-gcp and google-cloud-bigquery, which a task delivering no
        # table through the Storage Write API never needs (resources/bigquery/__init__.py).
        from kbqe_dagster.resources.bigquery.resource import BigQueryResource

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
    ready: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    """The columns each table had when this keeper last read or changed it."""

    def ensure(
        self, dataset: str, table: str, file_schema: Mapping[str, Any], layout: TableLayout
    ) -> None:
        """``dataset.table`` exists and takes rows of ``file_schema``: every field is a
        column, and a column whose field it lacks or makes optional is NULLABLE
        (core/load/evolution.py; a change BigQuery cannot make raises
        :class:`SchemaChangeRefusedError` before any row is appended)."""
        name = f"{dataset}.{table}"
        columns = describe_columns(
            bigquery_schema_from_avro(dict(file_schema), name),
            file_schema,
            layout.column_descriptions,
        )
        known = self.ready.get((dataset, table))
        if known is not None and not plan_schema_change(name, known, columns).changes:
            return
        # The metadata (free), not a query: on the emulator it is also the schema appends are
        # made by, which must hold every column (GoogleBigQueryLoads.evolve_table).
        evolved = self._evolve(dataset, table, columns)
        if evolved is not None:
            self._keep_options(dataset, table, layout)  # after the columns a clustering may name
            self.ready[(dataset, table)] = evolved
            return
        if self.settings.create_datasets:
            self.loads.ensure_dataset(dataset)
        self._create(
            LoadRequest.into(
                layout,
                job_id="",
                dataset=dataset,
                table=table,
                source_uris=(),
                partition_expiration_days=self._expiration_days(layout),
                avro_schema=file_schema,
            )
        )
        # Another task may have created it first, from another schema: take this one too.
        self.ready[(dataset, table)] = self._evolve(dataset, table, columns) or []

    def offsets_present(
        self,
        dataset: str,
        table: str,
        columns: tuple[str, str, str],
        topic: str,
        partition: int,
        first: int,
        last: int,
        required_column: str | None = None,
    ) -> frozenset[int]:
        """The Kafka offsets of ``topic[partition]`` between ``first`` and ``last`` (inclusive)
        that ``dataset.table`` holds rows of (``columns``: the topic, partition and offset
        columns); empty when the table does not exist. A query, billed for the three columns
        it scans: the delivery sink asks only before a range's rows go to a new stream
        (core/protocol/delivery.py, "A stream gone"). ``required_column``: the table requires
        a filter on that partition column; the offsets' event dates are not known here, so
        every partition is read (core/record/partition_filter.py)."""
        from google.api_core.exceptions import NotFound

        topic_col, partition_col, offset_col = columns
        if not set(topic) <= _KAFKA_TOPIC_CHARS:
            raise ValueError(f"{topic!r} is not a Kafka topic name")
        sql = (
            f"SELECT DISTINCT `{offset_col}` FROM `{self.loads.project}.{dataset}.{table}` "
            f"WHERE `{topic_col}` = '{topic}' AND `{partition_col}` = {int(partition)} "
            f"AND `{offset_col}` BETWEEN {int(first)} AND {int(last)}"
        )
        if required_column:
            sql += f" AND {every_partition(required_column)}"
        try:
            return frozenset(int(row[0]) for row in self.loads.client.query_and_wait(sql))
        except NotFound:
            return frozenset()

    def _evolve(
        self, dataset: str, table: str, columns: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        """The table's columns after it took ``columns`` (one metadata read, and an update
        when it changes); None when the table does not exist."""
        name = f"{dataset}.{table}"
        evolved = self.loads.evolve_table(
            dataset, table, lambda current: plan_schema_change(name, current, columns)
        )
        return None if evolved is None else list(evolved[1])

    def _expiration_days(self, layout: TableLayout) -> int | None:
        """The table's partition expiration: its ``tables:`` entry's (0: never), else the
        global one."""
        days = layout.options.partition_expiration_days
        return self.settings.partition_expiration_days if days is None else (days or None)

    def _keep_options(self, dataset: str, table: str, layout: TableLayout) -> None:
        """An existing table's options brought in step with its ``tables:`` entry (as the load
        path does at a table's next load; loading/coordinator.py): one more metadata read,
        only for a table whose entry states options. A refused update is logged: it never
        holds rows back."""
        days = self._expiration_days(layout)
        wanted = replace(
            layout.options,
            partition_expiration_days=(
                layout.options.partition_expiration_days if days is None else days
            ),
        )
        if wanted == TableOptions():
            return
        current = self.loads.table_metadata(dataset, table)
        update = table_update(current, wanted) if current is not None else None
        if not update:
            return
        try:
            self.loads.update_table_options(dataset, table, update)
        except Exception as error:  # noqa: BLE001 - reported; the rows go on
            log.warning("%s.%s: could not update %s: %s", dataset, table,
                        "; ".join(update.changes), error)  # fmt: skip
        else:
            log.info("%s.%s: updated %s", dataset, table, "; ".join(update.changes))

    def _create(self, request: LoadRequest) -> None:
        """Creates the table a load would create (nothing when it exists)."""
        table = new_table(request, f"{self.loads.project}.{request.dataset}.{request.table}")
        log.info(
            "%s.%s: creating the table for Storage Write appends", request.dataset, request.table
        )
        self.loads.client.create_table(table, exists_ok=True)
