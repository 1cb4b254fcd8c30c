"""BigQuery destination tables as external assets, downstream of ``staging``.

Which tables exist is only partly known when the definitions load. The pipeline file names
some tables outright — static routes, allow-list entries ``dataset.table``, the dead-letter
table — and each of those is an asset ``bigquery/<dataset>/<table>`` with one DAY partition
per event date (``DailyPartitionsDefinition``, matching the table's DAY partitions), or, for a
table the ``tables:`` map makes HOUR-partitioned, one partition per event hour
(``HourlyPartitionsDefinition`` in UTC, keys ``YYYY-MM-DDTHH``, from the same start). Every
exact ``tables:`` key is named outright too, so a table whose partitioning differs from its
dataset wildcard's has its own asset with its own partitions. A MONTH table has monthly
partitions, a YEAR table yearly ones (a time window on cron ``0 0 1 1 *``), both keyed by the
period's first day; an unpartitioned table (``partitioning: none``) has none.

An allow-list entry ``dataset.*`` admits tables nobody has named yet: routing reads them from
the records. Reloading the definitions whenever a record names a new table is not an option,
so such a dataset is **one** asset ``bigquery/<dataset>`` partitioned by ``table`` × ``date``
(a ``MultiPartitionsDefinition`` of a ``DynamicPartitionsDefinition`` named
``bigquery_<dataset>_tables`` and the same daily partitions). The load op adds a table to the
dynamic partitions the first time it loads it. An HOUR wildcard (``tables: {dataset.*:
{partitioning: hour}}``) has a ``table`` × ``hour`` asset (``month``, ``year`` likewise; an
unpartitioned wildcard's asset is partitioned by ``table`` alone). Nothing is invented up front and
every load is reported; the price is that checks of a wildcard dataset cover all its tables
at once (a failing check names the table). A table both named outright and under a wildcard
is reported on its own asset.

The load op reports materializations; Dagster never materializes these assets itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.config.sections import DeadLetterDestination
from kbqe_dagster.core.record.partitioning import HOUR_KEY_FORMAT, Partitioning, TablesConfig
from kbqe_dagster.defs.staging.assets import STAGING_KEY

BIGQUERY_GROUP = "bigquery"
YEARLY_CRON = "0 0 1 1 *"
DEFAULT_PARTITION_START = date(2020, 1, 1)
"""First daily partition shown, unless every topic's ``event_time.min_date`` is later.
Older event dates still load and are still reported (Dagster records their keys)."""


@dataclass(frozen=True)
class Destinations:
    """The tables the pipeline can write, and the asset and partition key of each."""

    tables: tuple[tuple[str, str], ...]
    """Tables named in the pipeline file, the dead-letter table included."""
    wildcard_datasets: tuple[str, ...]
    dead_letter: DeadLetterDestination
    partition_start: date = DEFAULT_PARTITION_START
    table_settings: TablesConfig = TablesConfig()
    """The ``tables:`` map: which tables (and wildcard datasets) are HOUR-partitioned."""

    @classmethod
    def from_config(cls, config: PipelineConfig) -> Destinations:
        dead = config.dead_letter
        named: list[tuple[str, str]] = []
        wild: list[str] = []
        for pattern in config.allowed_destinations.patterns:
            dataset, table = pattern.split(".")
            if table == "*":
                wild.append(dataset)
            else:
                named.append((dataset, table))
        # An exact tables: key has its own asset (its partitions may differ from its dataset's).
        for key in config.tables.settings:
            dataset, table = key.split(".")
            if table != "*":
                named.append((dataset, table))
        starts = [t.event_time.min_date for t in config.topics]
        start = max(DEFAULT_PARTITION_START, min(starts)) if starts else DEFAULT_PARTITION_START
        # A keyed topic's loads go to its changelog; its current table is merged, not loaded
        # (defs/keyed/assets.py declares it).
        merged = {d for t in config.topics if t.keyed and (d := t.routing.static_destination)}
        tables = tuple(
            dict.fromkeys([*(n for n in named if n not in merged), (dead.dataset, dead.table)])
        )
        return cls(tables, tuple(dict.fromkeys(wild)), dead, start, config.tables)

    @property
    def daily(self) -> dg.DailyPartitionsDefinition:
        return dg.DailyPartitionsDefinition(
            start_date=self.partition_start.isoformat(), end_offset=1
        )

    @property
    def hourly(self) -> dg.HourlyPartitionsDefinition:
        """HOUR partitions in UTC from the daily ones' start, keyed like the manifests' hours."""
        start = self.partition_start.strftime(HOUR_KEY_FORMAT)
        return dg.HourlyPartitionsDefinition(
            start_date=start, timezone="UTC", fmt=HOUR_KEY_FORMAT, end_offset=1
        )

    def partitioning(self, dataset: str, table: str) -> Partitioning:
        """The partitioning of the asset ``dataset.table`` is reported on: its own for a named
        table, its dataset wildcard's for a table under ``dataset.*``."""
        if self.dead_letter.is_table(dataset, table):
            return Partitioning.DAY
        if self.is_wildcard(dataset, table):
            return self.table_settings.partitioning(dataset, "*")
        return self.table_settings.partitioning(dataset, table)

    @property
    def monthly(self) -> dg.MonthlyPartitionsDefinition:
        """MONTH partitions keyed by their first day (``2026-11-01``), from the month of the
        daily ones' start."""
        start = self.partition_start.replace(day=1)
        return dg.MonthlyPartitionsDefinition(start_date=start.isoformat(), end_offset=1)

    @property
    def yearly(self) -> dg.TimeWindowPartitionsDefinition:
        """YEAR partitions keyed by their first day (``2026-01-01``): Dagster has no yearly
        definition, a time window on cron ``0 0 1 1 *`` is one."""
        start = self.partition_start.replace(month=1, day=1)
        return dg.TimeWindowPartitionsDefinition(
            cron_schedule=YEARLY_CRON,
            start=start.isoformat(),
            fmt="%Y-%m-%d",
            timezone="UTC",
            end_offset=1,
        )

    def time_partitions(self, dataset: str, table: str) -> dg.TimeWindowPartitionsDefinition | None:
        """``table="*"``: of a wildcard dataset's asset. None: an unpartitioned table."""
        if self.dead_letter.is_table(dataset, table):
            return self.daily
        unit = self.table_settings.partitioning(dataset, table)
        return {
            Partitioning.HOUR: self.hourly,
            Partitioning.MONTH: self.monthly,
            Partitioning.YEAR: self.yearly,
            Partitioning.NONE: None,
        }.get(unit, self.daily)

    def time_dimension(self, dataset: str) -> str:
        """The time dimension's name in a wildcard dataset's multi-partitions."""
        unit = self.table_settings.partitioning(dataset, "*")
        return "date" if unit is Partitioning.DAY else str(unit)

    def asset_key(self, dataset: str, table: str) -> dg.AssetKey | None:
        """The asset a load into ``dataset.table`` is reported on; ``None``: no asset (the
        pipeline file no longer declares it)."""
        if (dataset, table) in self.tables:
            return dg.AssetKey(["bigquery", dataset, table])
        if dataset in self.wildcard_datasets:
            return dataset_asset_key(dataset)
        return None

    def partition_key(
        self, dataset: str, table: str, day: str | None
    ) -> str | dg.MultiPartitionKey | None:
        if (dataset, table) not in self.tables and self.partitioning(
            dataset, table
        ) is Partitioning.NONE:
            return table  # an unpartitioned wildcard dataset: partitioned by table only
        if day is None:
            return None
        if (dataset, table) in self.tables:
            return day
        return dg.MultiPartitionKey({self.time_dimension(dataset): day, "table": table})

    def is_wildcard(self, dataset: str, table: str) -> bool:
        return (dataset, table) not in self.tables and dataset in self.wildcard_datasets

    @property
    def asset_keys(self) -> list[dg.AssetKey]:
        return [dg.AssetKey(["bigquery", d, t]) for d, t in self.tables] + [
            dataset_asset_key(d) for d in self.wildcard_datasets
        ]


def dataset_asset_key(dataset: str) -> dg.AssetKey:
    return dg.AssetKey(["bigquery", dataset])


def tables_partitions_name(dataset: str) -> str:
    """Name of the dynamic partitions holding the loaded tables of a wildcard dataset."""
    return f"bigquery_{dataset}_tables"


def bigquery_specs(destinations: Destinations) -> list[dg.AssetSpec]:
    specs = [_table_spec(destinations, d, t) for d, t in destinations.tables]
    specs += [_dataset_spec(destinations, d) for d in destinations.wildcard_datasets]
    return specs


def _table_spec(destinations: Destinations, dataset: str, table: str) -> dg.AssetSpec:
    dead = destinations.dead_letter.is_table(dataset, table)
    partitioning = destinations.partitioning(dataset, table)
    layout = destinations.table_settings.of(dataset, table)
    column = f"`{layout.partition_column}`" if layout.partition_column else None
    what = (
        "Dead letters: messages that could not be staged, with raw bytes and the reason; "
        "DAY partitions on `staged_date`."
        if dead
        else f"Kafka records routed here, with enrichment columns; {_partitions_text(partitioning, column)}."
    )
    reported = (
        "each load reports one materialization of the table"
        if partitioning is Partitioning.NONE
        else f"each load reports one materialization per {unit_name(partitioning)} partition"
    )
    return dg.AssetSpec(
        key=dg.AssetKey(["bigquery", dataset, table]),
        description=(
            f"BigQuery table `{dataset}.{table}`. {what} Appended by free batch load jobs of "
            f"staged avro files, exactly once; {reported} with rows, bytes, job id and offset "
            "ranges."
        ),
        deps=[STAGING_KEY],
        partitions_def=destinations.time_partitions(dataset, table),
        group_name=BIGQUERY_GROUP,
        kinds={"bigquery"},
        owners=["team:data-platform"],
        metadata={
            "dataset": dataset,
            "table": table,
            "dead_letters": dead,
            **({"partitioning": str(partitioning)} if partitioning is not Partitioning.DAY else {}),
            **({"partition_column": layout.partition_column} if column and not dead else {}),
        },
    )


def _partitions_text(partitioning: Partitioning, column: str | None) -> str:
    if partitioning is Partitioning.NONE:
        return "not partitioned"
    if partitioning is Partitioning.HOUR:
        return f"HOUR partitions on {column or 'the event hour (UTC)'}"
    return f"{partitioning.value.upper()} partitions on {column or 'the event date'}"


def unit_name(partitioning: Partitioning) -> str:
    """What one Dagster partition of a table is: ``day``, ``hour``, ``month``, ``year``."""
    return "day" if partitioning is Partitioning.NONE else partitioning.value


def _dataset_spec(destinations: Destinations, dataset: str) -> dg.AssetSpec:
    dimension = destinations.time_dimension(dataset)
    return dg.AssetSpec(
        key=dataset_asset_key(dataset),
        description=(
            f"BigQuery tables of dataset `{dataset}` admitted by the allow-list entry "
            f"`{dataset}.*`: routing names them per record, so they are partitions "
            f"({'table' if destinations.time_partitions(dataset, '*') is None else 'table × event ' + dimension}) "
            "of this asset, added as they are first loaded."
        ),
        deps=[STAGING_KEY],
        partitions_def=_dataset_partitions(destinations, dataset, dimension),
        group_name=BIGQUERY_GROUP,
        kinds={"bigquery"},
        owners=["team:data-platform"],
        metadata={"dataset": dataset, "tables": "dataset.* (dynamic)"},
    )


def _dataset_partitions(
    destinations: Destinations, dataset: str, dimension: str
) -> dg.PartitionsDefinition:
    """table × time, or table alone for an unpartitioned (``none``) wildcard dataset."""
    tables = dg.DynamicPartitionsDefinition(name=tables_partitions_name(dataset))
    time_partitions = destinations.time_partitions(dataset, "*")
    if time_partitions is None:
        return tables
    return dg.MultiPartitionsDefinition({dimension: time_partitions, "table": tables})
