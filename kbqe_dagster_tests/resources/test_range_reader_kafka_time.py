"""The Kafka time a stage read reached (``RangeReader.kafka_ts_max``): what every range's
manifest records for completeness, looked at once per consumed batch so the native kernel and
the Python path record the same value."""

from __future__ import annotations

from kbqe_dagster.resources.kafka.range_reader import RangeReader
from kbqe_dagster_tests.staging.kernel_equality import Msg


def reader(start: int = 10, end: int = 20) -> RangeReader:
    return RangeReader(settings=None, topic="t", partition=0, start=start, end_exclusive=end)  # type: ignore[arg-type]


def test_the_last_in_range_message_of_each_batch_sets_the_time_reached():
    r = reader()
    r._note_time(
        [Msg("t", 0, 10, b"", timestamp=(1, 5_000)), Msg("t", 0, 11, b"", timestamp=(1, 7_000))]
    )
    assert r.kafka_ts_max == 7_000
    r._note_time([Msg("t", 0, 12, b"", timestamp=(1, 6_000))])  # an older CreateTime: max kept
    assert r.kafka_ts_max == 7_000


def test_messages_past_the_range_and_missing_timestamps_do_not_count():
    r = reader()
    r._note_time(
        [Msg("t", 0, 19, b"", timestamp=(1, 9_000)), Msg("t", 0, 20, b"", timestamp=(1, 99_000))]
    )
    assert r.kafka_ts_max == 9_000
    fresh = reader()
    fresh._note_time([Msg("t", 0, 10, b"", timestamp=(0, -1))])
    assert fresh.kafka_ts_max is None
