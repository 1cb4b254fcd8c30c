"""Counters and histograms folded from the Dagster event log: the events are the ones the
stage asset and the load op really produce (``stage_metadata``, ``materialization``), stored
in a real (ephemeral) instance and read back incrementally."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from kbqe_dagster.core.config.pipeline import load_pipeline_config
from kbqe_dagster.core.load.lifecycle import ObservedJob, ObservedKind
from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord
from kbqe_dagster.core.protocol.offsets import RangePlan
from kbqe_dagster.defs.bigquery.events import materialization
from kbqe_dagster.defs.keys import STAGING_KEY, Destinations
from kbqe_dagster.defs.staging.metadata import group_metadata, stage_metadata
from kbqe_dagster.loading.manifests import FileFacts
from kbqe_dagster.loading.report import CompletedLoad
from kbqe_dagster.observability.event_log import EventLogFold
from kbqe_dagster.resources.bigquery import JobReport
from kbqe_dagster.staging.context import RangeResult
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.range_sink import TableDelivery

REPO = Path(__file__).resolve().parents[2]
T = "com.acme.events"
NOW = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def shared_instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def instance(shared_instance):
    """An empty event log per test; one instance per module (creating one takes 0.4 s)."""
    shared_instance.wipe()
    return shared_instance


@pytest.fixture
def fold(instance) -> EventLogFold:
    return EventLogFold(lambda: instance, keep_jobs_for=timedelta(days=8))


def range_result(
    partition: int,
    messages: int,
    records: int,
    by_dataset: dict[str, int],
    dead: dict[str, int] | None = None,
) -> RangeResult:
    return RangeResult(
        T,
        partition,
        0,
        messages - 1,
        messages - 1,
        messages,
        records,
        files=tuple((f"{T}.{partition}.{d}.t.1.0.avro", 1) for d in by_dataset),
        bytes_written=sum(by_dataset.values()),
        dead_letters=dead or {},
        skipped={},
        bytes_by_dataset=by_dataset,
    )


def stage_run(*results: RangeResult, seconds: float = 42.0, orphans: int = 0) -> dict:
    prep = Preparation((), tuple(f"orphan{i}.avro" for i in range(orphans)), (), RangePlan((), ()))
    return stage_metadata(StageSummary(T, prep, results, seconds))


def report(instance, key: dg.AssetKey, metadata: dict, observation: bool = False) -> None:
    event = (dg.AssetObservation if observation else dg.AssetMaterialization)(
        asset_key=key, metadata=metadata
    )
    instance.report_runless_asset_event(event)


def test_stage_runs_add_up_per_topic_and_bytes_per_dataset(instance, fold) -> None:
    report(
        instance,
        STAGING_KEY,
        stage_run(
            range_result(
                0,
                100,
                97,
                {"acme_sales": 4000, "kbqe_dead_letters": 300},
                dead={"bad_magic": 2, "tombstone": 1},
            ),
            range_result(1, 50, 50, {"acme_web": 1500}),
            orphans=2,
        ),
    )

    totals = fold.refresh()

    topic = totals.topics[T]
    assert (topic.runs, topic.messages, topic.records) == (1, 150, 147)
    assert (topic.bytes_written, topic.files_written, topic.orphans_deleted) == (5800, 3, 2)
    assert dict(topic.dead_letters) == {"bad_magic": 2, "tombstone": 1}
    assert dict(totals.bytes_by_dataset) == {
        (T, "acme_sales"): 4000,
        (T, "kbqe_dead_letters"): 300,
        (T, "acme_web"): 1500,
    }


def test_a_grouped_stage_run_counts_as_one_run_of_each_of_its_topics(instance, fold) -> None:
    prep = Preparation((), ("orphan.avro",), (), RangePlan((), ()))
    other = dataclasses.replace(range_result(0, 20, 20, {"acme_web": 700}), topic="shop.orders")
    summaries = (
        StageSummary(
            T, prep, (range_result(0, 100, 97, {"acme_sales": 4000}, dead={"bad_magic": 3}),), 9.0
        ),
        StageSummary("shop.orders", prep, (other,), 9.0),
    )
    report(instance, STAGING_KEY, dict(group_metadata((T, "shop.orders"), summaries)))

    totals = fold.refresh()

    assert {
        t: (v.runs, v.messages, v.records, v.orphans_deleted) for t, v in totals.topics.items()
    } == {T: (1, 100, 97, 1), "shop.orders": (1, 20, 20, 1)}
    assert dict(totals.topics[T].dead_letters) == {"bad_magic": 3}
    assert dict(totals.bytes_by_dataset) == {
        (T, "acme_sales"): 4000,
        ("shop.orders", "acme_web"): 700,
    }


def test_each_event_is_counted_once_across_refreshes(instance, fold) -> None:
    report(instance, STAGING_KEY, stage_run(range_result(0, 10, 10, {"acme_sales": 10})))
    assert fold.refresh().topics[T].messages == 10
    assert fold.refresh().topics[T].messages == 10, "nothing new: nothing added"

    report(instance, STAGING_KEY, stage_run(range_result(0, 5, 5, {"acme_sales": 10})))
    totals = fold.refresh()

    assert (totals.topics[T].runs, totals.topics[T].messages) == (2, 15)


def test_a_fold_that_starts_over_rebuilds_the_same_totals(instance, fold) -> None:
    for n in (10, 20, 30):
        report(instance, STAGING_KEY, stage_run(range_result(0, n, n, {"acme_sales": n})))
    first = fold.refresh()

    again = EventLogFold(lambda: instance, keep_jobs_for=timedelta(days=8), page=2).refresh()

    assert again.topics[T].messages == first.topics[T].messages == 60
    assert again.bytes_by_dataset == first.bytes_by_dataset


@pytest.mark.parametrize(
    ("seconds", "bucket"), [(0.5, 1.0), (1.0, 1.0), (42.0, 60.0), (7200.0, float("inf"))]
)
def test_stage_run_seconds_fall_into_cumulative_buckets(instance, fold, seconds, bucket) -> None:
    report(instance, STAGING_KEY, stage_run(range_result(0, 10, 10, {"a": 1}), seconds=seconds))

    histogram = fold.refresh().topics[T].run_seconds
    cumulative = dict(histogram.cumulative())

    assert cumulative[bucket] == 1
    below = [le for le, n in histogram.cumulative() if n == 0]
    assert bucket not in below and cumulative[float("inf")] == 1
    assert histogram.total == seconds


def test_runs_from_before_bytes_per_dataset_count_under_unknown(instance, fold) -> None:
    metadata = stage_run(range_result(0, 10, 10, {"acme_sales": 700}))
    del metadata["bytes_written_by_dataset"]
    report(instance, STAGING_KEY, metadata)

    assert dict(fold.refresh().bytes_by_dataset) == {(T, "unknown"): 700}


def test_retention_observations_count_deleted_done_files_and_sensor_snapshots_do_not(
    instance, fold
) -> None:
    report(instance, STAGING_KEY, {"done_files_deleted": 4, "done_files_kept": 9}, True)
    report(instance, STAGING_KEY, {"pending_files": 12, "done_files": 30}, True)
    report(instance, STAGING_KEY, {"done_files_deleted": 1, "done_files_kept": 9}, True)

    assert fold.refresh().done_files_deleted == 5


def test_load_cycles_that_deleted_leftovers_count_them(instance, fold) -> None:
    report(instance, STAGING_KEY, {"leftovers_deleted": 3, "leftover_files": ["a", "b", "c"]}, True)
    report(instance, STAGING_KEY, {"pending_files": 12, "done_files": 30}, True)
    report(instance, STAGING_KEY, {"leftovers_deleted": 1, "leftover_files": ["d"]}, True)

    totals = fold.refresh()
    assert (totals.leftovers_deleted, totals.done_files_deleted) == (4, 0)


def completed_load(retries: int) -> CompletedLoad:
    """A job over two files of orders: the first has records on two days, the second on one."""
    files = (f"{T}.0.acme_sales.orders.3.0.avro", f"{T}.1.acme_sales.orders.3.0.avro")
    done = (f"{T}.0.acme_sales.orders.3.0.9.done", f"{T}.1.acme_sales.orders.3.0.4.done")
    ids = tuple(f"kbqe_orders_{i}" for i in range(retries + 1))
    job = LoadJobRecord(
        ids[-1],
        "acme_sales",
        "orders",
        3,
        files,
        NOW,
        NOW,
        done_files=done,
        records=15,
        status=JobStatus.SUCCEEDED,
        retry_count=retries,
        attempt_ids=ids,
    )
    facts = {
        files[0]: FileFacts(10, {"2024-09-12": 4, "2024-09-13": 6}),
        files[1]: FileFacts(5, {"2024-09-13": 5}),
    }
    return CompletedLoad(
        job, JobReport(ObservedJob(ObservedKind.DONE_OK), output_rows=15), facts, input_bytes=2048
    )


def test_a_load_job_reported_per_day_counts_once_with_its_distinct_files(instance, fold) -> None:
    config = load_pipeline_config(REPO / "examples" / "pipeline.yaml")
    destinations = Destinations.from_config(config)
    completed = completed_load(retries=2)
    parts = completed.partitions()
    assert len(parts) == 2 and sum(p.files for p in parts) == 3, "one file is in both days"
    for part in parts:
        event = materialization(completed, part, destinations)
        assert event is not None
        instance.report_runless_asset_event(event)

    loads = fold.refresh().tables[("acme_sales", "orders")]

    assert (loads.jobs, loads.attempts, loads.failed_attempts) == (1, 3, 2)
    assert (loads.files_deleted, loads.rows) == (2, 15)
    assert loads.bytes == 2048, "the job's input bytes once, not once per day"


def appended(
    partition: int, table: str, rows: int, n_bytes: int, *, committed: bool = True
) -> RangeResult:
    """A range that appended ``rows`` rows of ``n_bytes`` to ``acme_web.<table>`` through the
    Storage Write API (``committed=False``: an attempt that did not commit)."""
    delivery = TableDelivery(
        "acme_web",
        table,
        f"streams/{table}-{partition}",
        0,
        rows,
        rows,
        0,
        n_bytes,
        (("2024-09-13", rows),),
        requests=1,
    )
    result = range_result(partition, rows, rows, {})
    return dataclasses.replace(
        result, delivered=(delivery,), committed_last=result.committed_last if committed else None
    )


def test_bytes_appended_through_storage_write_add_up_per_table(instance, fold) -> None:
    report(
        instance,
        STAGING_KEY,
        stage_run(
            appended(0, "clicks", 10, 1_000),
            appended(1, "clicks", 5, 600),
            appended(2, "clicks", 7, 999, committed=False),
            appended(0, "taps", 3, 90),
        ),
    )
    prep = Preparation((), (), (), RangePlan((), ()))
    other = dataclasses.replace(appended(0, "clicks", 2, 250), topic="shop.orders")
    report(
        instance,
        STAGING_KEY,
        dict(
            group_metadata(
                (T, "shop.orders"),
                (
                    StageSummary(T, prep, (appended(1, "clicks", 1, 50),), 1.0),
                    StageSummary("shop.orders", prep, (other,), 1.0),
                ),
            )
        ),
    )

    appends = fold.refresh().appends

    assert {k: (v.rows, v.bytes) for k, v in appends.items()} == {
        ("acme_web", "clicks"): (18, 1_900),
        ("acme_web", "taps"): (3, 90),
    }, "committed ranges only, every topic of a grouped run once"


def test_runs_from_before_storage_write_delivery_append_nothing(instance, fold) -> None:
    metadata = stage_run(range_result(0, 10, 10, {"acme_sales": 10}))
    del metadata["storage_write_by_table"]
    report(instance, STAGING_KEY, metadata)

    assert fold.refresh().appends == {}
