"""What a stage run reports for a table delivered through the Storage Write API
(defs/staging/deliveries.py): a materialization per event day on the table's asset, and the
rows_loaded check on the same facts."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.defs.staging.deliveries import delivery_events
from kbqe_dagster_tests.support.deliveries import CONFIG, STREAM, range_summary, table_delivery


def test_one_materialization_per_event_day_on_the_table_s_asset() -> None:
    events = list(
        delivery_events([range_summary(table_delivery())], Destinations.from_config(CONFIG))
    )
    materializations = [e for e in events if isinstance(e, dg.AssetMaterialization)]
    assert [
        (m.asset_key.path, m.partition, m.metadata["dagster/row_count"].value)
        for m in materializations
    ] == [
        (["bigquery", "acme", "clicks"], "2026-11-24", 20),
        (["bigquery", "acme", "clicks"], "2026-11-25", 40),
    ]
    metadata = materializations[0].metadata
    assert (
        metadata["stream"].value,
        metadata["rows_appended"].value,
        metadata["bytes_appended"].value,
        metadata["delivery"].value,
    ) == (STREAM, 60, 4096, "storage_write")
    assert metadata["stream_rows"].value == [40, 99]
    assert metadata["offset_ranges"].value == [
        {"topic": "web", "partition": 0, "first": 0, "last": 99}
    ]


def test_rows_loaded_passes_when_the_stream_holds_every_record_not_refused() -> None:
    events = list(
        delivery_events(
            [range_summary(table_delivery(rows=58, refused=2))], Destinations.from_config(CONFIG)
        )
    )
    (check,) = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
    assert (check.check_name, check.passed) == ("rows_loaded", True)


def test_rows_loaded_fails_when_rows_are_missing_from_the_stream() -> None:
    events = list(
        delivery_events(
            [range_summary(table_delivery(rows=57, refused=2))], Destinations.from_config(CONFIG)
        )
    )
    (check,) = [e for e in events if isinstance(e, dg.AssetCheckEvaluation)]
    assert not check.passed


def test_an_attempt_that_did_not_commit_reports_nothing() -> None:
    assert (
        list(
            delivery_events(
                [range_summary(table_delivery(), committed=None)], Destinations.from_config(CONFIG)
            )
        )
        == []
    )
