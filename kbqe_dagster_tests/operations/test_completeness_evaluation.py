"""Completeness read from a staging area and Kafka's watermarks (operations/completeness.py):
the loaded position from done files and staged avro files, the idle rule, late records
counted against the declared days, and times kept across retention."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

from kbqe_dagster.operations.completeness import STATE_NAME, evaluate, read_state
from kbqe_dagster_tests.operations.completeness_area import (
    NOW,
    PENDING,
    build,
    config,
    watermarks,
)


def test_the_lagging_partition_holds_the_day_back_and_the_idle_one_does_not(tmp_path: Path):
    store = build(tmp_path)
    report = evaluate(config(), store, watermarks(), NOW)
    orders = report.tables["shop.orders"]
    assert orders.verdict.newest_complete == date(2026, 11, 22)
    assert [h.as_dict() for h in orders.verdict.held_back_by] == [
        # loaded to 10 of 30, at Kafka time 11-23 12:00; needs 11-24 00:05
        {
            "topic": "orders",
            "partition": 1,
            "behind_messages": 20,
            "behind_seconds": 43500.0,
            "loaded_offset": 10,
            "staged_offset": 20,
            "high_watermark": 30,
            "waiting_for": "load",
        }
    ]
    assert orders.verdict.basis == "mixed" and orders.topics == ("clicks", "orders")
    assert not any(f.name == STATE_NAME for f in store.list("_kbqe/")), "a report writes nothing"


def test_once_the_pending_range_is_loaded_the_day_is_complete(tmp_path: Path):
    store = build(tmp_path)
    store.delete(PENDING)
    verdict = evaluate(config(), store, watermarks(), NOW).tables["shop.orders"].verdict
    # orders[1] is at 20 of 30 with Kafka time 11-23 20:00: still behind for 11-23.
    assert verdict.newest_complete == date(2026, 11, 22)
    caught_up = watermarks({("orders", 0): (0, 20), ("orders", 1): (0, 20), ("clicks", 0): (0, 0)})
    verdict = evaluate(config(), store, caught_up, NOW).tables["shop.orders"].verdict
    assert (verdict.newest_complete, verdict.held_back_by) == (date(2026, 11, 23), ())


def test_records_of_a_declared_day_loaded_afterwards_count_as_late(tmp_path: Path):
    store = build(tmp_path)
    first = evaluate(config(), store, watermarks(), NOW, write=True).tables["shop.orders"]
    assert first.newly_complete == (date(2026, 11, 22),)
    assert read_state(store).tables["shop.orders"].newest_complete == date(2026, 11, 22)
    store.delete(PENDING)  # loaded: 3 records of 11-22 (declared complete) and 4 of 11-23
    second = evaluate(config(), store, watermarks(), NOW, write=True).tables["shop.orders"]
    assert second.late_after_complete == {"2026-11-22": 3}
    assert second.to_json()["late_after_complete"] == 3
    third = evaluate(config(), store, watermarks(), NOW, write=True).tables["shop.orders"]
    assert third.late_after_complete == {"2026-11-22": 3}, "each late record is counted once"
    assert third.newly_complete == ()


def test_times_survive_retention_deleting_the_done_files_of_loaded_ranges(tmp_path: Path):
    store = build(tmp_path)
    evaluate(config(), store, watermarks(), NOW, write=True)
    # Retention deletes orders[1]'s loaded 0..9 (a later range exists); its Kafka time is gone
    # from the staging area but not from the kept state.
    store.delete("orders.1.shop.orders.7.0.9.done")
    verdict = evaluate(config(), store, watermarks(), NOW).tables["shop.orders"].verdict
    assert verdict.held_back_by[0].behind_seconds == 43500.0
    assert verdict.newest_complete == date(2026, 11, 22)


def test_a_new_day_is_announced_once_even_when_several_complete_together(tmp_path: Path):
    store = build(tmp_path)
    evaluate(config(), store, watermarks(), NOW - timedelta(days=3), write=True)
    store.delete(PENDING)
    caught_up = watermarks({("orders", 0): (0, 20), ("orders", 1): (0, 20), ("clicks", 0): (0, 0)})
    later = evaluate(config(), store, caught_up, NOW, write=True).tables["shop.orders"]
    assert later.newly_complete == (date(2026, 11, 21), date(2026, 11, 22), date(2026, 11, 23))
    again = evaluate(config(), store, caught_up, NOW, write=True).tables["shop.orders"]
    assert again.newly_complete == ()


def test_a_routed_topic_feeds_the_tables_its_files_name_and_is_remembered(tmp_path: Path):
    from kbqe_dagster.core.config.pipeline import parse_pipeline_config
    from kbqe_dagster.core.protocol.commit import avro_file_name, plan_range_commit, range_marker
    from kbqe_dagster.core.protocol.offsets import OffsetRange
    from kbqe_dagster_tests.operations.completeness_area import NOW, ms

    pipeline = parse_pipeline_config(
        {
            "topics": [{"name": "events", "event_time": {"fields": ["at"]}}],
            "allowed_destinations": ["web.*"],
        }
    )
    store = build(tmp_path)
    rng = OffsetRange("events", 0, 0, 10)
    clicks = avro_file_name(rng, "web", "clicks", 3)
    dead = avro_file_name(rng, "kbqe_dead_letters", "dead_letters", 0)
    plan = plan_range_commit(
        rng, [(clicks, 9), (dead, 1)], created_at=NOW, kafka_ts_max=ms("2026-11-24T05:00:00")
    )
    for done in plan.done_files:
        store.create_only(done.name, plan.content)
    marks = watermarks({("events", 0): (0, 10)})

    report = evaluate(pipeline, store, marks, NOW, write=True)
    assert set(report.tables) == {"web.clicks", "shop.orders"}, "no dead-letter or marker table"
    assert report.tables["web.clicks"].topics == ("events",)
    assert report.tables["web.clicks"].verdict.newest_complete == date(2026, 11, 23)

    # Retention leaves only a later range's marker: the table still has its feeder.
    for done in plan.done_files:
        store.delete(done.name)
    marker = range_marker(OffsetRange("events", 0, 10, 20))
    store.create_only(
        marker.name, plan_range_commit(OffsetRange("events", 0, 10, 20), [], created_at=NOW).content
    )
    again = evaluate(pipeline, store, watermarks({("events", 0): (0, 25)}), NOW)
    assert again.tables["web.clicks"].topics == ("events",)
    held = again.tables["web.clicks"].verdict.held_back_by
    assert [(h.partition, h.behind_messages) for h in held] == [(0, 5)]


def test_new_messages_in_an_idle_partition_never_take_a_declared_day_back(tmp_path: Path):
    """clicks[0] was empty (idle) when 11-23 was declared; 7 unstaged messages arrive in it an
    hour later. The declared day stays, and clicks[0] holds back 11-24 by its 7 messages and
    the time from the moment it was seen caught up (05:00, event_time basis, lateness 1 h)."""
    store = build(tmp_path)
    store.delete(PENDING)
    caught_up = {("orders", 0): (0, 20), ("orders", 1): (0, 20), ("clicks", 0): (0, 0)}
    seen = NOW - timedelta(hours=1)
    declared = evaluate(config(), store, watermarks(caught_up), seen, write=True)
    assert declared.tables["shop.orders"].verdict.newest_complete == date(2026, 11, 23)

    arrived = watermarks({**caught_up, ("clicks", 0): (0, 7)})
    read_only = evaluate(config(), store, arrived, NOW).tables["shop.orders"].verdict
    written = evaluate(config(), store, arrived, NOW, write=True).tables["shop.orders"].verdict
    for verdict in (read_only, written):
        assert (verdict.newest_complete, verdict.next_day) == (
            date(2026, 11, 23),
            date(2026, 11, 24),
        )
        assert [
            (h.topic, h.partition, h.behind_messages, h.behind_seconds, h.waiting_for)
            for h in verdict.held_back_by
        ] == [
            # 11-25 00:00 + 1 h lateness - 11-24 05:00 = 20 h
            ("clicks", 0, 7, 20 * 3600.0, "stage"),
        ]
    assert read_state(store).tables["shop.orders"].newest_complete == date(2026, 11, 23)
