"""MONTH, YEAR, unpartitioned tables and a ``partition_column`` on the load path, against the
fake BigQuery client at the boundary: the time partitioning a creating load asks for (never a
partition decorator), each file loaded once into an unpartitioned table, loads reported per
month, and a table partitioned otherwise than configured refused naming it while its files
stay staged. The emulator keeps the partitioning it is given but neither refuses a load of
another partitioning nor a change of an existing table's: pinned by
``test_emulator_gap_partitioning_*`` (localstack/test_bigquery_contract.py)."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.resources.bigquery import GoogleBigQueryLoads
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, TOPIC
from kbqe_dagster_tests.loading.fake_bigquery import FakeBigQueryClient
from kbqe_dagster_tests.loading.staged import stage_range

ORDERS = ("acme_sales", "orders")


def pipeline(orders: dict[str, Any] | None) -> PipelineConfig:
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["acme_sales.*"],
            "tables": {"acme_sales.orders": orders} if orders else {},
            "load": {"max_retries": 1},
        },
        source="test",
    )


def cycle(store, bq, config: PipelineConfig, first: int, days=((3, date(2024, 9, 13)),)):
    stage_range(store, TOPIC, 0, first, first + 2, [(ORDERS_V1, n, d) for n, d in days])
    return LoadCoordinator(store, GoogleBigQueryLoads(bq), config).run_cycle()


@pytest.mark.parametrize(
    "orders, partitioning",
    [
        ({"partitioning": "month"}, ("MONTH", "_event_date")),
        ({"partitioning": "year"}, ("YEAR", "_event_date")),
        ({"partitioning": "none"}, None),
        ({"partition_column": "_kafka_timestamp"}, ("DAY", "_kafka_timestamp")),
        ({"partitioning": "month", "partition_column": "_kafka_timestamp"},
         ("MONTH", "_kafka_timestamp")),
    ],
)  # fmt: skip
def test_a_creating_load_asks_for_the_tables_partitioning_and_appends_to_the_table(
    store, bq: FakeBigQueryClient, orders: dict[str, Any], partitioning: tuple | None
) -> None:
    report = cycle(store, bq, pipeline(orders), 0)

    [completed] = report.completed
    job = bq.jobs[completed.job.job_id]
    tp = job.config.time_partitioning
    assert (None if tp is None else (tp.type_, tp.field)) == partitioning
    assert job.destination == ORDERS, "the table itself: no partition decorator"
    table = bq.tables[ORDERS]
    assert (table.time_partitioning_type, table.time_partitioning_field) == (
        partitioning or (None, None)
    )


def test_an_unpartitioned_table_loads_each_file_once_and_reports_the_table_as_a_whole(
    store, bq: FakeBigQueryClient
) -> None:
    config = pipeline({"partitioning": "none"})
    days = ((2, date(2024, 9, 13)), (1, date(2024, 9, 14)))

    first = cycle(store, bq, config, 0, days)
    second = cycle(store, bq, config, 3, days)
    idle = LoadCoordinator(store, GoogleBigQueryLoads(bq), config).run_cycle()

    assert len(bq.rows(*ORDERS)) == 6, "each staged record once"
    assert sorted(r["_kafka_offset"] for r in bq.rows(*ORDERS)) == [0, 1, 2, 3, 4, 5]
    assert idle.completed == [] and [f for f in store.list() if f.name.endswith(".avro")] == []
    [(part,)] = [c.partitions(Partitioning.NONE) for c in first.completed]
    assert (part.day, part.rows) == (None, 3)
    assert [p.rows for c in second.completed for p in c.partitions(Partitioning.NONE)] == [3]


def test_a_month_tables_loads_are_reported_per_month(store, bq: FakeBigQueryClient) -> None:
    days = ((2, date(2024, 9, 30)), (1, date(2024, 10, 1)))

    report = cycle(store, bq, pipeline({"partitioning": "month"}), 0, days)

    [completed] = report.completed
    assert [(p.day, p.rows) for p in completed.partitions(Partitioning.MONTH)] == [
        ("2024-09-01", 2),
        ("2024-10-01", 1),
    ]
    assert [(p.day, p.rows) for p in completed.partitions(Partitioning.YEAR)] == [("2024-01-01", 3)]


@pytest.mark.parametrize(
    "created, changed, what",
    [
        ({"partitioning": "month"}, {"partitioning": "year"},
         "acme_sales.orders is MONTH partitions on column _event_date, the configuration asks "
         "YEAR partitions on column _event_date"),
        ({"partitioning": "day", "labels": {"team": "sales"}}, {"partitioning": "none"},
         "acme_sales.orders is DAY partitions on column _event_date, the configuration asks "
         "not partitioned"),
        (None, {"partition_column": "_kafka_timestamp"},
         "acme_sales.orders is DAY partitions on column _event_date, the configuration asks "
         "DAY partitions on column _kafka_timestamp"),
        ({"partitioning": "none"}, {"partitioning": "month"},
         "acme_sales.orders is not partitioned, the configuration asks MONTH partitions on "
         "column _event_date"),
    ],
)  # fmt: skip
def test_a_partitioning_change_is_refused_naming_the_table_and_its_files_stay_staged(
    store, bq: FakeBigQueryClient, created: dict | None, changed: dict, what: str
) -> None:
    cycle(store, bq, pipeline(created), 0)
    jobs = len(bq.jobs)

    report = cycle(store, bq, pipeline(changed), 3)

    [quarantined] = report.quarantined
    assert quarantined.error.startswith(what)
    assert "BigQuery cannot change an existing table's partitioning" in quarantined.error
    assert len(bq.jobs) == jobs, "no load job was submitted"
    assert len(bq.rows(*ORDERS)) == 3
    staged = {f.name for f in store.list()}
    assert set(quarantined.job.files) <= staged, "the files stay staged"

    # Restored: the next loads of the table go on (the quarantined files wait for a release).
    restored = cycle(store, bq, pipeline(created), 6)
    assert [c.job.table for c in restored.completed] == ["orders"]
    assert len(bq.rows(*ORDERS)) == 6


def test_a_partition_column_the_files_type_otherwise_is_refused_naming_it_and_the_file(
    store, bq: FakeBigQueryClient
) -> None:
    # A registry schema is not known at config check: the first file's schema decides.
    report = cycle(store, bq, pipeline({"partition_column": "orderId"}), 0)

    [quarantined] = report.quarantined
    assert quarantined.error.startswith(
        "acme_sales.orders: partition column 'orderId' is STRING; BigQuery partitions only on "
        "DATE, DATETIME, TIMESTAMP in the schema of "
    )
    assert "(tables.acme_sales.orders.partition_column or its dataset.*)" in quarantined.error
    assert ORDERS not in bq.tables
