"""A declared day stays declared, and a partition seen caught up stays known
(core/completeness/decision.py, core/completeness/state.py).

Once a day was declared complete, ``newest_complete`` never goes back to an earlier day or to
nothing, whatever arrives afterwards: new messages in a partition that was idle hold back the
day *after* the declared one, and ``held_back_by`` says by how much. The moment a partition
was last seen caught up is kept with its mark, so its time is known at the next evaluation.
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta

import pytest

from kbqe_dagster.core.completeness.decision import (
    HOUR_UNIT,
    Basis,
    CompletenessSettings,
    PartitionProgress,
    loaded_position,
    table_completeness,
)
from kbqe_dagster.core.completeness.state import (
    CompletenessState,
    PartitionMark,
    TableMark,
    mark_of,
    parse_state,
    with_mark,
)

UTC = UTC
NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
KAFKA_5M = CompletenessSettings(Basis.KAFKA_TIME, timedelta(minutes=5))
EVENT_1H = CompletenessSettings(Basis.EVENT_TIME, timedelta(hours=1))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def part(partition=0, loaded=100, high=100, kafka=None, event=None, settings=KAFKA_5M,
         caught_up_at=None, topic="t", observed=NOW) -> PartitionProgress:  # fmt: skip
    return PartitionProgress(
        topic, partition, loaded, high, observed, kafka, event, settings, caught_up_at=caught_up_at
    )


# --- declared stays declared ---------------------------------------------------------------
def test_new_messages_in_a_partition_idle_before_never_take_a_declared_day_back():
    # 11-23 was declared; now partition 2, empty until then, has 7 messages nobody staged.
    idle_before = part(2, loaded=0, high=7)
    fine = part(0)
    assert table_completeness("d.t", [fine, idle_before]).newest_complete is None, (
        "nothing known of it"
    )

    verdict = table_completeness("d.t", [fine, idle_before], declared=date(2026, 11, 23))

    assert verdict.newest_complete == date(2026, 11, 23)
    assert verdict.next_day == date(2026, 11, 24), "what is held back is the day after it"
    assert [
        (h.partition, h.behind_messages, h.behind_seconds, h.waiting_for)
        for h in verdict.held_back_by
    ] == [(2, 7, None, "stage")]


def test_a_partition_lagging_behind_the_declared_day_holds_back_the_day_after_it():
    # Its loaded data reach only 11-22 20:00 (day 11-21 by the data); 11-23 was declared.
    lagging = part(1, loaded=70, high=100, kafka=at("2026-11-22T20:00:00"))
    verdict = table_completeness("d.t", [lagging, part(0)], declared=date(2026, 11, 23))
    assert (verdict.newest_complete, verdict.next_day) == (date(2026, 11, 23), date(2026, 11, 24))
    (held,) = verdict.held_back_by
    assert (held.partition, held.behind_messages) == (1, 30)
    # 11-25 00:00 + 5 min - 11-22 20:00 = 52 h 5 min
    assert held.behind_seconds == (52 * 60 + 5) * 60


def test_the_data_move_the_newest_complete_day_past_the_declared_one():
    verdict = table_completeness("d.t", [part(0), part(1)], declared=date(2026, 11, 20))
    assert verdict.newest_complete == date(2026, 11, 23)
    assert verdict.held_back_by == ()


def test_a_declared_hour_stays_declared_on_an_hour_table():
    declared = at("2026-11-24T05:00:00")
    verdict = table_completeness("d.t", [part(0, loaded=0, high=3)], HOUR_UNIT, declared=declared)
    assert verdict.newest_complete == declared
    assert verdict.next_day == at("2026-11-24T06:00:00")
    assert [(h.partition, h.behind_messages) for h in verdict.held_back_by] == [(0, 3)]


def test_a_table_without_feeding_partitions_keeps_its_declared_day():
    verdict = table_completeness("d.t", [], declared=date(2026, 11, 23))
    assert (verdict.newest_complete, verdict.next_day, verdict.held_back_by) == (
        date(2026, 11, 23),
        date(2026, 11, 24),
        (),
    )


@pytest.mark.parametrize("seed", range(100))
def test_fed_back_from_evaluation_to_evaluation_the_newest_day_never_goes_back(seed):
    """Evaluations as a cron job makes them, an hour apart, on partitions that gain messages,
    are loaded, or fall behind at random; each declares what the one before declared at least,
    and exactly what its data support when that is later."""
    rnd = random.Random(seed)
    declared = None
    observed = NOW
    for _ in range(12):
        observed += timedelta(hours=rnd.randint(1, 30))
        progress = []
        for p in range(rnd.randint(1, 4)):
            high = rnd.randint(0, 50)
            loaded = rnd.choice([high, rnd.randint(0, high)])
            data = rnd.choice([None, observed - timedelta(hours=rnd.randint(0, 72))])
            progress.append(
                part(
                    p,
                    loaded,
                    high,
                    kafka=data,
                    event=data,
                    observed=observed,
                    settings=rnd.choice([KAFKA_5M, EVENT_1H]),
                )
            )
        supported = table_completeness("d.t", progress).newest_complete
        verdict = table_completeness("d.t", progress, declared=declared)
        expected = max((d for d in (declared, supported) if d is not None), default=None)
        assert verdict.newest_complete == expected
        declared = verdict.newest_complete


# --- the moment a partition was seen caught up ---------------------------------------------
def test_a_partition_seen_caught_up_has_reached_that_moment_when_new_messages_wait():
    seen = at("2026-11-23T22:00:00")
    verdict = table_completeness("d.t", [part(2, loaded=0, high=7, caught_up_at=seen)])
    assert verdict.newest_complete == date(2026, 11, 22)  # 11-23 22:00 - 5 min
    (held,) = verdict.held_back_by
    # 11-24 00:05 - 11-23 22:00 = 2 h 5 min
    assert (held.behind_messages, held.behind_seconds) == (7, (2 * 60 + 5) * 60)


def test_the_later_of_the_data_and_the_caught_up_moment_counts_and_never_past_now():
    data_later = part(
        0, loaded=5, high=9, kafka=at("2026-11-24T05:00:00"), caught_up_at=at("2026-11-23T10:00:00")
    )
    assert data_later.reached == at("2026-11-24T05:00:00")
    moment_later = part(
        0,
        loaded=5,
        high=9,
        event=at("2026-11-22T00:00:00"),
        settings=EVENT_1H,
        caught_up_at=at("2026-11-24T02:00:00"),
    )
    assert moment_later.reached == at("2026-11-24T02:00:00")
    future = part(0, loaded=5, high=9, caught_up_at=NOW + timedelta(hours=3))
    assert future.reached == NOW


def test_the_mark_keeps_the_caught_up_moment_while_the_loaded_offset_does_not_go_back():
    seen = at("2026-11-23T22:00:00")
    mark = mark_of(loaded_position([], start=0), caught_up_at=seen)
    assert (mark.loaded_offset, mark.caught_up_at_ms) == (0, int(seen.timestamp() * 1000))

    later = with_mark(loaded_position([], start=0), mark)
    assert later.caught_up_at == seen
    assert mark_of(later).caught_up_at_ms == mark.caught_up_at_ms, "carried to the next mark"
    newer = at("2026-11-24T05:00:00")
    assert mark_of(later, caught_up_at=newer).caught_up_at_ms == int(newer.timestamp() * 1000)

    # A mark ahead of the position (the staging area was reset) lends no moment.
    ahead = PartitionMark(10, caught_up_at_ms=mark.caught_up_at_ms)
    assert with_mark(loaded_position([], start=0), ahead).caught_up_at is None


def test_the_caught_up_moment_survives_the_state_file_and_older_states_still_parse():
    state = CompletenessState(
        {
            "d.t": TableMark(
                date(2026, 11, 23),
                {},
                {("t", 2): PartitionMark(0, caught_up_at_ms=1_795_000_000_000)},
            )
        }
    )
    assert parse_state(state.encode()) == state
    old = (
        b'{"kbqe_completeness": 1, "tables": {"d.t": {"newest_complete": "2026-11-23",'
        b' "partitions": {"t/2": {"loaded_offset": 0}}}}}'
    )
    assert parse_state(old).tables["d.t"].partitions[("t", 2)].caught_up_at_ms is None
