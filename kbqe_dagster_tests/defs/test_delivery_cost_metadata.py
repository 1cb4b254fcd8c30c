"""The cost of a Storage Write delivery in what a stage run reports: each (table, day)
materialization carries the list price of its range's bytes, and the run's ``staging``
materialization the rows, bytes and list price appended per table (committed ranges only)."""

from __future__ import annotations

import dataclasses

import dagster as dg

from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.defs.staging.deliveries import delivery_events
from kbqe_dagster.defs.staging.metadata import group_metadata, stage_metadata
from kbqe_dagster_tests.support.deliveries import CONFIG, range_summary, table_delivery

GIB = 2**30


def test_each_day_s_materialization_carries_the_list_price_of_the_range_s_bytes() -> None:
    delivery = dataclasses.replace(table_delivery(), bytes=4 * GIB)
    events = list(delivery_events([range_summary(delivery)], Destinations.from_config(CONFIG)))
    prices = [
        e.metadata["list_price_usd"].value for e in events if isinstance(e, dg.AssetMaterialization)
    ]
    assert prices == [0.1, 0.1], "$0.025 per GiB before the free tier, on each day of the range"


def test_the_stage_run_reports_rows_bytes_and_price_appended_per_table() -> None:
    summary = range_summary(dataclasses.replace(table_delivery(), bytes=GIB))
    uncommitted = range_summary(
        dataclasses.replace(table_delivery(), bytes=7 * GIB), committed=None
    )
    both = dataclasses.replace(summary, results=summary.results + uncommitted.results)

    assert stage_metadata(both)["storage_write_by_table"].value == {
        "acme.clicks": {"rows": 60, "bytes": GIB, "list_price_usd": 0.025}
    }
    other = dataclasses.replace(summary, topic="app")
    assert group_metadata(("web", "app"), (summary, other))["storage_write_by_table"].value == {
        "acme.clicks": {"rows": 120, "bytes": 2 * GIB, "list_price_usd": 0.05}
    }


def test_a_run_of_load_tables_appends_nothing() -> None:
    summary = dataclasses.replace(range_summary(table_delivery()), results=())
    assert stage_metadata(summary)["storage_write_by_table"].value == {}
