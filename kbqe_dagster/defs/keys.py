"""What the definitions are named by: the asset keys and groups, the tags of stage runs (what
the sensors' in-flight checks, the run-concurrency limits of ``dagster.yaml`` and the run history
read), and :class:`Destinations`, the tables a pipeline writes with the asset and partition key
each load is reported on (the stage runs, the load op, the checks and the completeness sensors
all ask it; ``defs/bigquery/assets.py`` builds the tables' asset specs from it).

A leaf: it imports nothing of ``defs/``, so any module of it may name an asset or a tag without
importing the module that defines the asset (issue 41: ``defs/`` was a knot of seven modules
importing each other for these names).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.config.sections import DeadLetterDestination
from kbqe_dagster.core.protocol.naming import STAGING_ASSET
from kbqe_dagster.core.record.partitioning import HOUR_KEY_FORMAT, Partitioning, TablesConfig

# --- assets ----------------------------------------------------------------------------------
STAGING_KEY = dg.AssetKey([STAGING_ASSET])
"""The staging area's asset: materialized by the stage runs, upstream of every table."""
STAGING_GROUP = "staging"
BIGQUERY_GROUP = "bigquery"


def table_asset_key(dataset: str, table: str) -> dg.AssetKey:
    """A table named in the pipeline file: ``bigquery/<dataset>/<table>``."""
    return dg.AssetKey(["bigquery", dataset, table])


def dataset_asset_key(dataset: str) -> dg.AssetKey:
    """A wildcard dataset's one asset: ``bigquery/<dataset>`` (:class:`Destinations`)."""
    return dg.AssetKey(["bigquery", dataset])


def tables_partitions_name(dataset: str) -> str:
    """Name of the dynamic partitions holding the loaded tables of a wildcard dataset."""
    return f"bigquery_{dataset}_tables"


# --- the tags of stage runs ------------------------------------------------------------------
TOPIC_TAG = "kbqe/topic"
"""The topic of a single-topic stage run."""
TOPICS_TAG = "kbqe/topics"
"""The topics of a grouped stage run, comma-separated (core/stage_runs/groups.py)."""
GROUP_TAG = "kbqe/stage_group"
"""A grouped run's digest of its topics and start offsets: earlier runs of the same group."""
FROM_OFFSETS_TAG = "kbqe/from_offsets"
"""Where a single-topic run starts, per partition (``0=12,1=40``)."""
STAGE_TAG = "kbqe/stage"
"""On every stage run (a tag of the job): dagster.yaml bounds how many run at once."""
STAGE_LOOP_TAG = "kbqe/stage_loop"
"""On every stage loop run (a tag of ``stage_loop_job``, never with ``kbqe/stage``: a loop run
lasts up to ``max_run_s`` and would hold a slot of the stage runs' limit all along):
dagster.yaml bounds the loop runs in flight on its own."""
PIPELINE_DIGEST_TAG = "kbqe/pipeline_digest"
"""The digest of the pipeline file a loop run was launched with: the loop sensor asks the loop
runs of another pipeline (the code location reloaded since) to stop."""
STOP_TAG = "kbqe/stop"
"""Added to a loop run in flight to ask it to end after its round (its value: why)."""
LOOP_STATE_TAG = "kbqe/loop_state"
"""Set by a loop run on itself: ``warm`` (Spark up, waiting for an older run holding its topics
to end: a standby), then ``looping``; none while it starts (core/stage_runs/loop_plan.py)."""
STANDBY_TAG = "kbqe/standby"
"""On a loop run the loop sensor launched as the standby of a looping run (for the run history:
what a run does is its ``kbqe/loop_state``)."""


# --- the tables a pipeline writes -------------------------------------------------------------
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
