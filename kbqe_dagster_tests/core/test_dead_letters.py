"""A dead letter is a record every message can become, whatever its metadata."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from io import BytesIO

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kbqe_dagster.core.record.dead_letter_record import (
    DEAD_LETTER_SCHEMA,
    MAX_TIMESTAMP_MS,
    DeadLetter,
)


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


def test_an_error_quoting_a_lone_surrogate_is_written_escaped():
    # A JSON value's "\ud800" quoted by the reason that refuses it: UTF-8 cannot hold it, and
    # failing the dead letter failed the range on every retry (the JSON kernel's fuzz found it).
    parsed = parse_schema(DEAD_LETTER_SCHEMA)
    bad = replace(letter(None), error='t[0] offset 7: got "\ud800"')
    body = BytesIO()
    schemaless_writer(body, parsed, bad.to_record())
    body.seek(0)
    assert schemaless_reader(body, parsed)["error"] == 't[0] offset 7: got "\\ud800"'
