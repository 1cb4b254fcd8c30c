"""The exactly-once assertion over a staging area after a demo topic was staged: every good message
in one avro file on its table and event date, every bad one dead-lettered once with its reason,
and the done ranges tiling each partition up to its end."""

from __future__ import annotations

from kbqe_dagster.resources.kafka.cluster import watermarks
from kbqe_dagster_tests.staging.staged_files import read_staging, tiles


def partition_ends(demo) -> dict[int, int]:
    return {w.partition: w.high for w in watermarks(demo.kafka, demo.topic)}


def assert_exactly_once(demo, store) -> None:
    staged = read_staging(store, demo.topic)
    assert staged.avro_without_done == []
    assert set(staged.good) == set(demo.good), "every good message is staged"
    assert max(staged.good.values()) == 1, "no good message is staged twice"
    assert set(staged.dead) == set(demo.bad), "every bad message is dead-lettered"
    assert max(staged.dead.values()) == 1
    for where, message in demo.good.items():
        assert staged.table_of[where] == message.expect_table
        assert staged.event_date_of[where] == message.event_date
    for where, message in demo.bad.items():
        assert staged.reason_of[where] == message.expect_reason, where
    for partition, end in partition_ends(demo).items():
        assert tiles(staged.done_ranges[partition], end), (
            partition,
            sorted(staged.done_ranges[partition]),
        )
