"""What a stage run reports for the tables it delivered through the Storage Write API
(kbqe_dagster/delivery/), as a load run does for the tables it loaded (defs/bigquery/
events.py): one ``AssetMaterialization`` per (table, event day) on ``bigquery/<dataset>/
<table>`` with the rows, bytes, stream, row offsets and Kafka ranges, and the ``rows_loaded``
check evaluated on the same facts (rows in the stream == records staged for the table minus
those dead-lettered because the API refused them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

import dagster as dg

from kbqe_dagster.core.completeness.decision import unit_of
from kbqe_dagster.core.load.checks import JobRows, rows_loaded
from kbqe_dagster.core.load.cost import storage_write_list_price
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.defs.verdicts import verdict_evaluation
from kbqe_dagster.staging.context import RangeResult
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.range_sink import TableDelivery

ROWS_SOURCE = "Storage Write API: rows appended at their stream offsets"


def delivery_events(
    summaries: Iterable[StageSummary], destinations: Destinations
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Every event of the stage run's deliveries, materializations first."""
    checks: dict[dg.AssetKey, list[JobRows]] = defaultdict(list)
    for summary in summaries:
        for result in summary.results:
            if result.committed_last is None:
                continue  # not committed by this attempt: nothing to report yet
            for delivery in result.delivered:
                key = destinations.asset_key(delivery.dataset, delivery.table)
                if key is None:
                    continue
                yield from _materializations(key, result, delivery, destinations)
                checks[key].append(
                    JobRows(
                        f"{delivery.stream} rows {delivery.first_row}..{delivery.last_row}",
                        f"{delivery.dataset}.{delivery.table}",
                        delivery.records - delivery.refused,
                        delivery.rows,
                        ROWS_SOURCE,
                    )
                )
    for key, rows in checks.items():
        yield verdict_evaluation(key, rows_loaded(rows))


def _materializations(
    key: dg.AssetKey, result: RangeResult, delivery: TableDelivery, destinations: Destinations
) -> Iterator[dg.AssetMaterialization]:
    where = {
        "topic": result.topic,
        "partition": result.partition,
        "first": result.start,
        "last": result.committed_last,
    }
    common = {
        "table": f"{delivery.dataset}.{delivery.table}",
        "delivery": "storage_write",
        "stream": delivery.stream,
        "stream_rows": dg.MetadataValue.json([delivery.first_row, delivery.last_row]),
        "rows_appended": delivery.rows,
        "bytes_appended": delivery.bytes,
        # Before the free tier (2 TiB a month per billing account, unknown to a run).
        "list_price_usd": round(storage_write_list_price(delivery.bytes), 6),
        "rows_refused": delivery.refused,
        "requests": delivery.requests,
        "requests_already_written": delivery.skipped_requests,
        "offset_ranges": dg.MetadataValue.json([where]),
    }
    partitioning = destinations.partitioning(delivery.dataset, delivery.table)
    days = delivery.days or ((None, delivery.records),)
    if partitioning is Partitioning.NONE:
        days = ((None, delivery.records),)
    elif partitioning in (Partitioning.MONTH, Partitioning.YEAR) and delivery.days:
        days = tuple(unit_of(partitioning).rollup(dict(delivery.days)).items())
    for day, records in days:
        yield dg.AssetMaterialization(
            asset_key=key,
            partition=destinations.partition_key(delivery.dataset, delivery.table, day),
            description=f"{records} row(s) appended through the Storage Write API",
            metadata={**common, "dagster/row_count": records},
        )
