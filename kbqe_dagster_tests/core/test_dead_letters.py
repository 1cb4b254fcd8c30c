"""A dead letter is a record every message can become, whatever its metadata."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.record.dead_letters import MAX_TIMESTAMP_MS, DeadLetter


def letter(timestamp_ms: int | None) -> DeadLetter:
    return DeadLetter(
        "body_decode_error",
        "t[0] offset 7: bad",
        "t",
        0,
        7,
        timestamp_ms,
        5,
        None,
        b"\x00",
        [],
        datetime(2026, 11, 25, tzinfo=UTC),
    )


@pytest.mark.parametrize("timestamp_ms", [None, -1, MAX_TIMESTAMP_MS + 1, 86_400_000 * 2_932_897])
def test_a_kafka_timestamp_kafka_lacks_or_past_year_9999_is_null(timestamp_ms):
    # Found by the native kernel's differential fuzz: a producer-set timestamp past year 9999
    # made the dead letter itself fail, so the stage task failed instead of filing the message.
    assert letter(timestamp_ms).to_record()["kafka_timestamp"] is None


def test_the_last_instant_bigquery_holds_is_kept():
    kept = letter(MAX_TIMESTAMP_MS).to_record()["kafka_timestamp"]
    assert kept == datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
