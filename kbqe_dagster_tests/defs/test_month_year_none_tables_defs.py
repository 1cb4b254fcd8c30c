"""MONTH, YEAR and unpartitioned tables in Dagster: the asset's partitions (monthly, a yearly
time window on cron ``0 0 1 1 *``, none), the keys loads are reported on, and the completeness
check of each (``month_complete``, ``year_complete`` per period; ``table_complete`` once per
table, not partitioned)."""

from __future__ import annotations

import warnings
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.defs.bigquery.assets import bigquery_specs
from kbqe_dagster.defs.bigquery.events import load_events
from kbqe_dagster.defs.completeness.checks import TABLE_COMPLETE, completeness_checks
from kbqe_dagster.defs.completeness.sensors import day_complete_events
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import evaluate
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, PAGE_VIEWS, TOPIC
from kbqe_dagster_tests.loading.staged import stage_range
from kbqe_dagster_tests.operations import hourly_completeness_area as area
from kbqe_dagster_tests.operations.completeness_area import watermarks


def _config(tables: dict[str, Any]):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["acme_sales.*", "acme_web.page_views", "acme_ops.*"],
            "load": {"max_retries": 2},
            "tables": tables,
        },
        source="test",
    )


TABLES = {
    "acme_web.page_views": {"partitioning": "month"},
    "acme_sales.*": {"partitioning": "none"},
    "acme_ops.*": {"partitioning": "year"},
    "acme_sales.orders": {"partitioning": "year", "partition_column": "_kafka_timestamp"},
}


def test_month_year_and_unpartitioned_assets_have_their_partitions() -> None:
    destinations = Destinations.from_config(_config(TABLES))
    specs = {s.key.to_user_string(): s for s in bigquery_specs(destinations)}

    views = specs["bigquery/acme_web/page_views"]
    assert isinstance(views.partitions_def, dg.MonthlyPartitionsDefinition)
    assert views.partitions_def.get_partition_keys()[:2] == ["2020-01-01", "2020-02-01"]
    assert views.metadata["partitioning"] == "month"
    orders = specs["bigquery/acme_sales/orders"]
    assert isinstance(orders.partitions_def, dg.TimeWindowPartitionsDefinition)
    assert orders.partitions_def.get_partition_keys()[:2] == ["2020-01-01", "2021-01-01"]
    assert orders.metadata["partition_column"] == "_kafka_timestamp"
    assert "YEAR partitions on `_kafka_timestamp`" in (orders.description or "")
    # dataset.* with none: partitioned by table alone; with year: table × year.
    sales = specs["bigquery/acme_sales"].partitions_def
    assert isinstance(sales, dg.DynamicPartitionsDefinition)
    ops = specs["bigquery/acme_ops"].partitions_def
    assert isinstance(ops, dg.MultiPartitionsDefinition)
    assert {d.name for d in ops.partitions_defs} == {"year", "table"}
    assert destinations.partition_key("acme_sales", "refunds", None) == "refunds"
    assert destinations.partition_key("acme_ops", "audit", "2024-01-01") == dg.MultiPartitionKey(
        {"year": "2024-01-01", "table": "audit"}
    )
    # The definitions load with them (checks included).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dg.Definitions(assets=list(specs.values()), asset_checks=completeness_checks(destinations))


@pytest.mark.parametrize(
    "tables, expected",
    [
        ({"acme_web.page_views": {"partitioning": "month"}},
         [("bigquery/acme_sales", "2024-09-30|orders", 2),
          ("bigquery/acme_sales", "2024-10-01|orders", 1),
          ("bigquery/acme_web/page_views", "2024-09-01", 2),
          ("bigquery/acme_web/page_views", "2024-10-01", 1)]),
        ({"acme_web.page_views": {"partitioning": "none"}, "acme_sales.*": {"partitioning": "year"}},
         [("bigquery/acme_sales", "orders|2024-01-01", 3),
          ("bigquery/acme_web/page_views", "None", 3)]),
    ],
)  # fmt: skip
def test_loads_are_reported_per_month_per_year_or_per_table(
    store, make_coordinator, tables: dict[str, Any], expected: list
) -> None:
    config = _config(tables)
    stage_range(
        store,
        TOPIC,
        0,
        0,
        5,
        [(PAGE_VIEWS, 2, date(2024, 9, 30)), (PAGE_VIEWS, 1, date(2024, 10, 1)),
         (ORDERS_V1, 2, date(2024, 9, 30)), (ORDERS_V1, 1, date(2024, 10, 1))],
    )  # fmt: skip
    report = make_coordinator(config).run_cycle()

    events = [
        e
        for e in load_events(
            report, Destinations.from_config(config), dg.DagsterInstance.ephemeral()
        )
        if isinstance(e, dg.AssetMaterialization)
    ]

    assert [
        (e.asset_key.to_user_string(), str(e.partition), e.metadata["dagster/row_count"].value)
        for e in events
    ] == expected
    assert all("partition_note" not in e.metadata for e in events)


def _declared(tmp_path: Path, partitioning: str) -> tuple[list[dg.AssetCheckEvaluation], Any]:
    store, _ = area.build(tmp_path)
    raw = {**area.PIPELINE, "tables": {"web.clicks": {"partitioning": partitioning}}}
    config = parse_pipeline_config({**raw, "allowed_destinations": ["web.views"]})
    report = evaluate(config, store, watermarks(area.MARKS), area.NOW)
    with dg.instance_for_test() as instance:
        events = day_complete_events(report, Destinations.from_config(config), instance)
        for event in events:  # Dagster records them (a partition key it does not know fails)
            instance.report_runless_asset_event(event)
            if event.partition is None:  # unpartitioned: one evaluation per advance, no UNIQUE
                instance.report_runless_asset_event(event)
    return events, report.tables["web.clicks"].to_json()


@pytest.mark.parametrize(
    "partitioning, check, partition, newest",
    [
        ("month", "month_complete", "2026-10-01", "2026-10-01"),
        ("year", "year_complete", "2025-01-01", "2025-01-01"),
        ("none", TABLE_COMPLETE, None, "2026-11-22"),
    ],
)
def test_completeness_is_declared_per_month_per_year_or_once_per_table(
    tmp_path: Path, partitioning: str, check: str, partition: str | None, newest: str
) -> None:
    # The area's slowest partition is complete until 2026-11-23 14:35 UTC.
    events, doc = _declared(tmp_path, partitioning)

    [event] = [e for e in events if e.asset_key == dg.AssetKey(["bigquery", "web", "clicks"])]
    assert (event.check_name, event.partition, event.passed) == (check, partition, True)
    unit = "day" if partitioning == "none" else partitioning
    assert event.metadata[unit].value == newest
    assert doc["partitioning"] == partitioning and doc["newest_complete"] == newest
