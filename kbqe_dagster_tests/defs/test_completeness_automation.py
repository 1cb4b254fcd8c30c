"""The example daily aggregate (examples/completeness_automation.py) is requested once per
day, after that day's ``day_complete`` check passed on its upstream table — evaluated with
Dagster's automation test utility against an ephemeral instance. The check evaluations are
the ones ``completeness_sensor`` reports (``day_complete_events``), from a report saying
which days became complete; the loads are materializations of the upstream partitions."""

from __future__ import annotations

import importlib.util
from datetime import UTC, date, datetime
from pathlib import Path

import dagster as dg
import pytest

from kbqe_dagster.core.completeness.decision import TableCompleteness
from kbqe_dagster.core.config.pipeline import load_pipeline_config
from kbqe_dagster.defs.completeness.checks import DAY_COMPLETE
from kbqe_dagster.defs.completeness.sensors import day_complete_events
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import CompletenessReport, TableReport

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "completeness_automation.py"
PIPELINE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.yaml"
NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("completeness_automation_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def defs(example, monkeypatch) -> dg.Definitions:
    """The example's code location: kbqe's definitions (the day_complete checks included)
    and the aggregate, on the local environment's resources (nothing is connected)."""
    monkeypatch.setenv("KBQE_ENV", "local")
    monkeypatch.delenv("KBQE_PIPELINE_CONFIG", raising=False)
    return example.defs()


def declare(instance: dg.DagsterInstance, *days: str) -> None:
    """What a sensor tick reports when ``days`` of acme_sales.orders became complete."""
    newest = date.fromisoformat(max(days))
    verdict = TableCompleteness("acme_sales.orders", "kafka_time", newest, None, (), 1)
    report = CompletenessReport(
        NOW,
        {
            "acme_sales.orders": TableReport(
                verdict, {}, tuple(date.fromisoformat(d) for d in days), ("com.acme.events",)
            )
        },
    )
    destinations = Destinations.from_config(load_pipeline_config(PIPELINE))
    for event in day_complete_events(report, destinations, instance):
        instance.report_runless_asset_event(event)


def load(instance: dg.DagsterInstance, table: dg.AssetKey, day: str) -> None:
    instance.report_runless_asset_event(dg.AssetMaterialization(table, partition=day))


def requested(result, key: dg.AssetKey) -> set[str]:
    return set(result.get_requested_partitions(key)) if result.total_requested else set()


def tick(defs, instance, previous=None):
    return dg.evaluate_automation_conditions(
        defs=defs,
        instance=instance,
        evaluation_time=NOW,
        cursor=previous.cursor if previous is not None else None,
    )


def test_each_day_is_requested_once_after_it_is_complete_and_not_before(example, defs):
    key, orders = example.orders_daily.key, example.ORDERS
    instance = dg.DagsterInstance.ephemeral()
    load(instance, orders, "2026-11-21")  # loads materialize the day many times: no request
    first = tick(defs, instance)
    assert requested(first, key) == set()

    declare(instance, "2026-11-21")
    second = tick(defs, instance, first)
    assert requested(second, key) == {"2026-11-21"}

    # The next tick, and a late event's load into the complete day: nothing more.
    load(instance, orders, "2026-11-21")
    third = tick(defs, instance, second)
    assert requested(third, key) == set()

    # Two days completing together (a lagging partition caught up) are both requested once;
    # a day without any load (nothing happened that day) too.
    load(instance, orders, "2026-11-23")
    declare(instance, "2026-11-22", "2026-11-23")
    fourth = tick(defs, instance, third)
    assert requested(fourth, key) == {"2026-11-22", "2026-11-23"}
    assert requested(tick(defs, instance, fourth), key) == set()


def test_the_day_complete_evaluation_names_the_partitions_latest_load(example):
    instance = dg.DagsterInstance.ephemeral()
    load(instance, example.ORDERS, "2026-11-23")
    record = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=example.ORDERS, asset_partitions=["2026-11-23"]), limit=1
    ).records[0]
    (evaluation,) = day_complete_events(
        CompletenessReport(
            NOW,
            {
                "acme_sales.orders": TableReport(
                    TableCompleteness(
                        "acme_sales.orders", "kafka_time", date(2026, 11, 23), None, (), 1
                    ),
                    {},
                    (date(2026, 11, 23),),
                    ("com.acme.events",),
                )
            },
        ),
        Destinations.from_config(load_pipeline_config(PIPELINE)),
        instance,
    )
    assert evaluation.partition == "2026-11-23" and evaluation.passed
    assert evaluation.target_materialization_data.storage_id == record.storage_id
    assert evaluation.metadata["day"].value == "2026-11-23"


def test_the_example_adds_its_aggregate_to_the_whole_pipeline(example, defs):
    graph = defs.resolve_asset_graph()
    assert example.orders_daily.key in graph.get_all_asset_keys()
    assert dg.AssetCheckKey(example.ORDERS, DAY_COMPLETE) in graph.asset_check_keys
