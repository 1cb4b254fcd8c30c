"""Completeness of a ``delivery: storage_write`` table (operations/completeness.py): the
delivered position stands for the loaded one. A committed range whose rows went through the
Storage Write API has no avro file (its done file's manifest says where its rows are), so it
counts as soon as its done file exists; an open intent is not a commit and counts for
nothing; a range staged as avro files before the table switched to storage_write still holds
the position until it is loaded.

    shop.orders ← orders (static, kafka_time, lateness 5m), delivery: storage_write
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.protocol.commit import Delivered, avro_file_name, plan_range_commit
from kbqe_dagster.core.protocol.delivery import Intent, intent_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.operations.completeness import evaluate
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.operations.completeness_area import ms, watermarks

UTC = UTC
NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
STREAM = "projects/p/datasets/shop/tables/orders/streams/s1"
SCHEMA_ID = 7


def config() -> PipelineConfig:
    return parse_pipeline_config(
        {
            "topics": [
                {
                    "name": "orders",
                    "routing": {"mode": "static", "dataset": "shop", "table": "orders"},
                    "event_time": {"kafka_timestamp_fallback": True},
                }
            ],
            "tables": {"shop.orders": {"delivery": "storage_write"}},
        },
        source="test.yaml",
    )


def commit(
    store: LocalStagingStore,
    partition: int,
    start: int,
    end: int,
    kafka: str,
    *,
    delivered_at: int | None = None,
    pending_avro: bool = False,
) -> None:
    """Commit ``start..end-1`` of orders[partition] as the stage task does: delivered at row
    ``delivered_at`` of the stream (no avro file), or staged as an avro file (still there when
    ``pending_avro``, i.e. not loaded yet)."""
    rng = OffsetRange("orders", partition, start, end)
    avro = avro_file_name(rng, "shop", "orders", SCHEMA_ID)
    day = kafka[:10]
    delivered = (
        {avro.name: Delivered(STREAM, delivered_at, rng.size)} if delivered_at is not None else None
    )
    plan = plan_range_commit(
        rng,
        [(avro, rng.size)],
        created_at=NOW,
        days={avro.name: {day: rng.size}},
        kafka_ts_max=ms(kafka),
        delivered=delivered,
    )
    if pending_avro:
        store.put_bytes(avro.name, b"Obj\x01 pending")
    for done in plan.done_files:
        store.create_only(done.name, plan.content)


def open_intent(store: LocalStagingStore, partition: int, start: int, end: int) -> None:
    """A range whose appends began and whose done file does not exist (a crash between)."""
    rng = OffsetRange("orders", partition, start, end)
    intent = Intent(
        "orders", partition, "shop", "orders", start, end - 1, STREAM, 10, ((SCHEMA_ID, rng.size),)
    )
    store.create_only(intent_name(rng, "shop", "orders", SCHEMA_ID).name, intent.encode())


def orders(store: LocalStagingStore, marks: dict):
    return evaluate(config(), store, watermarks(marks), NOW).tables["shop.orders"].verdict


def test_a_delivered_range_counts_once_its_done_file_exists(tmp_path: Path):
    store = LocalStagingStore(tmp_path)
    commit(store, 0, 0, 10, "2026-11-23T23:00:00", delivered_at=0)
    commit(store, 1, 0, 10, "2026-11-24T01:00:00", delivered_at=0)
    verdict = orders(store, {("orders", 0): (0, 20), ("orders", 1): (0, 10)})
    # orders[0] delivered to 10 of 20 at Kafka time 11-23 23:00; orders[1] caught up.
    assert [
        (h.partition, h.as_dict()["loaded_offset"], h.as_dict()["staged_offset"])
        for h in verdict.held_back_by
    ] == [(0, 10, 10)]
    assert verdict.newest_complete == date(2026, 11, 22)
    commit(store, 0, 10, 20, "2026-11-24T02:00:00", delivered_at=10)
    verdict = orders(store, {("orders", 0): (0, 20), ("orders", 1): (0, 10)})
    assert (verdict.newest_complete, verdict.held_back_by) == (date(2026, 11, 23), ())


def test_an_open_intent_is_not_delivered(tmp_path: Path):
    store = LocalStagingStore(tmp_path)
    commit(store, 0, 0, 10, "2026-11-24T01:00:00", delivered_at=0)
    open_intent(store, 0, 10, 20)  # some of its rows may be in the table: not all of them
    verdict = orders(store, {("orders", 0): (0, 20)})
    assert [h.as_dict()["loaded_offset"] for h in verdict.held_back_by] == [10]
    assert verdict.newest_complete == date(2026, 11, 23)  # 0..9 reached 11-24 01:00


def test_a_range_staged_before_the_switch_holds_the_position_until_loaded(tmp_path: Path):
    store = LocalStagingStore(tmp_path)
    commit(store, 0, 0, 10, "2026-11-23T23:00:00", pending_avro=True)  # load, not loaded yet
    commit(store, 0, 10, 20, "2026-11-24T01:00:00", delivered_at=0)  # after the switch
    verdict = orders(store, {("orders", 0): (0, 20)})
    assert [(h.as_dict()["loaded_offset"], h.waiting_for) for h in verdict.held_back_by] == [
        (0, "load")
    ]
    store.delete(
        avro_file_name(OffsetRange("orders", 0, 0, 10), "shop", "orders", SCHEMA_ID).name
    )  # loaded
    verdict = orders(store, {("orders", 0): (0, 20)})
    assert (verdict.newest_complete, verdict.held_back_by) == (date(2026, 11, 23), ())
