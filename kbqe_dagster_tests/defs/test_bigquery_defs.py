"""The load side in Dagster: one asset per named table and per wildcard dataset, the load
ops in the singleton pool, schedules at the configured cadences, and the events a load run
reports — a materialization per (table, day partition) and the load-time checks."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest

from kbqe_dagster.core.load.lifecycle import ObservedJob, ObservedKind
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.bigquery.events import load_events
from kbqe_dagster.defs.bigquery.jobs import LOAD_POOL
from kbqe_dagster.defs.bigquery.schedules import cron_every
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.loading.report import CompletedLoad, CycleReport
from kbqe_dagster.resources.bigquery import JobReport
from kbqe_dagster_tests.loading.conftest import (
    DEAD_LETTERS,
    ORDERS_V1,
    PAGE_VIEWS,
    TOPIC,
    pipeline,
)
from kbqe_dagster_tests.loading.staged import stage_range

REPO = Path(__file__).resolve().parents[2]
DAY1, DAY2 = date(2024, 9, 12), date(2024, 9, 13)


def test_named_tables_and_wildcard_datasets_become_assets_downstream_of_staging() -> None:
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env="local")
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}

    # examples/pipeline.yaml names acme_sales.orders, admits acme_web.* and names
    # acme_web.clicks in its tables: map (delivery: storage_write), which gives it its own asset;
    # its raw audit topic routes statically to acme_audit.events
    assert {k for k in specs if k.startswith("bigquery/")} == {
        "bigquery/acme_audit/events",
        "bigquery/acme_sales/orders",
        "bigquery/acme_web",
        "bigquery/acme_web/clicks",
        "bigquery/kbqe_dead_letters/dead_letters",
    }
    dead = specs["bigquery/kbqe_dead_letters/dead_letters"]
    assert isinstance(dead.partitions_def, dg.DailyPartitionsDefinition)
    assert isinstance(
        specs["bigquery/acme_sales/orders"].partitions_def, dg.DailyPartitionsDefinition
    )
    assert isinstance(specs["bigquery/acme_web"].partitions_def, dg.MultiPartitionsDefinition)
    assert {d.asset_key for d in dead.deps} == {dg.AssetKey(["staging"])}


def test_load_jobs_run_in_the_singleton_pool_and_schedules_follow_the_config() -> None:
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env="local")

    for job, op in [("load_job", "load_cycle"), ("poll_load_jobs_job", "poll_load_jobs")]:
        assert defs.resolve_job_def(job).graph.node_named(op).definition.pool == LOAD_POOL
    crons = {s.name: s.cron_schedule for s in defs.schedules}
    assert crons == {
        "load_cycle": "*/5 * * * *",
        "poll_load_jobs": "*/2 * * * *",
        "done_file_retention": "*/10 * * * *",
        "duplicate_offsets_schedule": "30 3 * * *",
    }
    stopped = {
        s.name for s in defs.schedules if s.default_status == dg.DefaultScheduleStatus.STOPPED
    }
    assert stopped == {"duplicate_offsets_schedule"}, "the billed query is opt-in"


@pytest.mark.parametrize(
    ("interval", "cron"),
    [
        (timedelta(seconds=30), "* * * * *"),
        (timedelta(minutes=2), "*/2 * * * *"),
        (timedelta(minutes=15), "*/15 * * * *"),
        (timedelta(hours=2), "0 */2 * * *"),
        (timedelta(days=2), "0 0 * * *"),
        # Rounded up, never down: a cadence the quota check accepted must not fire more often.
        (timedelta(minutes=1, seconds=56), "*/2 * * * *"),
        (timedelta(minutes=7), "*/10 * * * *"),
        (timedelta(minutes=9), "*/10 * * * *"),
        (timedelta(minutes=45), "0 * * * *"),
        (timedelta(hours=1), "0 * * * *"),
        (timedelta(hours=5), "0 */6 * * *"),
        (timedelta(hours=13), "0 0 * * *"),
    ],
)
def test_cadences_become_cron_expressions(interval, cron) -> None:
    assert cron_every(interval) == cron


@pytest.mark.parametrize("seconds", range(1, 2 * 86400, 97))
def test_a_cadence_never_fires_more_often_than_asked(seconds: int) -> None:
    """Every cron the schedules get fires at even steps that divide the hour (or the day),
    and the step is at least the cadence (up to a day: longer ones fire daily)."""
    cron = cron_every(timedelta(seconds=seconds))
    minute, hour = cron.split()[:2]
    if minute == "*" or minute.startswith("*/"):
        assert hour == "*"
        step_s = 60 * int(minute.removeprefix("*/") if minute != "*" else 1)
        assert 3600 % step_s == 0
    else:
        assert minute == "0"
        hours = {"*": 1, "0": 24}.get(hour) or int(hour.removeprefix("*/"))
        step_s = 3600 * hours
        assert 86400 % step_s == 0
    assert step_s >= min(seconds, 86400), (seconds, cron)


def test_destinations_give_each_table_its_asset_and_partition_key() -> None:
    destinations = Destinations.from_config(pipeline())

    assert destinations.asset_key("acme_web", "page_views") == dg.AssetKey(
        ["bigquery", "acme_web", "page_views"]
    )
    assert destinations.partition_key("acme_web", "page_views", "2024-09-13") == "2024-09-13"
    assert destinations.asset_key("acme_sales", "orders") == dg.AssetKey(["bigquery", "acme_sales"])
    assert destinations.partition_key("acme_sales", "orders", "2024-09-13") == dg.MultiPartitionKey(
        {"date": "2024-09-13", "table": "orders"}
    )
    assert destinations.asset_key("acme_web", "clicks") is None, "acme_web.* is not allowed"


def test_the_duplicate_check_of_a_wildcard_dataset_covers_its_appended_tables_too() -> None:
    """A table of ``dataset.*`` delivered by storage_write has no load job; the stage run's
    materialization of it (defs/staging/deliveries.py) names it."""
    from kbqe_dagster.core.load.state import LoadState
    from kbqe_dagster.defs.bigquery.checks import _tables_of

    destinations = Destinations.from_config(pipeline())
    key = destinations.asset_key("acme_sales", "clicks")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("bigquery_acme_sales_tables", ["orders"])  # loaded
    assert _tables_of(key, destinations, LoadState(), instance) == {("acme_sales", "orders")}
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            asset_key=key,
            partition=destinations.partition_key("acme_sales", "clicks", "2024-09-13"),
        )
    )
    assert _tables_of(key, destinations, LoadState(), instance) == {
        ("acme_sales", "orders"),
        ("acme_sales", "clicks"),
    }


def _events(report: CycleReport, instance=None, **kwargs) -> list:
    instance = instance or dg.DagsterInstance.ephemeral()
    return list(load_events(report, Destinations.from_config(pipeline()), instance, **kwargs))


def test_a_load_run_reports_one_materialization_per_table_and_day(store, make_coordinator) -> None:
    stage_range(
        store,
        TOPIC,
        0,
        0,
        9,
        [(ORDERS_V1, 4, DAY1), (PAGE_VIEWS, 5, DAY2), (DEAD_LETTERS, 1, DAY2)],
    )
    stage_range(store, TOPIC, 0, 10, 14, [(ORDERS_V1, 5, DAY2)])
    report = make_coordinator().run_cycle()
    instance = dg.DagsterInstance.ephemeral()

    events = _events(report, instance, freshness_limit_s=900)

    materialized = [
        (e.asset_key.to_user_string(), str(e.partition), e.metadata["dagster/row_count"].value)
        for e in events
        if isinstance(e, dg.AssetMaterialization)
    ]
    assert materialized == [
        ("bigquery/acme_sales", "2024-09-12|orders", 4),
        ("bigquery/acme_sales", "2024-09-13|orders", 5),
        ("bigquery/acme_web/page_views", "2024-09-13", 5),
        ("bigquery/kbqe_dead_letters/dead_letters", "2024-09-13", 1),
    ]
    first = next(e for e in events if isinstance(e, dg.AssetMaterialization))
    assert first.metadata["offset_ranges"].value == [
        {"topic": TOPIC, "partition": 0, "first": 0, "last": 9}
    ]
    assert first.metadata["job_id"].value.startswith("kbqe_acme_sales_orders_")
    assert instance.get_dynamic_partitions("bigquery_acme_sales_tables") == ["orders"]
    checks = {
        (e.asset_key.to_user_string(), e.check_name): e.passed
        for e in events
        if isinstance(e, dg.AssetCheckEvaluation)
    }
    assert checks == {
        ("bigquery/acme_sales", "rows_loaded"): True,
        ("bigquery/acme_web/page_views", "rows_loaded"): True,
        ("bigquery/kbqe_dead_letters/dead_letters", "rows_loaded"): True,
        ("bigquery/acme_sales", "no_quarantined_files"): True,
        ("bigquery/acme_web/page_views", "no_quarantined_files"): True,
        ("bigquery/kbqe_dead_letters/dead_letters", "no_quarantined_files"): True,
        ("staging", "pending_files_fresh"): True,
    }


def test_a_quarantined_table_fails_its_check_and_the_others_pass(
    store, bq, make_coordinator
) -> None:
    stage_range(store, TOPIC, 0, 0, 9, [(ORDERS_V1, 4, DAY1), (PAGE_VIEWS, 5, DAY2)])
    bq.fail_tables[("acme_web", "page_views")] = 99

    events = _events(make_coordinator().run_cycle())

    quarantine = {
        e.asset_key.to_user_string(): e
        for e in events
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == "no_quarantined_files"
    }
    assert {k: e.passed for k, e in quarantine.items()} == {
        "bigquery/acme_sales": True,
        "bigquery/acme_web/page_views": False,
    }
    assert quarantine["bigquery/acme_web/page_views"].metadata["errors"].value == {
        "acme_web.page_views": "injected failure"
    }


@pytest.mark.parametrize(
    ("loaded", "passed", "severity"),
    [
        (5, True, dg.AssetCheckSeverity.ERROR),
        (10, False, dg.AssetCheckSeverity.ERROR),
        (None, False, dg.AssetCheckSeverity.WARN),
    ],
    ids=["equal", "duplicated", "unknown"],
)
def test_rows_loaded_compares_job_statistics_with_staged_records(
    store, make_coordinator, loaded, passed, severity
) -> None:
    stage_range(store, TOPIC, 0, 0, 4, [(PAGE_VIEWS, 5, DAY1)])
    done = make_coordinator().run_cycle().completed[0]
    stats = JobReport(ObservedJob(ObservedKind.DONE_OK), output_rows=loaded)
    report = CycleReport(completed=[CompletedLoad(done.job, stats, done.facts, None)])

    (check,) = [
        e
        for e in _events(report)
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == "rows_loaded"
    ]

    assert (check.passed, check.severity) == (passed, severity)
    assert check.metadata["records_staged"].value == 5
