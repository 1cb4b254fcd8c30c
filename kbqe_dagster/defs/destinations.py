"""Which tables a pipeline writes, and the asset and partition key each load is reported on:
:class:`Destinations`, read from the pipeline file. A leaf of ``defs/`` (it imports only
:mod:`kbqe_dagster.defs.keys`): the stage runs, the load op, the checks and the completeness
sensors all ask it, and ``defs/bigquery/assets.py`` builds the tables' asset specs from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.config.sections import DeadLetterDestination
from kbqe_dagster.core.record.partitioning import HOUR_KEY_FORMAT, Partitioning, TablesConfig
from kbqe_dagster.defs.keys import dataset_asset_key, table_asset_key

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
            return table_asset_key(dataset, table)
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
        return [table_asset_key(d, t) for d, t in self.tables] + [
            dataset_asset_key(d) for d in self.wildcard_datasets
        ]
