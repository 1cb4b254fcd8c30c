"""HOUR-partitioned tables in Dagster and in the load step: the asset's
``HourlyPartitionsDefinition`` (UTC, keys ``YYYY-MM-DDTHH``), an HOUR load job on the event
hour column, one materialization per hour partition written, and ``hour_complete`` per hour."""

from __future__ import annotations

import warnings
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.defs.bigquery.assets import bigquery_specs
from kbqe_dagster.defs.bigquery.events import load_events
from kbqe_dagster.defs.completeness.checks import (
    DAY_COMPLETE,
    HOUR_COMPLETE,
    completeness_checks,
)
from kbqe_dagster.defs.completeness.sensors import day_complete_events
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import evaluate
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, PAGE_VIEWS, TOPIC
from kbqe_dagster_tests.loading.staged import stage_range
from kbqe_dagster_tests.operations import hourly_completeness_area as hourly_area
from kbqe_dagster_tests.operations.completeness_area import watermarks

DAY1 = date(2024, 9, 12)


def _config(tables: dict[str, Any]):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["acme_sales.*", "acme_web.page_views"],
            "load": {"max_retries": 2},
            "tables": tables,
        },
        source="test",
    )


HOURLY = {"acme_web.page_views": {"partitioning": "hour"}, "acme_sales.*": {"partitioning": "hour"}}


def test_an_hour_table_s_asset_has_hourly_utc_partitions_from_the_daily_start() -> None:
    destinations = Destinations.from_config(_config(HOURLY))
    specs = {s.key.to_user_string(): s for s in bigquery_specs(destinations)}

    views = specs["bigquery/acme_web/page_views"].partitions_def
    assert isinstance(views, dg.HourlyPartitionsDefinition)
    assert views.timezone == "UTC"
    assert views.get_first_partition_key() == "2020-01-01T00"
    assert specs["bigquery/acme_web/page_views"].metadata["partitioning"] == "hour"
    wildcard = specs["bigquery/acme_sales"].partitions_def
    assert isinstance(wildcard, dg.MultiPartitionsDefinition)
    assert {d.name for d in wildcard.partitions_defs} == {"hour", "table"}
    assert destinations.partition_key("acme_sales", "orders", "2024-09-12T07") == (
        dg.MultiPartitionKey({"hour": "2024-09-12T07", "table": "orders"})
    )
    dead = specs["bigquery/kbqe_dead_letters/dead_letters"].partitions_def
    assert isinstance(dead, dg.DailyPartitionsDefinition), "dead letters stay DAY"


def test_an_exact_tables_key_under_a_day_wildcard_gets_an_asset_of_its_own() -> None:
    destinations = Destinations.from_config(
        _config({"acme_sales.orders": {"partitioning": "hour"}})
    )
    assert destinations.asset_key("acme_sales", "orders") == dg.AssetKey(
        ["bigquery", "acme_sales", "orders"]
    )
    assert destinations.partition_key("acme_sales", "orders", "2024-09-12T07") == "2024-09-12T07"
    assert destinations.asset_key("acme_sales", "refunds") == dg.AssetKey(
        ["bigquery", "acme_sales"]
    )


def test_an_hour_table_loads_with_hour_partitioning_and_reports_each_hour(
    store, bq, make_coordinator
) -> None:
    config = _config(HOURLY)
    stage_range(
        store,
        TOPIC,
        0,
        0,
        9,
        [(PAGE_VIEWS, 6, DAY1), (ORDERS_V1, 4, DAY1)],
        hour_of=lambda offset: 7 if offset < 4 else 8,
    )
    report = make_coordinator(config).run_cycle()

    views = bq.tables[("acme_web", "page_views")]
    assert (views.time_partitioning_type, views.time_partitioning_field) == ("HOUR", "_event_hour")
    events = list(
        load_events(report, Destinations.from_config(config), dg.DagsterInstance.ephemeral())
    )
    materialized = [
        (e.asset_key.to_user_string(), str(e.partition), e.metadata["dagster/row_count"].value)
        for e in events
        if isinstance(e, dg.AssetMaterialization)
    ]
    # offsets 0..5 are page views (0..3 at 07:00, 4..5 at 08:00), 6..9 orders at 08:00
    assert materialized == [
        ("bigquery/acme_sales", "2024-09-12T08|orders", 4),
        ("bigquery/acme_web/page_views", "2024-09-12T07", 4),
        ("bigquery/acme_web/page_views", "2024-09-12T08", 2),
    ]


def test_a_day_table_beside_an_hour_table_still_loads_and_reports_per_day(
    store, bq, make_coordinator
) -> None:
    config = _config({"acme_web.page_views": {"partitioning": "hour"}})
    stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 4, DAY1)])
    report = make_coordinator(config).run_cycle()

    orders = bq.tables[("acme_sales", "orders")]
    assert (orders.time_partitioning_type, orders.time_partitioning_field) == ("DAY", "_event_date")
    (event,) = [
        e
        for e in load_events(
            report, Destinations.from_config(config), dg.DagsterInstance.ephemeral()
        )
        if isinstance(e, dg.AssetMaterialization)
    ]
    assert str(event.partition) == "2024-09-12|orders"


def test_files_staged_before_a_table_became_hourly_are_reported_for_the_table_as_a_whole(
    store, make_coordinator
) -> None:
    config = _config(HOURLY)
    stage_range(store, TOPIC, 0, 0, 2, [(PAGE_VIEWS, 3, DAY1)])  # no hours in the manifest
    report = make_coordinator(config).run_cycle()
    (event,) = [
        e
        for e in load_events(
            report, Destinations.from_config(config), dg.DagsterInstance.ephemeral()
        )
        if isinstance(e, dg.AssetMaterialization)
    ]
    assert event.partition is None
    assert "not recorded" in event.metadata["partition_note"].value


def test_hour_tables_get_hour_complete_checks_reported_per_hour(tmp_path: Path) -> None:
    store, _ = hourly_area.build(tmp_path)
    config = parse_pipeline_config({**hourly_area.PIPELINE, "allowed_destinations": ["web.views"]})
    destinations = Destinations.from_config(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (checks,) = completeness_checks(destinations)
    names = {k.asset_key.to_user_string(): k.name for k in checks.check_keys}
    assert names == {"bigquery/web/clicks": HOUR_COMPLETE, "bigquery/web/views": DAY_COMPLETE}

    report = evaluate(config, store, watermarks(hourly_area.MARKS), hourly_area.NOW)
    with dg.instance_for_test() as instance:
        (event,) = day_complete_events(report, destinations, instance)
    assert (event.asset_key, event.check_name, event.partition, event.passed) == (
        dg.AssetKey(["bigquery", "web", "clicks"]),
        HOUR_COMPLETE,
        "2026-11-23T13",
        True,
    )
    assert event.metadata["hour"].value == "2026-11-23T13"
