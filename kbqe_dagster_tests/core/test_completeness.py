"""When a day of a table is complete (core/completeness/decision.py), specified against an oracle.

The oracle restates the definition literally — day D is complete when, for every feeding
partition, the partition is known to have reached D's end (next 00:00 UTC) plus its lateness,
on its basis, where a caught-up partition has reached at least the time its high watermark
was observed — and searches day by day. The implementation computes the same thing as a
minimum; the tests compare both on the named scenarios and on seeded random ones.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import pytest

from kbqe_dagster.core.completeness.decision import (
    Basis,
    CompletenessSettings,
    PartitionProgress,
    RangeFacts,
    loaded_position,
    table_completeness,
)
from kbqe_dagster.core.completeness.state import (
    CompletenessState,
    PartitionMark,
    TableMark,
    late_records,
    newly_loaded_days,
    parse_state,
    with_mark,
)
from kbqe_dagster.core.errors import StagingError

UTC = UTC
NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
KAFKA_0 = CompletenessSettings(Basis.KAFKA_TIME, timedelta(0))
KAFKA_5M = CompletenessSettings(Basis.KAFKA_TIME, timedelta(minutes=5))
EVENT_1H = CompletenessSettings(Basis.EVENT_TIME, timedelta(hours=1))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def oracle(progress: list[PartitionProgress]) -> date | None:
    """The newest day D in a wide window such that every partition has reached D + 1 day +
    its lateness, where a partition has reached its data's time but nothing past the moment it
    was observed, and that moment once caught up; None when no day qualifies."""
    if not progress:
        return None
    newest = None
    day = date(2026, 10, 1)
    while day <= date(2027, 1, 31):
        end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        ok = True
        for p in progress:
            data = p.kafka_time if p.settings.basis is Basis.KAFKA_TIME else p.event_time
            reached = data if data is None or data <= p.observed_at else p.observed_at
            if p.loaded_offset >= p.high_watermark:  # the idle rule
                reached = p.observed_at
            if reached is None or reached - p.settings.lateness < end:
                ok = False
        if ok:
            newest = day
        day += timedelta(days=1)
    return newest


def part(partition=0, loaded=100, high=100, observed=NOW, kafka=None, event=None,
         settings=KAFKA_0, topic="t") -> PartitionProgress:  # fmt: skip
    return PartitionProgress(topic, partition, loaded, high, observed, kafka, event, settings)


# --- named scenarios ---------------------------------------------------------------------------
def test_an_idle_partition_does_not_block_and_counts_as_complete_up_to_its_observation():
    busy = part(0, loaded=500, high=500, kafka=at("2026-11-24T05:59:00"))
    idle = part(1, loaded=10, high=10, kafka=at("2026-11-20T12:00:00"))  # last message days ago
    verdict = table_completeness("d.t", [busy, idle])
    assert verdict.newest_complete == date(2026, 11, 23) == oracle([busy, idle])
    assert verdict.held_back_by == ()


def test_a_lagging_partition_holds_the_next_day_back_and_says_by_how_much():
    ahead = part(0, loaded=500, high=500)
    lagging = part(1, loaded=70, high=100, kafka=at("2026-11-22T23:00:00"), settings=KAFKA_5M)
    verdict = table_completeness("d.t", [ahead, lagging])
    assert verdict.newest_complete == date(2026, 11, 21) == oracle([ahead, lagging])
    assert verdict.next_day == date(2026, 11, 22)
    (held,) = verdict.held_back_by
    assert (held.topic, held.partition, held.behind_messages) == ("t", 1, 30)
    assert held.waiting_for == "stage"  # no staged offset given: nothing past 70 is staged
    # 2026-11-23T00:00 + 5 min lateness - 2026-11-22T23:00 = 65 minutes
    assert held.behind_seconds == 65 * 60


def test_lateness_delays_a_caught_up_partition_on_kafka_time():
    just_after_midnight = part(0, observed=at("2026-11-24T00:03:00"), settings=KAFKA_5M)
    assert table_completeness("d.t", [just_after_midnight]).newest_complete == date(2026, 11, 22)
    later = part(0, observed=at("2026-11-24T00:05:00"), settings=KAFKA_5M)
    assert table_completeness("d.t", [later]).newest_complete == date(2026, 11, 23)


def test_event_time_idle_partition_completes_a_day_once_the_lateness_has_passed():
    # Caught up at 00:30: the day before is not complete until 01:00 (lateness 1 h).
    early = part(
        0, observed=at("2026-11-24T00:30:00"), event=at("2026-11-23T00:00:00"), settings=EVENT_1H
    )
    assert (
        table_completeness("d.t", [early]).newest_complete == date(2026, 11, 22) == oracle([early])
    )
    late = part(0, observed=at("2026-11-24T01:00:00"), settings=EVENT_1H)
    assert table_completeness("d.t", [late]).newest_complete == date(2026, 11, 23) == oracle([late])


def test_event_time_of_a_lagging_partition_is_its_newest_loaded_event_date():
    lagging = part(0, loaded=5, high=9, event=at("2026-11-24T00:00:00"), settings=EVENT_1H)
    verdict = table_completeness("d.t", [lagging])
    # reached 11-24 00:00, minus 1 h: complete through 11-22
    assert verdict.newest_complete == date(2026, 11, 22) == oracle([lagging])
    assert verdict.held_back_by[0].behind_seconds == 3600.0


def test_timestamps_from_the_future_never_complete_a_day_that_has_not_ended():
    # A producer clock two days fast: its data claims 11-26, but it is 11-24 06:00.
    fast = part(0, loaded=5, high=9, kafka=at("2026-11-26T06:00:00"))
    verdict = table_completeness("d.t", [fast])
    assert verdict.newest_complete == date(2026, 11, 23) == oracle([fast])
    assert verdict.held_back_by[0].behind_seconds == 18 * 3600  # 11-25 00:00 - 11-24 06:00


def test_a_partition_that_never_held_a_message_is_idle_from_the_start():
    empty = part(3, loaded=0, high=0)
    assert table_completeness("d.t", [empty]).newest_complete == date(2026, 11, 23)


def test_a_partition_with_a_backlog_and_nothing_known_holds_back_with_unknown_seconds():
    never_staged = part(0, loaded=0, high=50)
    fine = part(1)
    verdict = table_completeness("d.t", [never_staged, fine])
    assert verdict.newest_complete is None is oracle([never_staged, fine])
    assert [(h.partition, h.behind_messages, h.behind_seconds) for h in verdict.held_back_by] == [
        (0, 50, None)
    ]
    assert verdict.next_day == date(2026, 11, 24)


def test_several_topics_feed_one_table_each_on_its_own_settings():
    kafka = part(0, topic="orders", kafka=at("2026-11-23T10:00:00"), loaded=1, high=2)
    events = part(
        0, topic="devices", loaded=1, high=2, event=at("2026-11-23T00:00:00"), settings=EVENT_1H
    )
    verdict = table_completeness("d.t", [kafka, events])
    assert verdict.basis == "mixed"
    assert verdict.newest_complete == date(2026, 11, 21) == oracle([kafka, events])
    assert [h.topic for h in verdict.held_back_by] == ["devices"]  # orders reached 11-22


def test_a_table_nobody_feeds_is_not_vouched_for():
    verdict = table_completeness("d.t", [])
    assert (verdict.newest_complete, verdict.held_back_by, verdict.partitions) == (None, (), 0)


@pytest.mark.parametrize("seed", range(200))
def test_random_scenarios_agree_with_the_oracle(seed):
    rnd = random.Random(seed)
    progress = []
    for i in range(rnd.randint(1, 5)):
        high = rnd.randint(0, 100)
        loaded = rnd.choice([high, rnd.randint(0, high)])

        def stamp():
            return rnd.choice([None, NOW + timedelta(minutes=rnd.randint(-6 * 1440, 2 * 1440))])

        settings = CompletenessSettings(
            rnd.choice(list(Basis)), timedelta(minutes=rnd.choice([0, 5, 60, 600]))
        )
        observed = NOW - timedelta(minutes=rnd.randint(0, 120))
        progress.append(part(i, loaded, high, observed, stamp(), stamp(), settings))
    verdict = table_completeness("d.t", progress)
    assert verdict.newest_complete == oracle(progress)
    if verdict.next_day is not None:
        held = {h.partition for h in verdict.held_back_by}
        assert held == {
            p.partition for p in progress if p.holds_back(verdict.next_day) and not p.caught_up
        }, "the lagging partitions that keep the next day open, and only those"


# --- loaded position ---------------------------------------------------------------------------
def ms(text: str) -> int:
    return int(at(text).timestamp() * 1000)


def test_the_loaded_position_stops_at_the_first_range_with_a_file_of_the_table_left():
    chain = [
        RangeFacts(0, 9, kafka_time_ms=ms("2026-11-23T01:00:00"), event_day=date(2026, 11, 23)),
        RangeFacts(10, 19, kafka_time_ms=ms("2026-11-23T02:00:00"), event_day=date(2026, 11, 22)),
        RangeFacts(20, 29, has_files=True, kafka_time_ms=ms("2026-11-23T03:00:00")),
        RangeFacts(30, 39, kafka_time_ms=ms("2026-11-23T04:00:00")),
    ]
    position = loaded_position(chain)
    assert position.offset == 20
    assert position.kafka_time == at("2026-11-23T02:00:00")
    assert position.event_time == at("2026-11-23T00:00:00")


def test_a_partition_without_done_files_is_loaded_to_its_low_watermark():
    position = loaded_position([], start=42)
    assert (position.offset, position.kafka_time, position.event_time) == (42, None, None)


def test_old_done_files_without_the_facts_leave_the_times_unknown():
    position = loaded_position([RangeFacts(0, 9), RangeFacts(10, 19)])
    assert (position.offset, position.kafka_time) == (20, None)


def test_a_kept_mark_supplies_the_times_of_ranges_retention_deleted():
    # Retention deleted 0..19 after their load; the chain now starts at the pending range.
    position = loaded_position([RangeFacts(20, 29, has_files=True)])
    assert position.offset == 20 and position.kafka_time is None
    mark = PartitionMark(20, ms("2026-11-23T02:00:00"), date(2026, 11, 23))
    marked = with_mark(position, mark)
    assert marked.kafka_time == at("2026-11-23T02:00:00")
    assert marked.event_time == at("2026-11-23T00:00:00")
    # A mark ahead of the position (the staging area was reset) is not trusted.
    assert with_mark(position, PartitionMark(25, ms("2026-11-23T02:00:00"))).kafka_time is None


# --- late events -------------------------------------------------------------------------------
def test_records_of_a_declared_day_loaded_afterwards_are_late_and_others_are_not():
    assert late_records(
        {"2026-11-22": 3, "2026-11-23": 4, "2026-11-24": 5}, date(2026, 11, 23)
    ) == {"2026-11-22": 3, "2026-11-23": 4}
    assert late_records({"2026-11-22": 3}, None) == {}


def test_only_ranges_loaded_since_the_kept_mark_are_new():
    position = loaded_position(
        [
            RangeFacts(0, 9, days={"2026-11-22": 2}),
            RangeFacts(10, 19, days={"2026-11-22": 1, "2026-11-24": 7}),
        ]
    )
    assert newly_loaded_days(position, PartitionMark(10)) == {"2026-11-22": 1, "2026-11-24": 7}
    assert newly_loaded_days(position, None) == {}


def test_the_state_round_trips_and_an_unreadable_one_is_an_error_naming_it():
    state = CompletenessState(
        {
            "d.t": TableMark(
                date(2026, 11, 23),
                {"2026-11-23": 2},
                {("com.acme.events", 3): PartitionMark(10, 123, date(2026, 11, 23))},
            )
        }
    )
    assert parse_state(state.encode()) == state
    assert parse_state(None) == CompletenessState()
    with pytest.raises(StagingError, match="completeness.json"):
        parse_state(b'{"tables": 1}')
