"""Completeness of an HOUR-partitioned table: the same rule with the hour as the unit — a
lagging partition holds the next hour back, an idle one never does, late records are counted
per hour, and ``kbqe completeness --json`` says ``"partitioning": "hour"`` with hour keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from kbqe_dagster.core.completeness.decision import (
    DAY_UNIT,
    HOUR_UNIT,
    CompletenessSettings,
    PartitionProgress,
    table_completeness,
)
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.operations.completeness import evaluate, read_state
from kbqe_dagster_tests.operations.completeness_area import watermarks
from kbqe_dagster_tests.operations.hourly_completeness_area import (
    MARKS,
    NOW,
    PIPELINE,
    build,
)

UTC = UTC


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- the decision --------------------------------------------------------------------------------
def _progress(partition: int, loaded: int, high: int, kafka: str | None) -> PartitionProgress:
    return PartitionProgress(
        "clicks",
        partition,
        loaded,
        high,
        NOW,
        kafka_time=_at(kafka) if kafka else None,
        settings=CompletenessSettings(lateness=timedelta(minutes=5)),
    )


def test_the_newest_complete_hour_is_the_last_one_ended_before_the_slowest_partition() -> None:
    # clicks[0] reached 15:20 (complete until 15:15): 14:00-15:00 is complete, 15:00 is not.
    verdict = table_completeness(
        "web.clicks", [_progress(0, 10, 20, "2026-11-23T15:20:00")], HOUR_UNIT
    )
    assert verdict.newest_complete == _at("2026-11-23T14:00:00")
    assert verdict.key(verdict.newest_complete) == "2026-11-23T14"
    assert verdict.key(verdict.next_day) == "2026-11-23T15"
    (held,) = verdict.held_back_by
    # 15:00 ends at 16:00: 45 minutes still missing.
    assert (held.partition, held.behind_messages, held.behind_seconds) == (0, 10, 2700.0)


def test_an_idle_partition_never_holds_an_hour_back() -> None:
    idle = _progress(1, 0, 0, None)  # never held a message: caught up at NOW (16:30)
    lagging = _progress(0, 10, 20, "2026-11-23T15:20:00")
    verdict = table_completeness("web.clicks", [idle, lagging], HOUR_UNIT)
    assert verdict.key(verdict.newest_complete) == "2026-11-23T14"
    assert [h.partition for h in verdict.held_back_by] == [0]
    alone = table_completeness("web.clicks", [idle], HOUR_UNIT)
    assert alone.key(alone.newest_complete) == "2026-11-23T15"  # 16:30 - 5m lateness


def test_the_same_progress_completes_days_as_before() -> None:
    verdict = table_completeness(
        "web.clicks", [_progress(0, 10, 20, "2026-11-23T15:20:00")], DAY_UNIT
    )
    assert verdict.key(verdict.newest_complete) == "2026-11-22"
    assert DAY_UNIT.covers_day(verdict.newest_complete, verdict.newest_complete)
    assert HOUR_UNIT.covers_day(_at("2026-11-22T23:00:00"), _at("2026-11-22T00:00:00").date())
    assert not HOUR_UNIT.covers_day(_at("2026-11-22T22:00:00"), _at("2026-11-22T00:00:00").date())


# --- read from a staging area (hourly_completeness_area.py) --------------------------------------
def test_an_hour_table_is_complete_per_hour_and_says_so_in_its_json(tmp_path: Path) -> None:
    store, _ = build(tmp_path)
    report = evaluate(parse_pipeline_config(PIPELINE), store, watermarks(MARKS), NOW)
    clicks = report.tables["web.clicks"]
    doc = clicks.to_json()
    # clicks[1] loaded to 10, Kafka time 14:40 (until 14:35): 13:00 is the newest hour done;
    # clicks[2] is idle and views[0] caught up: neither holds an hour back.
    assert doc["partitioning"] == "hour"
    assert doc["newest_complete"] == "2026-11-23T13"
    assert doc["next_hour"] == "2026-11-23T14"
    assert [(h["topic"], h["partition"], h["waiting_for"]) for h in doc["held_back_by"]] == [
        ("clicks", 1, "load")
    ]
    assert "next_day" not in doc and "late_after_complete_by_hour" in doc


def test_records_of_a_declared_hour_loaded_afterwards_count_as_late_per_hour(
    tmp_path: Path,
) -> None:
    store, pending = build(tmp_path)
    config = parse_pipeline_config(PIPELINE)
    first = evaluate(config, store, watermarks(MARKS), NOW, write=True).tables["web.clicks"]
    assert [first.unit.key(h) for h in first.newly_complete] == ["2026-11-23T13"]
    assert read_state(store).tables["web.clicks"].newest_complete == _at("2026-11-23T13:00:00")
    store.delete(pending)  # loaded: 2 records of 13:00 (declared complete) and 8 of 15:00
    second = evaluate(config, store, watermarks(MARKS), NOW, write=True).tables["web.clicks"]
    assert second.late_after_complete == {"2026-11-23T13": 2}
    # clicks[1] now reached 15:50 (until 15:45): 14:00 became complete, announced once.
    assert [second.unit.key(h) for h in second.newly_complete] == ["2026-11-23T14"]
    third = evaluate(config, store, watermarks(MARKS), NOW, write=True).tables["web.clicks"]
    assert third.newly_complete == () and third.late_after_complete == {"2026-11-23T13": 2}


def test_a_day_table_beside_it_keeps_its_day_report(tmp_path: Path) -> None:
    store, _ = build(tmp_path)
    day_config = parse_pipeline_config({**PIPELINE, "tables": {}})
    doc = evaluate(day_config, store, watermarks(MARKS), NOW).tables["web.clicks"].to_json()
    assert doc["partitioning"] == "day" and doc["newest_complete"] == "2026-11-22"
    assert "next_day" in doc and "next_hour" not in doc
