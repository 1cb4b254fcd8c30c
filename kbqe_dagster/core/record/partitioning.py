"""A destination table's time partitioning under ``tables:``: DAY (the default), HOUR, MONTH,
YEAR or none, and the column BigQuery partitions on.

**Where it lives, and why there.** Partitioning is a property of a *table*, not of a topic:
one topic may route to many tables (``fields``, ``schema_name``, ``function`` routing), and
one table may be fed by many topics. The pipeline file already names tables in one place,
the destination allow-list, so a table's settings sit in a map keyed the same way::

    allowed_destinations: [acme_web.*, acme_sales.orders]
    tables:
      acme_web.*:          {partitioning: hour}   # every table of the dataset
      acme_web.page_views: {partitioning: day}    # the exact name wins over dataset.*
      acme_sales.orders:   {partitioning: hour}

A key is ``dataset.table`` or ``dataset.*``; an exact key wins over its dataset's wildcard;
a table no key covers is DAY. Each key must name a destination the pipeline can write (an
allow-list entry or a static route; ``dataset.*`` only where the allow-list has ``dataset.*``),
so a typo is an error, not a silently DAY table. Only DAY on the event date: the dead-letter
table (partitioned on its staging date) and keyed topics' tables (their MERGE prunes by event
date).

**HOUR tables.** BigQuery partitions by hour on a TIMESTAMP column, so an HOUR table's files
carry one more enrichment column, ``enrichment.event_hour_column`` (``_event_hour``): the
event instant truncated to the hour, in UTC (core/record/event_time.py, ``event_hour``). A table's
partition key is then ``YYYY-MM-DDTHH`` (UTC), the key of Dagster's hourly partitions, of the
manifests' per-file ``hours`` counts and of completeness per hour.

**MONTH and YEAR tables** are partitioned by BigQuery per month (year) of the event date
column: their files are a DAY table's. Their partition key is the ISO date the month (year)
starts, ``2026-11-01`` (``2026-01-01``): the key of Dagster's monthly partitions and of a
yearly time window (cron ``0 0 1 1 *``). The manifests' per-day counts add up to them.

**Unpartitioned tables** (``partitioning: none``) have no time partitioning in BigQuery and no
Dagster partitions: their loads are reported on the table as a whole and their completeness
is the table's (complete through the newest complete day). Their files are still staged and
loaded exactly as a DAY table's (done files and manifests name event dates; the load job
appends the files to the table, never to a partition decorator).

**Partition column.** ``partition_column: <field>`` makes BigQuery partition on a column of
the records (TIMESTAMP, DATE or DATETIME once mapped) instead of ``_event_date`` /
``_event_hour``. The event-time rules still decide the event date, hence the Dagster
partition, the manifests' counts and completeness. A row whose column falls in another
BigQuery partition than its event date lands in the partition of its own column value
(nothing is lost; Dagster counts it under its event date), and a row whose column is NULL
lands in BigQuery's ``__NULL__`` partition. The partitioning, its column and ``none`` cannot
change on an existing table (BigQuery refuses it): the load coordinator refuses the table's
loads naming what the table has and what the configuration asks
(:func:`partitioning_refusal`); its files stay staged.

**Delivery.** The same map says how a table's rows reach BigQuery (:class:`Delivery`):
``load`` (free batch load jobs of staged Avro files, the default) or ``storage_write`` (rows
appended through the BigQuery Storage Write API at commit of each staged range, visible in
seconds; docs/architecture.md, "Storage Write delivery"). A table no key covers takes its
topic's ``delivery:`` (core/config/topics.py), else ``load``.

**Nullable columns.** ``all_columns_nullable: true`` creates every column of the table
NULLABLE (core/load/evolution.py says what happens to columns otherwise when a field is
deleted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.record.partition_spec import partition_column_name_problem
from kbqe_dagster.core.record.routing import allow_pattern_problem
from kbqe_dagster.core.record.table_options import (
    NEVER_EXPIRES,
    clustering_list_problem,
    description_problem,
    labels_problem,
)

HOUR_MS = 3_600_000
HOUR = timedelta(hours=1)
HOUR_KEY_FORMAT = "%Y-%m-%dT%H"
"""Partition key of an HOUR partition (UTC): ``2026-11-23T14``. Also Dagster's ``fmt``."""


class Partitioning(StrEnum):
    """The unit of a table's time partitions."""

    DAY = "day"
    """DAY partitions on the event date column (DATE). The default."""
    HOUR = "hour"
    """HOUR partitions on the event hour column (TIMESTAMP, UTC)."""
    MONTH = "month"
    """MONTH partitions on the event date column (or ``partition_column``)."""
    YEAR = "year"
    """YEAR partitions on the event date column (or ``partition_column``)."""
    NONE = "none"
    """No time partitioning: one unpartitioned table and one unpartitioned Dagster asset."""

    @property
    def bigquery_type(self) -> str | None:
        """``timePartitioning.type`` of the table; None: not partitioned."""
        return None if self is Partitioning.NONE else self.value.upper()


class Delivery(StrEnum):
    """How a table's rows reach BigQuery."""

    LOAD = "load"
    """Staged Avro files loaded by batch load jobs (free; a load cadence old). The default."""
    STORAGE_WRITE = "storage_write"
    """Rows appended through the Storage Write API when each range commits (seconds; billed
    per GiB appended). Exactly once by stream offsets tied to the range's intent and done
    files (core/protocol/delivery.py)."""


@dataclass(frozen=True)
class TableSettings:
    """Settings of the tables one ``tables:`` key covers."""

    partitioning: Partitioning = Partitioning.DAY
    """``day`` (default), ``hour``, ``month``, ``year`` or ``none``: the unit of the table's
    BigQuery time partitions, of its Dagster partitions, of its load materializations and of
    its completeness (``none``: no time partitions; loads and completeness per table). Cannot
    change on an existing table: its loads are refused naming the table."""
    delivery: Delivery | None = None
    """``load`` (free batch load jobs, minutes) or ``storage_write`` (rows appended through
    the BigQuery Storage Write API as each range commits, seconds; billed). Unset: the
    delivery of the topic that writes the table (``topics[].delivery``), else ``load``.
    Switching takes effect at the next staged range. Never ``storage_write``: the dead-letter
    table. A keyed topic's changelog may be (its MERGE keeps its cadence), never its current
    table, which only the MERGE writes."""
    all_columns_nullable: bool = False
    """``true``: every column kbqe creates in the table is NULLABLE (REPEATED stays), as
    Kafka Connect's BigQuery sink does with ``allBQFieldsNullable``: for teams that delete
    fields freely. Default ``false``: a column is REQUIRED when its field is, and relaxed to
    NULLABLE when a newer schema deletes the field or makes it optional (its later rows hold
    NULL). Columns a table has already keep their mode until then. A keyed topic's current
    table and history have only NULLABLE columns anyway: set it on the changelog."""
    clustering: tuple[str, ...] | None = None
    """Up to 4 top-level columns the table is clustered by, in order (``[]``: not clustered).
    Unset: the table keeps its clustering (none, or kbqe's own: a keyed current table by its
    key). Checked against the table's columns where they are known (the enrichment columns,
    a ``format: json`` topic's schema; else at load time against the staged file's schema).
    A keyed changelog keeps its clustering by Kafka partition and offset: not settable; on
    ``D.T`` of a keyed topic it replaces the clustering by key of the current table.
    Changed on the existing table at its next load (core/record/table_options.py)."""
    partition_expiration_days: int | None = None
    """Days a time partition of the table lives (``null``: forever). Unset: the global
    ``load.partition_expiration_days``. Changed on the existing table at its next load."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels of the table (BigQuery's rules: lowercase keys starting with a letter, at most
    63 characters of lowercase letters, digits, ``_`` and ``-``; at most 64, shared with
    kbqe's ``kbqe-feed-*`` labels). Set or changed at the next load; a label removed from
    here stays on the table."""
    description: str | None = None
    """The table's description. Set or changed at the next load."""
    require_partition_filter: bool | None = None
    """``true``: every query on the table must filter on its partition column (BigQuery's
    ``requirePartitionFilter``), and every statement kbqe runs on it does (the keyed MERGE
    reads only the partitions its changes touch). Unset: the table keeps what it has; a
    table kbqe creates has it ``false``. Changed on the existing table at its next load.
    Only time-partitioned tables take it (a keyed topic: its changelog)."""
    partition_column: str | None = None
    """A top-level field of the records (TIMESTAMP, DATE or DATETIME once mapped; HOUR needs
    TIMESTAMP or DATETIME) BigQuery partitions on instead of the event date (hour) column.
    The event time still decides the Dagster partition; a row lands in the BigQuery partition
    of its own column value (NULL: ``__NULL__``). Not with ``partitioning: none``; cannot
    change on an existing table. Unset: ``_event_date`` (``_event_hour`` for HOUR)."""


def _expiration_days(value: Any) -> int:
    """``partition_expiration_days``: at least 1, or ``null`` (never expires)."""
    return NEVER_EXPIRES if value is None else r.integer(minimum=1)(value)


r.with_schema(_expiration_days, {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]})


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise r.Invalid(f"expected a mapping of label keys to values, got {r.describe(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, (str, int)) or isinstance(item, bool):
            raise r.Invalid(f"expected a string key and value, got {r.describe(item)}", f".{key}")
        out[key] = str(item)
    problem = labels_problem(out)
    if problem:
        raise r.Invalid(problem)
    return out


r.with_schema(
    _labels,
    {
        "type": "object",
        "maxProperties": 64,
        "propertyNames": {"pattern": "^[a-z][a-z0-9_-]{0,62}$"},
        "additionalProperties": {"type": "string", "pattern": "^[a-z0-9_-]{0,63}$"},
    },
)


def _any_string(value: Any) -> str:
    """A string, empty included (``description: ""`` clears a description)."""
    if not isinstance(value, str):
        raise r.Invalid(f"expected a string, got {r.describe(value)}")
    return value


r.with_schema(_any_string, {"type": "string"})


TABLE_SPEC: dict[str, r.Converter] = {
    "partitioning": r.choice(Partitioning),
    "delivery": r.choice(Delivery),
    "all_columns_nullable": r.boolean,
    "clustering": r.checked(r.list_of(r.string), clustering_list_problem),
    "partition_expiration_days": _expiration_days,
    "labels": _labels,
    "description": r.checked(_any_string, description_problem),
    "require_partition_filter": r.boolean,
    "partition_column": r.checked(r.string, partition_column_name_problem),
}


@dataclass(frozen=True)
class TablesConfig:
    """The ``tables:`` map: per ``dataset.table`` / ``dataset.*`` key, its settings."""

    settings: Mapping[str, TableSettings] = field(default_factory=dict)

    def of(self, dataset: str, table: str) -> TableSettings:
        """The exact key's settings, else the dataset wildcard's, else the defaults."""
        found = self.settings.get(f"{dataset}.{table}") or self.settings.get(f"{dataset}.*")
        return found or TableSettings()

    def partitioning(self, dataset: str, table: str) -> Partitioning:
        return self.of(dataset, table).partitioning

    def is_hourly(self, dataset: str, table: str) -> bool:
        return self.of(dataset, table).partitioning is Partitioning.HOUR

    def delivery(self, dataset: str, table: str) -> Delivery | None:
        """The delivery ``tables:`` sets for ``dataset.table``; None when no key says."""
        return self.of(dataset, table).delivery

    def all_columns_nullable(self, dataset: str, table: str) -> bool:
        return self.of(dataset, table).all_columns_nullable

    @property
    def any_storage_write(self) -> bool:
        return any(s.delivery is Delivery.STORAGE_WRITE for s in self.settings.values())

    @property
    def any_hourly(self) -> bool:
        return any(s.partitioning is Partitioning.HOUR for s in self.settings.values())

    @property
    def hourly_keys(self) -> tuple[str, ...]:
        return tuple(k for k, s in self.settings.items() if s.partitioning is Partitioning.HOUR)


def read_tables(raw: Any, problems: r.Problems, path: str = "tables") -> TablesConfig:
    """Read the ``tables:`` mapping; problems name ``tables.<key>[.partitioning]``. Whether a
    key names a writable destination is checked by the caller (core/config/pipeline.py), which knows
    the allow-list."""
    if raw is None:
        return TablesConfig()
    if not isinstance(raw, Mapping):
        problems.add(
            path,
            f"expected a mapping of 'dataset.table' or 'dataset.*' to settings, "
            f"got {r.describe(raw)}",
        )
        return TablesConfig()
    settings: dict[str, TableSettings] = {}
    for key, section in raw.items():
        where = f"{path}.{key}"
        problem = allow_pattern_problem(key)
        if problem:
            problems.add(where, problem.replace("allow-list entry", "table key"))
            continue
        values = r.read_section(section, where, TABLE_SPEC, problems)
        settings[key] = TableSettings(**values)
    return TablesConfig(settings)


# --- hour keys -------------------------------------------------------------------------------
def hour_start(epoch_hour: int) -> datetime:
    """The UTC instant an hour (hours since 1970-01-01T00 UTC) starts."""
    return datetime(1970, 1, 1, tzinfo=UTC) + epoch_hour * HOUR


def hour_key(epoch_hour: int) -> str:
    """``2026-11-23T14``: the partition key of an hour."""
    return hour_start(epoch_hour).strftime(HOUR_KEY_FORMAT)


def parse_hour_key(key: str) -> datetime:
    """The UTC start of the hour ``key`` names; ``ValueError`` for anything else."""
    return datetime.strptime(key, HOUR_KEY_FORMAT).replace(tzinfo=UTC)


def epoch_hour_of(instant: datetime) -> int:
    """Hours since 1970-01-01T00 UTC of an aware instant (floored)."""
    return int((instant - datetime(1970, 1, 1, tzinfo=UTC)) // HOUR)
