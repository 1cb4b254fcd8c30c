"""When is day D of a table complete? (DESIGN.md §11) — the pure decision.

**Definition.** A DAY partition ``D`` of a table is *complete* when every Kafka partition
feeding the table has been staged **and loaded** past the end of ``D`` plus a lateness:

    reached(p) - lateness(p) >= D + 1 day (00:00 UTC)      for every feeding partition p

``reached(p)`` is how far partition ``p`` got, on the basis its topic configures:

- ``kafka_time`` (default): the Kafka timestamp of the loaded messages (the last message of
  each consumed batch, maximum over the loaded ranges; exact for ``LogAppendTime``, for
  ``CreateTime`` a lower bound the lateness absorbs);
- ``event_time``: the start (00:00 UTC) of the newest event date loaded. Stage files record
  records per event *date* only, so event time is known to the day: a lower bound, never
  ahead of the data.

**Idle partitions never block.** A partition whose loaded position reached the high watermark
observed at time ``t`` has nothing more to give before ``t``: ``reached(p)`` is then at least
``t``. For ``kafka_time`` that makes it complete up to ``t - lateness``; for ``event_time``
once ``t`` passes ``D + 1 day + lateness``. A partition that never held a message (high
watermark 0) is idle from the start.

The idle rule also holds **after** the observation: a partition found caught up at ``t`` with
every offset below ``N`` loaded has reached at least ``t`` for as long as offsets below ``N``
stay loaded, whatever arrives after ``t`` (messages appended later are later on Kafka's
clock; on the event clock the claim is the one the rule already made at ``t``). The kept
state carries that time forward (``caught_up_at``), so a partition that was idle at the last
evaluation is still known at the next one when new messages wait in it.

**A declared day stays declared.** Once a day was declared complete (the kept state's
``newest_complete``), the verdict never goes back to an earlier day or to nothing: downstream
work may have run on it, and what arrives for it afterwards is counted as late, not used to
take the claim back. The newest complete day is the later of the declared one and the one
the partitions' progress supports, and ``held_back_by`` names what holds back the day after
it.

**Nothing is known beyond the observation.** A partition's time is capped at the moment its
high watermark was read: timestamps ahead of it (a producer's clock running fast, event dates
in the future) never complete a day that has not ended plus its lateness.

**Lagging partitions** hold the next day back and say by how much: messages (high watermark
minus loaded position) and seconds (the time still missing to the threshold). Caught-up
partitions are never listed: what they wait for is the clock, not data.

**Late events** (a record of day ``D`` loaded after ``D`` was declared complete) still load:
nothing is dropped. They are counted per table and day as ``late_after_complete``
(``core/completeness/state.py``), by whoever declares completeness and keeps the count
(``operations/completeness.py``).

**HOUR tables** (``tables: {...: {partitioning: hour}}``, core/record/partitioning.py): the unit is
the hour, and the same rule reads ``reached(p) - lateness(p) >= H + 1 hour`` for an hour ``H``
(UTC). On the ``event_time`` basis a partition's time is then the start of the newest event
*hour* loaded (the manifests of HOUR tables' files count records per hour), or of the newest
event date where only dates are known — a lower bound either way. A partition is identified
by a ``date`` (DAY) or by the aware ``datetime`` its hour starts at (HOUR); :class:`Unit`
holds the arithmetic of both.

**MONTH and YEAR tables**: the unit is the month (year), identified by the ``date`` it starts
(``2026-11-01``). A month is complete when its last day is: ``reached(p) - lateness(p) >=``
the first instant of the next month, for every feeding partition. **Unpartitioned tables**
(``partitioning: none``) have one verdict for the table: complete through the newest complete
day, by the DAY rule.

Everything here is a function of its inputs; reading watermarks, done files and the load
state is the systems side's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import Any

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.record.partitioning import (
    HOUR,
    Partitioning,
    epoch_hour_of,
    hour_key,
    parse_hour_key,
)

DAY = timedelta(days=1)

Period = date | datetime
"""A table partition: its ``date`` (DAY) or the aware UTC ``datetime`` its hour starts (HOUR)."""


@dataclass(frozen=True)
class Unit:
    """The arithmetic of a table's partitions, by its partitioning (``none``: days)."""

    partitioning: Partitioning = Partitioning.DAY

    @property
    def hourly(self) -> bool:
        return self.partitioning is Partitioning.HOUR

    @property
    def name(self) -> str:
        """``hour``, ``day``, ``month`` or ``year``: what one period is called."""
        return "day" if self.partitioning is Partitioning.NONE else self.partitioning.value

    def start_of(self, day: date) -> date:
        """The start of the (DAY, MONTH or YEAR) period holding ``day``."""
        if self.partitioning is Partitioning.MONTH:
            return day.replace(day=1)
        if self.partitioning is Partitioning.YEAR:
            return day.replace(month=1, day=1)
        return day

    def is_start(self, period: Period) -> bool:
        """Whether ``period`` names a period of this unit (kept state of another unit
        does not)."""
        if isinstance(period, datetime):
            return self.hourly
        return not self.hourly and self.start_of(period) == period

    def end(self, period: Period) -> datetime:
        """The instant ``period`` ends (the next one starts)."""
        if self.hourly:
            return _as_hour(period) + HOUR
        return day_start(_as_date(self.next(_as_date(period))))

    def newest_ending_by(self, instant: datetime) -> Period:
        """The newest period whose end is at or before ``instant``."""
        if self.hourly:
            floor = instant.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
            return floor - HOUR
        return self.previous(self.start_of(instant.astimezone(UTC).date()))

    def next(self, period: Period) -> Period:
        if self.hourly:
            return period + HOUR
        day = _as_date(period)
        if self.partitioning is Partitioning.MONTH:
            return _add_months(day, 1)
        if self.partitioning is Partitioning.YEAR:
            return day.replace(year=day.year + 1)
        return day + DAY

    def previous(self, period: Period) -> Period:
        if self.hourly:
            return period - HOUR
        day = _as_date(period)
        if self.partitioning is Partitioning.MONTH:
            return _add_months(day, -1)
        if self.partitioning is Partitioning.YEAR:
            return day.replace(year=day.year - 1)
        return day - DAY

    def key(self, period: Period) -> str:
        """``2026-11-23`` (DAY), ``2026-11-23T14`` (HOUR), ``2026-11-01`` (MONTH),
        ``2026-01-01`` (YEAR): the partition key (Dagster's)."""
        if self.hourly:
            return hour_key(epoch_hour_of(_as_hour(period)))
        return period.isoformat()

    def parse(self, key: str) -> Period:
        return parse_hour_key(key) if self.hourly else date.fromisoformat(key)

    def rollup(self, days: Mapping[str, int]) -> dict[str, int]:
        """Counts per event date (the manifests') as counts per period of a MONTH or YEAR
        table; DAY and unpartitioned tables' as they are (HOUR tables count hours)."""
        if self.partitioning not in (Partitioning.MONTH, Partitioning.YEAR):
            return dict(days)
        out: dict[str, int] = {}
        for day, n in days.items():
            key = self.key(self.start_of(date.fromisoformat(day)))
            out[key] = out.get(key, 0) + n
        return out

    def covers_day(self, newest: Period | None, day: date) -> bool:
        """Whether every partition of ``day`` is complete when ``newest`` is (an HOUR table:
        its 23:00 UTC hour; a MONTH or YEAR table: the period holding the day)."""
        if newest is None:
            return False
        if self.hourly:
            return _as_hour(newest) >= datetime.combine(day, time(23), tzinfo=UTC)
        return _as_date(newest) >= self.start_of(day)


def _as_hour(period: Period) -> datetime:
    if isinstance(period, datetime):
        return period
    return datetime.combine(period, time(0), tzinfo=UTC)


def _as_date(period: Period) -> date:
    return period.date() if isinstance(period, datetime) else period


def _add_months(day: date, months: int) -> date:
    """The first of the month ``months`` after ``day``'s (``day`` is a first)."""
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


DAY_UNIT = Unit()
HOUR_UNIT = Unit(Partitioning.HOUR)


def unit_of(partitioning: Partitioning) -> Unit:
    return Unit(partitioning)


class Basis(StrEnum):
    """Which clock says how far a partition got."""

    KAFKA_TIME = "kafka_time"
    EVENT_TIME = "event_time"


@dataclass(frozen=True)
class CompletenessSettings:
    """When a DAY partition counts as complete, under ``completeness:`` (top level: the
    default of every topic; ``topics[].completeness``: that topic's partitions, key by key).
    A table fed by several topics is complete when each feeding partition is, by its own
    topic's settings."""

    basis: Basis = Basis.KAFKA_TIME
    """``kafka_time`` or ``event_time``: the clock a partition's progress is read on. Default
    ``kafka_time``: it advances with every message and with idle time alike, and Kafka stamps
    it (per partition it is monotone with ``LogAppendTime``), so one slow producer's clock
    cannot hold a day open or close it early. ``event_time`` suits topics whose producers
    buffer for long (devices) and whose event dates therefore trail Kafka time."""
    lateness: timedelta = timedelta(minutes=5)
    """How long after a day ends (00:00 UTC) its events may still reach the partition on the
    chosen clock. Default ``5m``: covers producer batching, retries and clock skew between an
    event's time and Kafka's, and delays completeness by only as much. Events of the day that
    arrive later still load and are counted as ``late_after_complete``. Event dates in a zone
    west of UTC end after 00:00 UTC: add the offset (``-05:00`` → at least ``5h``)."""


COMPLETENESS_SPEC: dict[str, r.Converter] = {
    "basis": r.choice(Basis),
    "lateness": r.duration(),
}


def day_end(day: date) -> datetime:
    """The instant a DAY partition ends: the next day's 00:00 UTC."""
    return datetime.combine(day + DAY, time(0), tzinfo=UTC)


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


# --- one partition ---------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionProgress:
    """How far one Kafka partition feeding a table got, for that table.

    ``loaded_offset``: every offset below it is staged and, where it held records of the
    table, loaded (the end of the contiguous chain of committed ranges whose files of the
    table are all loaded); ``high_watermark`` and ``observed_at``: Kafka's next offset and
    when it was read; ``kafka_time`` / ``event_time``: how far the loaded offsets got on each
    clock (None: not known, e.g. a partition never staged or done files without the facts).
    """

    topic: str
    partition: int
    loaded_offset: int
    high_watermark: int
    observed_at: datetime
    kafka_time: datetime | None = None
    event_time: datetime | None = None
    settings: CompletenessSettings = field(default_factory=CompletenessSettings)
    staged_offset: int | None = None
    """The end of the partition's committed chain: how far staging got (None: not given).
    Between it and ``loaded_offset`` the loads are behind; past it, staging is."""
    caught_up_at: datetime | None = None
    """When an earlier observation found the partition caught up at or below
    ``loaded_offset`` (the kept state's mark): it has reached at least that time on either
    clock, whatever arrived since (None: never seen caught up)."""

    def __post_init__(self) -> None:
        for name in ("observed_at", "kafka_time", "event_time", "caught_up_at"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{self.topic}[{self.partition}]: {name} must be timezone-aware")

    @property
    def caught_up(self) -> bool:
        """Everything Kafka held when the high watermark was read is loaded."""
        return self.loaded_offset >= self.high_watermark

    @property
    def behind_messages(self) -> int:
        return max(0, self.high_watermark - self.loaded_offset)

    @property
    def reached(self) -> datetime | None:
        """How far this partition got on its basis: the data's time, or the moment an earlier
        observation found it caught up if that is later, never past the moment it was observed
        (a producer clock ahead, or event dates from the future, must not complete a day that
        has not ended), and that moment itself once it is caught up (the idle rule)."""
        if self.caught_up:
            return self.observed_at
        data = self.kafka_time if self.settings.basis is Basis.KAFKA_TIME else self.event_time
        known = [t for t in (data, self.caught_up_at) if t is not None]
        return min(max(known), self.observed_at) if known else None

    @property
    def complete_until(self) -> datetime | None:
        """Every day ending at or before this instant is complete as far as this partition
        is concerned."""
        reached = self.reached
        return None if reached is None else reached - self.settings.lateness

    def holds_back(self, day: Period, unit: Unit = DAY_UNIT) -> bool:
        until = self.complete_until
        return until is None or until < unit.end(day)


@dataclass(frozen=True)
class HeldBackBy:
    """A partition that keeps a day from being complete."""

    topic: str
    partition: int
    behind_messages: int
    behind_seconds: float | None
    """Time still missing to the day's threshold on the partition's basis; None: unknown
    (nothing known of how far the partition got)."""
    loaded_offset: int = 0
    staged_offset: int | None = None
    high_watermark: int = 0

    @property
    def waiting_for(self) -> str:
        """What the first message not loaded waits for: ``load`` when it is staged (its file
        waits for a load job, or is quarantined), ``stage`` when it is not staged yet."""
        staged = self.staged_offset if self.staged_offset is not None else self.loaded_offset
        return "load" if self.loaded_offset < staged else "stage"

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "behind_messages": self.behind_messages,
            "behind_seconds": self.behind_seconds,
            "loaded_offset": self.loaded_offset,
            "staged_offset": self.staged_offset,
            "high_watermark": self.high_watermark,
            "waiting_for": self.waiting_for,
        }


@dataclass(frozen=True)
class TableCompleteness:
    """The verdict for one table: the newest complete partition (day, or hour of an HOUR
    table) and what holds the next one."""

    table: str
    basis: str
    """The feeding topics' basis, or ``mixed`` when they differ."""
    newest_complete: Period | None
    next_day: Period | None
    """The next partition (an hour of an HOUR table, despite the name)."""
    held_back_by: tuple[HeldBackBy, ...]
    partitions: int
    """Feeding partitions considered."""
    unit: Unit = DAY_UNIT

    def key(self, period: Period | None) -> str | None:
        return None if period is None else self.unit.key(period)


def table_completeness(
    table: str,
    progress: Sequence[PartitionProgress],
    unit: Unit = DAY_UNIT,
    *,
    declared: Period | None = None,
) -> TableCompleteness:
    """The newest complete partition (``unit``: day or hour) of ``table`` from its feeding
    partitions' progress, never earlier than ``declared`` (the newest one already declared
    complete: a declared day stays declared).

    With no feeding partition and nothing declared, nothing is known to be complete
    (``newest_complete`` None): a table nobody feeds is not vouched for.
    """
    bases = sorted({p.settings.basis.value for p in progress})
    basis = bases[0] if len(bases) == 1 else ("mixed" if bases else Basis.KAFKA_TIME.value)
    if not progress:
        following = None if declared is None else unit.next(declared)
        return TableCompleteness(table, basis, declared, following, (), 0, unit)
    untils = [p.complete_until for p in progress]
    known = [u for u in untils if u is not None]
    newest: Period | None = None
    if len(known) == len(untils):
        newest = unit.newest_ending_by(min(known))
    if declared is not None and (newest is None or newest < declared):
        newest = declared
    if newest is not None:
        next_day: Period | None = unit.next(newest)
    else:
        next_day = unit.next(unit.newest_ending_by(min(known))) if known else None
    held = tuple(
        HeldBackBy(
            p.topic,
            p.partition,
            p.behind_messages,
            _behind_seconds(p, next_day, unit),
            p.loaded_offset,
            p.staged_offset,
            p.high_watermark,
        )
        for p in sorted(progress, key=lambda p: (p.topic, p.partition))
        if not p.caught_up
        and (p.complete_until is None if next_day is None else p.holds_back(next_day, unit))
    )
    return TableCompleteness(table, basis, newest, next_day, held, len(progress), unit)


def _behind_seconds(p: PartitionProgress, period: Period | None, unit: Unit) -> float | None:
    until = p.complete_until
    if until is None or period is None:
        return None
    return round(max(0.0, (unit.end(period) - until).total_seconds()), 3)


# --- loaded position -------------------------------------------------------------------------
@dataclass(frozen=True)
class RangeFacts:
    """What the done files say of one committed range, for one table.

    ``has_files``: an avro file of the table from this range is still in the staging area
    (committed, not loaded yet: pending, in a load job or quarantined); ``kafka_time_ms``:
    the Kafka time the range reached (manifest ``kafka_ts_max``; None: not recorded);
    ``event_day``: the newest event date of its records (any table but the dead letters);
    ``days``: the table's records per event date in this range; ``event_hour``: the start of
    the newest event hour among its files that count hours (HOUR tables' files; None: none);
    ``hours``: the table's records per event hour (an HOUR table's).
    """

    first: int
    last: int
    has_files: bool = False
    kafka_time_ms: int | None = None
    event_day: date | None = None
    days: Mapping[str, int] = field(default_factory=dict)
    event_hour: datetime | None = None
    hours: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedPosition:
    """Where a partition is loaded to for one table, and how far that got on each clock."""

    offset: int
    kafka_time: datetime | None
    event_time: datetime | None
    loaded_ranges: tuple[RangeFacts, ...]
    caught_up_at: datetime | None = None
    """When an earlier observation found the partition caught up at or below ``offset``
    (from the kept state; see :attr:`PartitionProgress.caught_up_at`)."""


def loaded_position(chain: Sequence[RangeFacts], *, start: int = 0) -> LoadedPosition:
    """The end of the contiguous prefix of ``chain`` (the partition's contiguous committed
    ranges, in offset order) whose files of the table are all loaded. An empty chain (no
    done file yet) is loaded to ``start`` (the low watermark: older offsets are gone)."""
    loaded: list[RangeFacts] = []
    offset = chain[0].first if chain else start
    for rng in chain:
        if rng.has_files:
            break
        loaded.append(rng)
        offset = rng.last + 1
    kafka = [r.kafka_time_ms for r in loaded if r.kafka_time_ms is not None]
    # Event time known to the day, or to the hour where files counted hours: the latest start.
    starts = [day_start(r.event_day) for r in loaded if r.event_day is not None]
    starts += [r.event_hour for r in loaded if r.event_hour is not None]
    return LoadedPosition(
        offset,
        datetime.fromtimestamp(max(kafka) / 1000, UTC) if kafka else None,
        max(starts) if starts else None,
        tuple(loaded),
    )
