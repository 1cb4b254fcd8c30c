"""What completeness keeps between evaluations, and the late events it counts
(``_kbqe/completeness.json``; the decision itself is ``core/completeness/decision.py``).

Retention deletes the done files of loaded ranges (keeping only the newest per partition),
and with them the times their manifests recorded. A **mark** per table and feeding partition
keeps the last loaded offset and the times reached there; it lends its times to a later
evaluation only while it is not ahead of the loaded position found in the staging area.

**Late events**: records of a day loaded after the day was declared complete. They are
counted per table and day from the ranges loaded since the previous evaluation (past the
mark), with the per-day counts the manifests record; they are loaded like every record.

A mark also keeps **when the partition was last seen caught up** (``caught_up_at_ms``): the
idle rule's claim at that moment (nothing beyond the loaded offset, so the partition reached
that time) stays true while the loaded offset does not go back, so a partition idle at one
evaluation is not unknown at the next when new messages wait in it.

**Declared stays declared**: ``newest_complete`` only moves forward; the decision takes it as
its floor (``table_completeness(declared=...)``).

**HOUR tables** keep the same state with hour keys: ``newest_complete`` is ``2026-11-23T14``,
late records are counted per hour, and a mark also keeps the event time to the hour
(``event_time_ms``, optional: states written before it parse).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from kbqe_dagster.core.completeness.decision import (
    DAY_UNIT,
    LoadedPosition,
    Period,
    Unit,
    day_start,
)
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.record.partitioning import parse_hour_key

STATE_VERSION = 1


def late_records(
    days: Mapping[str, int], complete_through: Period | None, unit: Unit = DAY_UNIT
) -> dict[str, int]:
    """Records per event date (``unit`` HOUR: per event hour) among ``days`` (newly loaded
    records of a table) that belong to a partition already declared complete
    (``complete_through`` or older)."""
    if complete_through is None:
        return {}
    return {d: n for d, n in sorted(days.items()) if n and unit.parse(d) <= complete_through}


@dataclass(frozen=True)
class PartitionMark:
    """What was last known of one partition for one table: survives retention deleting the
    done files of loaded ranges (their manifests held the times)."""

    loaded_offset: int
    kafka_time_ms: int | None = None
    event_day: date | None = None
    event_time_ms: int | None = None
    """The event time reached, to the hour where HOUR tables' files counted hours."""
    caught_up_at_ms: int | None = None
    """The latest observation that found the partition caught up at or below
    ``loaded_offset`` (optional: states written before it parse)."""


@dataclass(frozen=True)
class TableMark:
    newest_complete: Period | None = None
    late_after_complete: Mapping[str, int] = field(default_factory=dict)
    partitions: Mapping[tuple[str, int], PartitionMark] = field(default_factory=dict)

    @property
    def late_total(self) -> int:
        return sum(self.late_after_complete.values())


@dataclass(frozen=True)
class CompletenessState:
    """``_kbqe/completeness.json``: per table, the newest day declared complete, the late
    records counted since, and each feeding partition's last known progress."""

    tables: Mapping[str, TableMark] = field(default_factory=dict)

    def encode(self) -> bytes:
        doc = {
            "kbqe_completeness": STATE_VERSION,
            "tables": {
                name: {
                    "newest_complete": _period_doc(m.newest_complete),
                    "late_after_complete": dict(sorted(m.late_after_complete.items())),
                    "partitions": {
                        f"{t}/{p}": _mark_doc(pm) for (t, p), pm in sorted(m.partitions.items())
                    },
                }
                for name, m in sorted(self.tables.items())
            },
        }
        return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()


def _period_doc(period: Period | None) -> str | None:
    if period is None:
        return None
    if isinstance(period, datetime):
        return period.astimezone(UTC).strftime("%Y-%m-%dT%H")
    return period.isoformat()


def _mark_doc(mark: PartitionMark) -> dict[str, Any]:
    doc = {
        "loaded_offset": mark.loaded_offset,
        "kafka_time_ms": mark.kafka_time_ms,
        "event_day": mark.event_day.isoformat() if mark.event_day else None,
    }
    if mark.event_time_ms is not None:
        doc["event_time_ms"] = mark.event_time_ms
    if mark.caught_up_at_ms is not None:
        doc["caught_up_at_ms"] = mark.caught_up_at_ms
    return doc


def parse_state(content: bytes | None, name: str = "_kbqe/completeness.json") -> CompletenessState:
    """The state in ``content``; missing or empty content is the empty state."""
    if not content or not content.strip():
        return CompletenessState()
    try:
        doc = json.loads(content)
        if doc.get("kbqe_completeness") != STATE_VERSION:
            raise ValueError(f"version {doc.get('kbqe_completeness')!r}")
        return CompletenessState(
            {
                table: TableMark(
                    _opt_date(t.get("newest_complete")),
                    {str(d): int(n) for d, n in t.get("late_after_complete", {}).items()},
                    {
                        _tp(k): PartitionMark(
                            int(v["loaded_offset"]),
                            v.get("kafka_time_ms"),
                            _opt_date(v.get("event_day")),
                            v.get("event_time_ms"),
                            v.get("caught_up_at_ms"),
                        )
                        for k, v in t.get("partitions", {}).items()
                    },
                )
                for table, t in doc["tables"].items()
            }
        )
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise StagingError(f"{name}: not a readable completeness state: {error}") from error


def _opt_date(value: Any) -> Period | None:
    """A day (``2026-11-23``), an HOUR table's hour (``2026-11-23T14``), or None."""
    if value is None:
        return None
    return parse_hour_key(value) if "T" in value else date.fromisoformat(value)


def _tp(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def with_mark(position: LoadedPosition, mark: PartitionMark | None) -> LoadedPosition:
    """``position`` with the times a kept mark knew, when the mark is not ahead of it: the
    done files of loaded ranges are deleted by retention, and with them their times; and the
    moment the partition was last seen caught up."""
    if mark is None or mark.loaded_offset > position.offset:
        return position

    def kept(ms: int | None) -> datetime | None:
        return None if ms is None else _instant(ms)

    kafka = _later(position.kafka_time, kept(mark.kafka_time_ms))
    event_day = None if mark.event_day is None else day_start(mark.event_day)
    event = _later(_later(position.event_time, event_day), kept(mark.event_time_ms))
    caught_up = _later(position.caught_up_at, kept(mark.caught_up_at_ms))
    return LoadedPosition(position.offset, kafka, event, position.loaded_ranges, caught_up)


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    """The later of two moments, either of which may be unknown."""
    if a is None or b is None:
        return a if b is None else b
    return max(a, b)


def _instant(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def mark_of(position: LoadedPosition, caught_up_at: datetime | None = None) -> PartitionMark:
    """The mark to keep for ``position``; ``caught_up_at``: the observation that found the
    partition caught up there now (None: not caught up; a kept moment carries over)."""
    event = position.event_time
    # The day says it all unless hours said more (a DAY-only state stays as it was).
    finer = event is not None and event != day_start(event.date())
    idle = [t for t in (position.caught_up_at, caught_up_at) if t is not None]
    return PartitionMark(
        position.offset,
        int(position.kafka_time.timestamp() * 1000) if position.kafka_time else None,
        event.date() if event else None,
        int(event.timestamp() * 1000) if finer and event else None,
        int(max(idle).timestamp() * 1000) if idle else None,
    )


def newly_loaded_days(
    position: LoadedPosition, mark: PartitionMark | None, unit: Unit = DAY_UNIT
) -> dict[str, int]:
    """The table's records per day (``unit`` HOUR: per hour; MONTH, YEAR: per month, year) in loaded ranges past the kept
    mark (loaded since the last evaluation); everything loaded when there is no mark yet is
    not counted as new."""
    if mark is None:
        return {}
    days: dict[str, int] = {}
    for rng in position.loaded_ranges:
        if rng.first >= mark.loaded_offset:
            for d, n in (rng.hours if unit.hourly else unit.rollup(rng.days)).items():
                days[d] = days.get(d, 0) + n
    return days


def merge_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for c in counts:
        for d, n in c.items():
            merged[d] = merged.get(d, 0) + n
    return dict(sorted(merged.items()))


def newest_of(*days: Period | None) -> Period | None:
    known = [d for d in days if d is not None]
    return max(known) if known else None
