"""A day is declared complete in Dagster once, whoever declares it.

Dagster keeps one runless check evaluation per (check, partition): recording a second one
fails (sqlite: ``UNIQUE constraint failed: asset_check_executions``). A second evaluation
happens when two pipelines (two staging areas, two kept states) load into the same table on
one Dagster instance — a second pipeline on the local stack, the daemon's sensor after a
``kbqe run --until-idle`` of another staging area — or when the kept state was deleted: the
sensor tick then failed with a traceback in the daemon log, and ``kbqe run`` with it. The
day is already declared in Dagster, so nothing is recorded again.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg

from kbqe_dagster.core.completeness.decision import TableCompleteness
from kbqe_dagster.core.config.pipeline import load_pipeline_config
from kbqe_dagster.defs.completeness.checks import DAY_COMPLETE
from kbqe_dagster.defs.completeness.declare import day_complete_events
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import CompletenessReport, TableReport

PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.yaml"
NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
ORDERS = dg.AssetKey(["bigquery", "acme_sales", "orders"])


def report(*days: str) -> CompletenessReport:
    """What an evaluation reports when ``days`` of acme_sales.orders became complete."""
    verdict = TableCompleteness(
        "acme_sales.orders", "kafka_time", date.fromisoformat(max(days)), None, (), 1
    )
    return CompletenessReport(
        NOW,
        {
            "acme_sales.orders": TableReport(
                verdict, {}, tuple(date.fromisoformat(d) for d in days), ("com.acme.events",)
            )
        },
    )


def declare(instance: dg.DagsterInstance, *days: str) -> list[str]:
    """Record what an evaluation declares, as the daemon and the runner do; the days recorded."""
    destinations = Destinations.from_config(load_pipeline_config(PIPELINE))
    events = day_complete_events(report(*days), destinations, instance)
    for event in events:
        instance.report_runless_asset_event(event)
    return [e.partition for e in events]


def passed_days(instance: dg.DagsterInstance) -> list[str]:
    history = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(ORDERS, DAY_COMPLETE), limit=100
    )
    return sorted(r.partition for r in history)


def test_a_day_declared_again_is_not_recorded_twice() -> None:
    with dg.instance_for_test() as instance:  # sqlite storage, as `kbqe dev` and `kbqe run` use
        assert declare(instance, "2026-11-22") == ["2026-11-22"]
        # A second staging area's evaluation declares the same day, and the next one.
        assert declare(instance, "2026-11-22", "2026-11-23") == ["2026-11-23"]
        assert declare(instance, "2026-11-23") == []
        assert passed_days(instance) == ["2026-11-22", "2026-11-23"]
