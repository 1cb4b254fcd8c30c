"""One staging area per (table, topic) (core/load/feeds.py), against the fake BigQuery client.

The incident this guards against (docs/runbook.md, "A table fed from two staging areas"):
`kbqe demo` ran once with ``KBQE_STAGING_URL=gs://kbqe-local/rawdemo-1795767661``, then with
the default ``gs://kbqe-local/staging``. The second staging area had no done file of
``com.acme.events``, staged it again from offset 0, and its load put offsets 0-70 of every
partition into ``acme_sales.orders``, ``acme_web.page_views`` and the dead-letter table a
second time. Each staging area alone was exactly once; the table was not.
"""

from __future__ import annotations

import json
from datetime import date

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.load.feeds import feed_label_key, feed_label_value
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.resources.bigquery import GoogleBigQueryLoads
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.loading.conftest import DEAD_LETTERS, ORDERS_V1, PAGE_VIEWS, TOPIC
from kbqe_dagster_tests.loading.staged import stage_range

DAY = date(2024, 9, 13)


@pytest.fixture
def areas(tmp_path) -> tuple[LocalStagingStore, LocalStagingStore]:
    """The demo's two staging areas, as local directories."""
    return LocalStagingStore(tmp_path / "rawdemo"), LocalStagingStore(tmp_path / "staging")


@pytest.fixture
def coordinator(bq, clock):
    def make(store: LocalStagingStore, config: PipelineConfig | None = None) -> LoadCoordinator:
        from kbqe_dagster_tests.loading.conftest import pipeline

        return LoadCoordinator(store, GoogleBigQueryLoads(bq), config or pipeline(), now=clock)

    return make


def offsets(bq, table) -> list[tuple[str, int, int]]:
    rows = bq.rows(table.dataset, table.table)
    if table is DEAD_LETTERS:
        return sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    return sorted((r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]) for r in rows)


def stage_demo(store, topic: str, partition: int, first: int, last: int) -> None:
    """A demo range: orders, page views and dead letters from ``first``, in that order."""
    n = last - first + 1
    third = n // 3
    stage_range(
        store,
        topic,
        partition,
        first,
        last,
        [(ORDERS_V1, third, DAY), (PAGE_VIEWS, third, DAY), (DEAD_LETTERS, n - 2 * third, DAY)],
    )


def test_a_second_staging_area_restaging_a_topic_from_offset_0_is_refused_not_loaded_twice(
    areas, bq, coordinator
) -> None:
    rawdemo, staging = areas
    stage_demo(rawdemo, TOPIC, 0, 0, 8)
    coordinator(rawdemo).run_cycle()
    before = {t: offsets(bq, t) for t in (ORDERS_V1, PAGE_VIEWS, DEAD_LETTERS)}
    assert [len(v) for v in before.values()] == [3, 3, 3]
    # The second staging area has no done file of the topic: it starts again at offset 0.
    stage_demo(staging, TOPIC, 0, 0, 17)

    report = coordinator(staging).run_cycle()

    assert {t: offsets(bq, t) for t in (ORDERS_V1, PAGE_VIEWS, DEAD_LETTERS)} == before
    assert {q.job.table_id for q in report.quarantined} == {
        ("acme_sales", "orders"),
        ("acme_web", "page_views"),
        ("kbqe_dead_letters", "dead_letters"),
    }
    assert report.completed == []
    assert all(f.name.endswith((".avro", ".done")) for f in staging.list(TOPIC)), "files kept"
    note = json.loads(
        staging.read_bytes(next(q.note for q in report.quarantined if q.job.table == "orders"))
    )
    error = note["error"]
    assert "table acme_sales.orders is fed with topic com.acme.events" in error
    assert feed_label_value(str(rawdemo.root)) in error, "names the other staging area"
    assert str(staging.root) in error, "names this staging area"
    assert "twice" in error and "kbqe load release" in error


def test_the_table_records_the_staging_area_per_topic_after_a_load(areas, bq, coordinator) -> None:
    rawdemo, _ = areas
    stage_demo(rawdemo, TOPIC, 0, 0, 8)

    coordinator(rawdemo).run_cycle()

    for table in (ORDERS_V1, PAGE_VIEWS, DEAD_LETTERS):
        labels = bq.tables[(table.dataset, table.table)].labels
        assert labels == {feed_label_key(TOPIC): feed_label_value(str(rawdemo.root))}


def test_the_same_staging_area_keeps_loading_its_later_ranges(areas, bq, coordinator) -> None:
    rawdemo, _ = areas
    stage_demo(rawdemo, TOPIC, 0, 0, 8)
    coordinator(rawdemo).run_cycle()
    stage_demo(rawdemo, TOPIC, 0, 9, 17)

    report = coordinator(LocalStagingStore(rawdemo.root / "." / "")).run_cycle()

    assert report.quarantined == [] and len(report.completed) == 3
    assert offsets(bq, ORDERS_V1) == [(TOPIC, 0, o) for o in (0, 1, 2, 9, 10, 11)]


def test_other_topics_from_another_staging_area_share_a_table(areas, bq, coordinator) -> None:
    """Two deployments, each with its own staging area and topics, one dead-letter table."""
    rawdemo, staging = areas
    stage_demo(rawdemo, TOPIC, 0, 0, 8)
    coordinator(rawdemo).run_cycle()
    stage_demo(staging, "com.acme.other", 0, 0, 8)

    report = coordinator(staging).run_cycle()

    assert report.quarantined == []
    assert offsets(bq, DEAD_LETTERS) == [
        *((TOPIC, 0, o) for o in (6, 7, 8)),
        *(("com.acme.other", 0, o) for o in (6, 7, 8)),
    ]
    assert bq.tables[("kbqe_dead_letters", "dead_letters")].labels == {
        feed_label_key(TOPIC): feed_label_value(str(rawdemo.root)),
        feed_label_key("com.acme.other"): feed_label_value(str(staging.root)),
    }


def test_a_table_loaded_before_the_guard_is_claimed_by_the_next_staging_area_to_load_it(
    areas, bq, coordinator
) -> None:
    rawdemo, staging = areas
    stage_demo(rawdemo, TOPIC, 0, 0, 8)
    coordinator(rawdemo).run_cycle()
    for table in bq.tables.values():
        table.labels = {"team": "sales"}  # no feed label: loaded by an earlier version
    stage_demo(staging, TOPIC, 0, 9, 17)

    report = coordinator(staging).run_cycle()

    assert report.quarantined == [] and len(report.completed) == 3
    assert bq.tables[("acme_sales", "orders")].labels == {
        "team": "sales",
        feed_label_key(TOPIC): feed_label_value(str(staging.root)),
    }


def test_a_failed_label_update_is_logged_and_the_load_stands(
    areas, bq, coordinator, caplog
) -> None:
    rawdemo, _ = areas
    stage_demo(rawdemo, TOPIC, 0, 0, 8)

    def refuse(table, fields):
        raise RuntimeError("403 labels are read-only for this service account")

    bq.update_table = refuse

    report = coordinator(rawdemo).run_cycle()

    assert len(report.completed) == 3 and len(offsets(bq, ORDERS_V1)) == 3
    assert "could not label it as fed with com.acme.events" in caplog.text
    assert "403 labels are read-only" in caplog.text
