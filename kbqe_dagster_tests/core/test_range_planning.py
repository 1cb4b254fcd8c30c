"""Range planning: which offset ranges a stage run covers, holes first, within the caps."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.protocol.commit import bootstrap_marker
from kbqe_dagster.core.protocol.offsets import (
    OffsetRange,
    StartPolicy,
    Watermarks,
    plan_ranges,
    recover,
)

TP = ("orders", 0)


def done(first: int, last: int, *, partition: int = 0) -> str:
    return f"orders.{partition}.sales.orders.1.{first}.{last}.done"


def plan(names, marks, *, per_run=1_000_000, per_range=1_000_000, policy=StartPolicy.EARLIEST):
    return plan_ranges(
        recover(names),
        marks,
        max_messages_per_run=per_run,
        max_messages_per_range=per_range,
        start_policy=policy,
    )


def bounds(ranges) -> list[tuple[int, int]]:
    return [(r.start, r.end_exclusive) for r in ranges]


def test_a_partition_resumes_from_its_chain_up_to_the_high_watermark() -> None:
    result = plan([done(0, 99)], {TP: Watermarks(0, 250)})
    assert result.ranges == (OffsetRange("orders", 0, 100, 250),)
    assert result.partitions[0].resume_offset == 100
    assert result.partitions[0].bootstrap_offset is None


def test_nothing_is_planned_when_the_partition_is_caught_up() -> None:
    result = plan([done(0, 99)], {TP: Watermarks(0, 100)})
    assert result.ranges == ()
    assert result.partitions[0].backlog_after_run == 0


def test_a_new_partition_starts_at_the_low_watermark_with_policy_earliest() -> None:
    result = plan([], {TP: Watermarks(40, 90)})
    assert bounds(result.ranges) == [(40, 90)]
    assert result.partitions[0].bootstrap_offset is None


def test_a_new_partition_with_policy_latest_is_pinned_at_the_high_watermark() -> None:
    result = plan([], {TP: Watermarks(40, 90)}, policy=StartPolicy.LATEST)
    assert result.ranges == ()
    assert result.bootstrap_offsets == {TP: 90}
    # Once the pin is written, the next run stages from there, not from a newer "latest".
    pinned = [bootstrap_marker("orders", 0, 90).name]
    assert bounds(plan(pinned, {TP: Watermarks(40, 130)}, policy=StartPolicy.LATEST).ranges) == [
        (90, 130)
    ]


def test_a_partition_that_never_held_a_message_needs_no_pin() -> None:
    result = plan([], {TP: Watermarks(0, 0)}, policy=StartPolicy.LATEST)
    assert result.ranges == () and result.bootstrap_offsets == {}


def test_a_hole_is_planned_first_and_ends_where_the_next_committed_range_begins() -> None:
    names = [done(0, 99), done(0, 99, partition=1), done(200, 299, partition=1)]
    result = plan(names, {TP: Watermarks(0, 150), ("orders", 1): Watermarks(0, 400)})
    assert [(r.partition, r.start, r.end_exclusive) for r in result.ranges] == [
        (1, 100, 200),  # the hole, before every tail, whatever the partition
        (0, 100, 150),
        (1, 300, 400),
    ]


def test_committed_ranges_after_a_hole_are_never_restaged() -> None:
    result = plan([done(0, 99), done(200, 299), done(400, 499)], {TP: Watermarks(0, 600)})
    assert bounds(result.ranges) == [(100, 200), (300, 400), (500, 600)]


@pytest.mark.parametrize(
    "per_run, expected",
    [
        (50, [(100, 150)]),
        (100, [(100, 200)]),
        (150, [(100, 200), (300, 350)]),
    ],
)
def test_the_per_run_cap_spends_its_budget_on_holes_first(
    per_run: int, expected: list[tuple[int, int]]
) -> None:
    result = plan([done(0, 99), done(200, 299)], {TP: Watermarks(0, 1000)}, per_run=per_run)
    assert bounds(result.ranges) == expected
    assert result.partitions[0].backlog_after_run == 100 + 700 - per_run


@pytest.mark.parametrize("per_range", [1, 7, 100, 333, 1000, 5000])
def test_a_hot_partition_is_split_into_ranges_that_tile_its_offsets(per_range: int) -> None:
    result = plan([done(0, 99)], {TP: Watermarks(0, 1100)}, per_range=per_range)
    assert all(r.size <= per_range for r in result.ranges)
    assert result.ranges[0].start == 100 and result.ranges[-1].end_exclusive == 1100
    for before, after in zip(result.ranges, result.ranges[1:]):
        assert after.start == before.end_exclusive


def test_expired_offsets_past_the_resume_point_are_reported_lost_and_bridged() -> None:
    result = plan([done(0, 99)], {TP: Watermarks(500, 700)})
    part = result.partitions[0]
    assert bounds(result.ranges) == [(500, 700)]
    assert part.lost == ((100, 500),) and part.lost_messages == 400
    assert part.bootstrap_offset == 500
    assert part.resume_offset == 500


def test_a_hole_partly_expired_is_staged_from_the_low_watermark() -> None:
    result = plan([done(0, 99), done(200, 299)], {TP: Watermarks(150, 400)})
    part = result.partitions[0]
    assert bounds(result.ranges) == [(150, 200), (300, 400)]
    assert part.lost == ((100, 150),)
    assert part.bootstrap_offset == 150


def test_with_the_bridge_written_recovery_no_longer_chases_expired_offsets() -> None:
    # Low watermark inside the committed range after the hole: the hole is lost entirely.
    names = [done(0, 99), done(200, 299)]
    first = plan(names, {TP: Watermarks(250, 400)})
    assert first.partitions[0].lost == ((100, 200),)
    assert bounds(first.ranges) == [(300, 400)]
    staged = [done(r.start, r.last) for r in first.ranges]
    bridge = bootstrap_marker("orders", 0, first.partitions[0].bootstrap_offset).name
    chain = recover(names + [bridge] + staged)[TP]
    assert chain.resume_offset == 400 and chain.holes == ()


def test_done_files_beyond_the_high_watermark_stop_the_partition_with_a_warning() -> None:
    result = plan([done(0, 999)], {TP: Watermarks(0, 10)})
    assert result.ranges == ()
    assert "beyond the high watermark 10" in result.partitions[0].warnings[0]


def test_partitions_without_watermarks_are_not_part_of_the_run() -> None:
    result = plan([done(0, 9), done(0, 9, partition=1)], {TP: Watermarks(0, 20)})
    assert [p.partition for p in result.partitions] == [0]
    assert {r.partition for r in result.ranges} == {0}


@pytest.mark.parametrize("per_run, per_range", [(0, 10), (10, 0), (-5, 10)])
def test_caps_must_be_positive(per_run: int, per_range: int) -> None:
    with pytest.raises(ConfigError, match="must be at least 1"):
        plan([], {TP: Watermarks(0, 10)}, per_run=per_run, per_range=per_range)


def test_repeated_runs_with_a_failed_middle_range_stage_every_offset_exactly_once() -> None:
    committed: list[str] = []
    staged: list[int] = []
    high = 0
    for run in range(8):
        high += 230
        result = plan(committed, {TP: Watermarks(0, high)}, per_run=300, per_range=70)
        for index, rng in enumerate(result.ranges):
            if run == 2 and index == 1:
                continue  # this task crashed before its commit point
            staged.extend(range(rng.start, rng.end_exclusive))
            committed.append(done(rng.start, rng.last))
    for _ in range(10):  # drain the backlog without new messages
        result = plan(committed, {TP: Watermarks(0, high)}, per_run=300, per_range=70)
        for rng in result.ranges:
            staged.extend(range(rng.start, rng.end_exclusive))
            committed.append(done(rng.start, rng.last))
    assert sorted(staged) == list(range(high))
    assert recover(committed)[TP].resume_offset == high


def test_a_partition_without_any_commit_stages_one_range_first_so_a_failure_cannot_hide_behind_later_ranges() -> (
    None
):
    # Found by the fault suite: split ranges of a fresh partition, the first killed and the
    # later ones committed, used to start the chain at the later range and lose the first.
    fresh = plan_ranges(
        {},
        {("t", 0): Watermarks(0, 10_000)},
        max_messages_per_run=10_000,
        max_messages_per_range=1_000,
    )
    assert [(r.start, r.end_exclusive) for r in fresh.ranges] == [(0, 1_000)]
    assert fresh.partitions[0].backlog_after_run == 9_000

    anchored = plan_ranges(
        recover(["t.0.d.x.1.0.999.done"]),
        {("t", 0): Watermarks(0, 10_000)},
        max_messages_per_run=10_000,
        max_messages_per_range=1_000,
    )
    assert len(anchored.ranges) == 9, "once anchored, a hot partition splits into parallel ranges"
