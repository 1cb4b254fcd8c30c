"""What ``kbqe config check`` can decide about a ``tables:`` entry's clustering and partition
column without BigQuery: the columns a table will have where the configuration knows them.

Known without BigQuery: the enrichment columns of every table (their types are kbqe's), the
dead-letter table's fixed schema, and every column of a table a ``format: json`` topic routes
to statically without transforms (its declared Avro schema). A column of a registry schema
is not known here: it is checked when the table's first file is loaded
(loading/coordinator.py). A keyed changelog's clustering is kbqe's own and refused here.
"""

from __future__ import annotations

from collections.abc import Iterable

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.config.topics import TopicConfig
from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.core.keyed.contract import changelog_table
from kbqe_dagster.core.record.dead_letter_record import DEAD_LETTER_SCHEMA
from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema
from kbqe_dagster.core.record.partition_spec import partition_column_problem
from kbqe_dagster.core.record.partitioning import Partitioning, TableSettings
from kbqe_dagster.core.record.table_options import avro_columns, clustering_problems


def check_table_options(
    key: str,
    settings: TableSettings,
    topics: Iterable[TopicConfig],
    enrichment: EnrichmentConfig,
    dead_letter: tuple[str, str],
    hourly: bool,
    problems: r.Problems,
) -> None:
    """Problems of ``tables.<key>.clustering`` decidable from the configuration alone."""
    if settings.clustering is None:
        return
    dataset, table = key.split(".")
    where = f"tables.{key}.clustering"
    topics = tuple(topics)
    for t in topics:
        d = t.routing.static_destination
        if t.keyed and d and (d.dataset, changelog_table(d.table)) == (dataset, table):
            problems.add(
                where,
                f"{key} is the changelog of keyed topic {t.name!r}: it stays clustered by Kafka "
                "partition and offset (its MERGE reads offset ranges); cluster the current "
                f"table {d.dataset}.{d.table} instead",
            )
            return
    columns: dict[str, tuple[str, str]] | None
    if (dataset, table) == dead_letter:
        columns = avro_columns(DEAD_LETTER_SCHEMA)
    else:
        columns = _declared_columns(dataset, table, topics, enrichment, hourly)
    if columns is None:  # only the enrichment columns are known: check those named
        columns = avro_columns(extended_schema(_EMPTY, enrichment, hourly))
        named = {c.lower() for c in columns}
        clustering = [c for c in settings.clustering if c.lower() in named]
    else:
        clustering = list(settings.clustering)
    for message in clustering_problems(clustering, columns, f"{dataset}.{table}"):
        problems.add(where, message)


_EMPTY = {"type": "record", "name": "Empty", "fields": []}


def _declared_columns(
    dataset: str,
    table: str,
    topics: tuple[TopicConfig, ...],
    enrichment: EnrichmentConfig,
    hourly: bool,
) -> dict[str, tuple[str, str]] | None:
    """Every column of ``dataset.table`` when only ``format: json`` topics without transforms
    route to it statically and nothing else may (a keyed one writes its changelog); else None."""
    writers = [
        t
        for t in topics
        if (d := t.routing.static_destination) and (d.dataset, d.table) == (dataset, table)
    ]
    plain = all(
        t.format is SourceFormat.JSON and t.value_schema and not t.transforms and not t.keyed
        for t in writers
    )
    if not writers or not plain or len(writers) > 1:
        return None
    try:
        return avro_columns(extended_schema(writers[0].value_schema or {}, enrichment, hourly))
    except KbqeError:
        return None  # a colliding enrichment column is refused where the topic is read


def check_partition_column(
    key: str,
    settings: TableSettings,
    topics: Iterable[TopicConfig],
    enrichment: EnrichmentConfig,
    problems: r.Problems,
) -> None:
    """Problems of ``tables.<key>.partition_column`` decidable from the configuration alone:
    against every column of a ``format: json`` topic's table, else against the enrichment
    columns when it names one. Other columns are checked at the table's first load."""
    column = settings.partition_column
    if not column or settings.partitioning is Partitioning.NONE:
        return  # with none: refused by core/config/pipeline.py
    dataset, table = key.split(".")
    hourly = settings.partitioning is Partitioning.HOUR
    columns = _declared_columns(dataset, table, tuple(topics), enrichment, hourly)
    if columns is None:
        columns = avro_columns(extended_schema(_EMPTY, enrichment, hourly))
        if column.lower() not in {c.lower() for c in columns}:
            return
    problem = partition_column_problem(column, columns, hourly, f"{dataset}.{table}")
    if problem:
        problems.add(f"tables.{key}.partition_column", problem)
