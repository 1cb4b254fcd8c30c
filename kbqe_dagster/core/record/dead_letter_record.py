"""Dead letters: the record kept for every message that cannot be staged (DESIGN.md §2).

A dead letter keeps everything needed to understand and replay the message: the raw value
and key bytes, the headers, where it came from, why it was refused and when. Dead-letter
files follow the staging naming and commit protocol under their own dataset/table with the
fixed schema id :data:`DEAD_LETTER_SCHEMA_ID`, and load into a dead-letter table partitioned
by the day the message was staged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

# 9999-12-31T23:59:59.999Z, the last instant BigQuery and Python's datetime can hold.
MAX_TIMESTAMP_MS = 253_402_300_799_999
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Dead-letter files are not written with a registry schema; 0 keeps their names in the
# original convention while no registry id can collide (Confluent ids start at 1).
DEAD_LETTER_SCHEMA_ID = 0

DEAD_LETTER_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "DeadLetter",
    "namespace": "kbqe",
    "doc": "A Kafka message kbqe could not stage, with the reason.",
    "fields": [
        {"name": "reason", "type": "string", "doc": "Stable reason code (core/reasons.py)."},
        {"name": "error", "type": "string", "doc": "Human-readable detail."},
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {
            "name": "kafka_timestamp",
            "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            "default": None,
        },
        {"name": "schema_id", "type": ["null", "long"], "default": None},
        {"name": "raw_key", "type": ["null", "bytes"], "default": None},
        {"name": "raw_value", "type": ["null", "bytes"], "default": None},
        {
            "name": "headers",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "DeadLetterHeader",
                    "fields": [
                        {"name": "key", "type": "string"},
                        {"name": "value", "type": ["null", "bytes"], "default": None},
                    ],
                },
            },
            "default": [],
        },
        {"name": "staged_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "staged_date",
            "type": {"type": "int", "logicalType": "date"},
            "doc": "Day partition of the dead-letter table.",
        },
    ],
}

DEAD_LETTER_PARTITION_FIELD = "staged_date"


@dataclass(frozen=True)
class DeadLetter:
    reason: str
    error: str
    topic: str
    partition: int
    offset: int
    kafka_timestamp_ms: int | None
    schema_id: int | None
    raw_key: bytes | None
    raw_value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    staged_at: datetime

    def to_record(self) -> dict[str, Any]:
        """The record as fastavro writes it with :data:`DEAD_LETTER_SCHEMA`."""
        staged_at = self.staged_at.astimezone(UTC)
        return {
            "reason": str(self.reason),
            "error": _encodable(self.error),
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            # Null when Kafka has none (-1) or the producer wrote one past year 9999, as in the
            # staged rows' timestamp column: such a message must still reach the dead letters.
            "kafka_timestamp": (
                _EPOCH + timedelta(milliseconds=self.kafka_timestamp_ms)  # exact, unlike a float
                if self.kafka_timestamp_ms is not None
                and 0 <= self.kafka_timestamp_ms <= MAX_TIMESTAMP_MS
                else None
            ),
            "schema_id": self.schema_id,
            "raw_key": self.raw_key,
            "raw_value": self.raw_value,
            "headers": [{"key": _encodable(k), "value": v} for k, v in self.headers],
            "staged_at": staged_at,
            "staged_date": staged_at.date(),
        }


def staged_day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def _encodable(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (a JSON value's ``"\\ud800"``, quoted by
    the reason that refuses it) becomes its ``\\ud800`` escape instead of failing the dead
    letter's encoding, and with it the range, on every retry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
