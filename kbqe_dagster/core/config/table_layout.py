"""A destination table's layout in BigQuery, decided in one place: its time partitioning and
the column it partitions on, its clustering, the columns that name a message's offset, and
whether it is the dead-letter table (DESIGN.md §4).

The dead-letter table differs from every other: DAY partitions on its staging date, whatever
``tables:`` says, and its own topic/partition/offset columns. A keyed topic's changelog is
clustered by Kafka partition and offset (its MERGE reads offset ranges). The load coordinator
creates tables with this layout (loading/coordinator.py) and the duplicate-offset check prunes
and matches on it (defs/bigquery/checks.py), so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kbqe_dagster.core.record.column_descriptions import kafka_column_descriptions
from kbqe_dagster.core.record.dead_letter_record import DEAD_LETTER_PARTITION_FIELD
from kbqe_dagster.core.record.enrichment import EnrichmentConfig
from kbqe_dagster.core.record.partition_spec import PartitionSpec
from kbqe_dagster.core.record.partitioning import Delivery, Partitioning, TableSettings
from kbqe_dagster.core.record.table_options import TableOptions

DEAD_LETTER_OFFSET_COLUMNS = ("topic", "partition", "offset")
"""Where a dead letter came from: fields of the dead-letter schema (core/record/dead_letter_record.py)."""


@dataclass(frozen=True)
class TableLayout:
    """How one destination table is laid out (:meth:`PipelineConfig.table_layout`)."""

    partitioning: Partitioning
    partition_column: str
    """The column BigQuery partitions on: the staging date for dead letters, else the
    ``tables:`` entry's ``partition_column``, else the event hour (HOUR tables) or the event
    date. A ``partitioning: none`` table is not partitioned: its event date column."""
    clustering: tuple[str, ...]
    """Clustering columns of a table kbqe creates: Kafka partition and offset for a changelog,
    else the ``tables:`` entry's ``clustering``, else none."""
    offset_columns: tuple[str, str, str]
    """The columns naming a row's topic, partition and offset: a message's identity."""
    dead_letter: bool
    """The dead-letter table."""
    delivery: Delivery = Delivery.LOAD
    """How its rows arrive: load jobs of staged files, or the Storage Write API at commit."""
    all_columns_nullable: bool = False
    """Every column it is created with is NULLABLE (``tables.<key>.all_columns_nullable``)."""
    options: TableOptions = field(default_factory=TableOptions)
    """What kbqe keeps in step on the table: clustering, partition expiration, labels,
    description (core/record/table_options.py); set when it is created, updated later."""
    column_descriptions: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Fixed descriptions of kbqe's own columns, by name (core/record/column_descriptions.py);
    the schema's ``doc`` describes the others. Text, not a decision: left out of equality."""
    event_column: str = ""
    """The column holding the event date (the event hour of an HOUR table) that the Dagster
    partitions count by; empty: :attr:`partition_column` (what kbqe partitions on itself)."""

    @property
    def time_column(self) -> str:
        """The event date (hour) column: what checks filter on to read recent partitions."""
        return self.event_column or self.partition_column

    @property
    def user_partition_column(self) -> bool:
        """BigQuery partitions on a column of the records (``partition_column``)."""
        return self.time_column != self.partition_column

    @property
    def partition_spec(self) -> PartitionSpec:
        """The table's ``timePartitioning`` type and field as kbqe creates it."""
        kind = self.partitioning.bigquery_type
        return PartitionSpec(kind, self.partition_column if kind else None)


def table_layout(
    enrichment: EnrichmentConfig,
    partitioning: Partitioning,
    *,
    dead_letter: bool,
    changelog: bool,
    delivery: Delivery = Delivery.LOAD,
    all_columns_nullable: bool = False,
    settings: TableSettings | None = None,
    default_expiration_days: int | None = None,
) -> TableLayout:
    """The layout of a table with ``partitioning`` and the other ``settings`` of its
    ``tables:`` entry; ``default_expiration_days``: ``load.partition_expiration_days``."""
    settings = settings or TableSettings()
    event_column = ""
    if dead_letter:
        partitioning, column, offsets = (
            Partitioning.DAY,
            DEAD_LETTER_PARTITION_FIELD,
            DEAD_LETTER_OFFSET_COLUMNS,
        )
    else:
        column = (
            enrichment.event_hour_column
            if partitioning is Partitioning.HOUR
            else enrichment.event_date_column
        )
        offsets = (enrichment.topic_column, enrichment.partition_column, enrichment.offset_column)
        if settings.partition_column and partitioning is not Partitioning.NONE:
            column, event_column = settings.partition_column, column
    # A changelog's clustering is kbqe's (its MERGE reads offset ranges), given when it is
    # created and never the user's to change (core/config/table_option_checks.py refuses it).
    managed = None if changelog else settings.clustering
    clustering = (enrichment.partition_column, enrichment.offset_column) if changelog else managed
    expiration = settings.partition_expiration_days
    options = TableOptions(
        clustering=managed,
        partition_expiration_days=default_expiration_days if expiration is None else expiration,
        labels=settings.labels,
        description=settings.description,
        require_partition_filter=settings.require_partition_filter,
    )
    return TableLayout(
        partitioning,
        column,
        clustering or (),
        offsets,
        dead_letter,
        delivery,
        all_columns_nullable,
        options,
        {} if dead_letter else kafka_column_descriptions(enrichment),
        event_column,
    )
