"""Downstream of an HOUR table, the completeness automation works per hour: an hourly asset
with ``once_after_day_complete(table, check=HOUR_COMPLETE)`` is requested once per hour,
after ``completeness_sensor`` reported ``hour_complete`` for it (examples/hourly.yaml)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from kbqe_dagster.core.completeness.decision import HOUR_UNIT, TableCompleteness
from kbqe_dagster.core.config.pipeline import load_pipeline_config
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.completeness.automation import HOUR_COMPLETE, once_after_day_complete
from kbqe_dagster.defs.completeness.sensors import day_complete_events
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import CompletenessReport, TableReport

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "hourly.yaml"
VIEWS = dg.AssetKey(["bigquery", "acme_web", "page_views"])
NOW = datetime(2026, 11, 23, 18, 0, tzinfo=UTC)


def _defs() -> tuple[dg.Definitions, dg.AssetKey]:
    destinations = Destinations.from_config(load_pipeline_config(PIPELINE))

    @dg.asset(
        key=["reports", "page_views_hourly"],
        deps=[VIEWS],
        partitions_def=destinations.hourly,
        automation_condition=once_after_day_complete(VIEWS, check=HOUR_COMPLETE),
    )
    def page_views_hourly() -> None:
        """Page views per hour, once the hour is complete."""

    kbqe = build_definitions(str(PIPELINE), env="local")
    return dg.Definitions.merge(
        kbqe, dg.Definitions(assets=[page_views_hourly])
    ), page_views_hourly.key


def _declare(instance: dg.DagsterInstance, *hours: str) -> None:
    periods = tuple(HOUR_UNIT.parse(h) for h in hours)
    verdict = TableCompleteness(
        "acme_web.page_views", "kafka_time", max(periods), None, (), 1, HOUR_UNIT
    )
    report = CompletenessReport(
        NOW, {"acme_web.page_views": TableReport(verdict, {}, periods, ("com.acme.events",))}
    )
    destinations = Destinations.from_config(load_pipeline_config(PIPELINE))
    for event in day_complete_events(report, destinations, instance):
        assert (event.check_name, event.partition in hours) == (HOUR_COMPLETE, True)
        instance.report_runless_asset_event(event)


def _requested(result, key: dg.AssetKey) -> set[str]:
    return set(result.get_requested_partitions(key)) if result.total_requested else set()


def test_each_hour_is_requested_once_after_it_is_complete() -> None:
    defs, key = _defs()
    instance = dg.DagsterInstance.ephemeral()
    instance.report_runless_asset_event(dg.AssetMaterialization(VIEWS, partition="2026-11-23T14"))

    def tick(previous=None):
        return dg.evaluate_automation_conditions(
            defs=defs,
            instance=instance,
            evaluation_time=NOW,
            cursor=previous.cursor if previous is not None else None,
        )

    first = tick()
    assert _requested(first, key) == set(), "a load alone requests nothing"
    _declare(instance, "2026-11-23T14", "2026-11-23T15")
    second = tick(first)
    assert _requested(second, key) == {"2026-11-23T14", "2026-11-23T15"}
    instance.report_runless_asset_event(dg.AssetMaterialization(VIEWS, partition="2026-11-23T14"))
    assert _requested(tick(second), key) == set(), "a late load does not request it again"
