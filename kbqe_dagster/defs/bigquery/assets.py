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

import dagster as dg

from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.defs.keys import (
    BIGQUERY_GROUP,
    STAGING_KEY,
    Destinations,
    dataset_asset_key,
    table_asset_key,
    tables_partitions_name,
)


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
        key=table_asset_key(dataset, table),
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
