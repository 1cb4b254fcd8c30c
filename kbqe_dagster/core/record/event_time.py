"""The event date of a record: the DAY partition it lands in (DESIGN.md §2).

Input is what the fast decoder hands over: a mapping of dotted field path → value as fastavro
decodes it (Avro ``date`` → ``datetime.date``, ``timestamp-millis/micros`` → aware
``datetime`` in UTC, ``local-timestamp-*`` → naive ``datetime``, strings and numbers as is),
plus the Kafka record timestamp in milliseconds.

Rules, in order:

1. The first candidate field (``EventTimeConfig.fields``) that is present **and non-null**
   gives the value. A present but bad value is ``invalid_event_time``: it does not fall through
   to the next candidate or to the Kafka timestamp, because bad data should be seen in the
   dead letters, not quietly filed under another date.
2. With no candidate value: the Kafka timestamp when ``kafka_timestamp_fallback`` is on and
   the timestamp is known (Kafka reports -1 when it is not; ``None`` and negatives count as
   unknown), else ``missing_event_time``.

Values:

- **Strings** are ISO-8601 as Python's ``datetime.fromisoformat`` reads them: date-only
  (``2024-09-13``), ``T`` or space separator, ``Z`` or ``±hh:mm`` offsets, no fraction or any
  number of fraction digits (digits beyond microseconds are truncated), plus trailing
  RFC 9557 / Java ``ZonedDateTime`` annotations such as ``[Europe/Paris]``. Strings are never
  read as epoch numbers (``"20240913"`` is ISO basic format, not 1970): an epoch must be an
  Avro number. The empty string is present, hence invalid.
- **Numbers** (int/long/float/double; not booleans) are epochs in ``epoch_unit``. With
  ``auto`` the unit is inferred from the magnitude ``|v|``: below 1e11 seconds (up to year
  5138), below 1e14 milliseconds, below 1e17 microseconds, else nanoseconds. The price of
  inference: milliseconds before 1973-03-03 are read as seconds — set the unit if that matters.
- **Avro logical values**: a ``date`` is taken as is; a ``datetime`` follows the date rule.

Date rule (``date_rule``):

- ``local`` (default, the original project's behaviour): the date as written, in the value's
  own offset: ``2024-09-13T23:30:00-05:00`` → 2024-09-13.
- ``utc``: the date of the instant in UTC: the same value → 2024-09-14. A string with a zone id
  but no offset is resolved with that zone (``zoneinfo``); naive values are taken as UTC.
  Under ``local`` the zone id is never needed, so it is not checked.

Epoch numbers and the Kafka timestamp are instants without an offset: their date is the UTC
date under both rules.

Event hour (HOUR-partitioned tables, core/record/partitioning.py): :func:`event_hour` reads the same
candidate the date came from and gives the **UTC hour of the instant**, whatever the date
rule: BigQuery's HOUR partitions are on a TIMESTAMP, which is an instant. Naive values are
taken as UTC, a zone id without an offset is resolved with its zone, a date alone is its
00:00 UTC. Under ``date_rule: local`` an instant late in a zone west of UTC has its event
date on one day and its hour on the next (UTC) day: the two columns answer different
questions, and an HOUR table's partitions follow the hour. So an hour may fall outside the
years 0001..9999 although its date does not (``9999-12-31T23:30-05:00``): such a value is
``invalid_event_time`` for an HOUR table (its hour has no partition key, no TIMESTAMP), and
staged as before into a DAY table.

Range: a date must lie in ``[min_date, max_date]``, by default BigQuery's whole DATE range
0001-01-01..9999-12-31 (which is also Python's). Far-future dates inside that range are
accepted on purpose: a rule relative to "now" would make staging depend on the wall clock, so a
range redone after a crash could route a record differently than the first attempt did. Set
``max_date`` (a fixed date) to reject implausible values deterministically; values BigQuery
cannot partition still load, into its ``__UNPARTITIONED__`` partition.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from kbqe_dagster.core.errors import InvalidEventTimeError, MissingEventTimeError

# date.toordinal() of 1970-01-01: epoch day = ordinal - this.
_EPOCH_ORDINAL = 719163
_MIN_EPOCH_DAY = date.min.toordinal() - _EPOCH_ORDINAL
_MAX_EPOCH_DAY = date.max.toordinal() - _EPOCH_ORDINAL

BIGQUERY_MIN_DATE = date(1, 1, 1)
BIGQUERY_MAX_DATE = date(9999, 12, 31)


class EpochUnit(StrEnum):
    """How an epoch number is read."""

    SECONDS = "s"
    MILLISECONDS = "ms"
    MICROSECONDS = "us"
    NANOSECONDS = "ns"
    AUTO = "auto"


class DateRule(StrEnum):
    """Which calendar date an instant with an offset belongs to."""

    LOCAL = "local"
    UTC = "utc"


_UNITS_PER_DAY = {
    EpochUnit.SECONDS: 86_400,
    EpochUnit.MILLISECONDS: 86_400 * 10**3,
    EpochUnit.MICROSECONDS: 86_400 * 10**6,
    EpochUnit.NANOSECONDS: 86_400 * 10**9,
}
# Inference thresholds on |value|: below the first seconds, below the second milliseconds,
# below the third microseconds, else nanoseconds. See the module docstring.
_AUTO_SECONDS_BELOW = 1e11
_AUTO_MILLIS_BELOW = 1e14
_AUTO_MICROS_BELOW = 1e17


@dataclass(frozen=True)
class EventTimeConfig:
    """How a topic's records get their event date."""

    fields: tuple[str, ...] = ()
    """Candidate dotted field paths, in order; the first present non-null value wins."""
    epoch_unit: EpochUnit = EpochUnit.AUTO
    """Unit of epoch numbers; ``auto`` infers it from the magnitude."""
    date_rule: DateRule = DateRule.LOCAL
    """``local``: the date as written in the value's own offset; ``utc``: the UTC date."""
    kafka_timestamp_fallback: bool = False
    """Use the Kafka record timestamp (UTC date) when no candidate field has a value."""
    min_date: date = BIGQUERY_MIN_DATE
    """Earliest accepted event date (inclusive); earlier is ``invalid_event_time``."""
    max_date: date = BIGQUERY_MAX_DATE
    """Latest accepted event date (inclusive); later is ``invalid_event_time``."""

    def __post_init__(self) -> None:
        if isinstance(self.fields, str):
            raise ValueError("EventTimeConfig.fields must be a sequence of paths, not a string")
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "epoch_unit", EpochUnit(self.epoch_unit))
        object.__setattr__(self, "date_rule", DateRule(self.date_rule))
        if self.min_date > self.max_date:
            raise ValueError(f"min_date {self.min_date} is after max_date {self.max_date}")


def event_date(
    config: EventTimeConfig,
    fields: Mapping[str, Any],
    kafka_timestamp_ms: int | None = None,
) -> date:
    """The event date of one record; raises :class:`MissingEventTimeError` or
    :class:`InvalidEventTimeError` (both ``BadInputError`` with a stable ``reason``)."""
    for path in config.fields:
        value = fields.get(path)
        if value is not None:
            try:
                day = value_date(value, config)
            except InvalidEventTimeError as error:
                raise InvalidEventTimeError(f"event time field {path!r}: {error}") from None
            return _in_range(day, config, f"field {path!r}")
    # Kafka reports -1 for "no timestamp"; negatives are never real record times.
    fallback_ms = kafka_timestamp_ms if config.kafka_timestamp_fallback else None
    if fallback_ms is not None and fallback_ms >= 0:
        day = _epoch_date(fallback_ms, EpochUnit.MILLISECONDS)
        return _in_range(day, config, "Kafka timestamp")
    tried = ", ".join(repr(path) for path in config.fields) or "no candidate fields configured"
    fallback = (
        "the Kafka timestamp is unknown"
        if config.kafka_timestamp_fallback
        else "Kafka timestamp fallback is off"
    )
    raise MissingEventTimeError(f"no event time: none of {tried} has a value and {fallback}")


def event_hour(
    config: EventTimeConfig,
    fields: Mapping[str, Any],
    kafka_timestamp_ms: int | None = None,
) -> int:
    """The event hour of one record, hours since 1970-01-01T00 UTC (see the module docstring);
    raises like :func:`event_date`, whose checks it repeats (it is called for the records of
    HOUR tables only, after :func:`event_date`)."""
    for path in config.fields:
        value = fields.get(path)
        if value is not None:
            try:
                hour = value_hour(value, config)
            except InvalidEventTimeError as error:
                raise InvalidEventTimeError(f"event time field {path!r}: {error}") from None
            return _hour_in_range(hour, f"field {path!r}")
    fallback_ms = kafka_timestamp_ms if config.kafka_timestamp_fallback else None
    if fallback_ms is not None and fallback_ms >= 0:
        return _hour_in_range(fallback_ms // _MS_PER_HOUR, "Kafka timestamp")
    event_date(config, fields, kafka_timestamp_ms)  # raises its MissingEventTimeError
    raise MissingEventTimeError("no event time")  # unreachable: event_date raised


def event_date_and_hour(
    config: EventTimeConfig,
    fields: Mapping[str, Any],
    kafka_timestamp_ms: int | None = None,
) -> tuple[date, int]:
    """``(event_date(...), event_hour(...))`` from one read of the value: what the records
    of an HOUR table need, at the cost of one parse."""
    for path in config.fields:
        value = fields.get(path)
        if value is not None:
            try:
                day, hour = _value_date_hour(value, config)
            except InvalidEventTimeError as error:
                raise InvalidEventTimeError(f"event time field {path!r}: {error}") from None
            source = f"field {path!r}"
            return _in_range(day, config, source), _hour_in_range(hour, source)
    fallback_ms = kafka_timestamp_ms if config.kafka_timestamp_fallback else None
    if fallback_ms is not None and fallback_ms >= 0:
        day = _in_range(_epoch_date(fallback_ms, EpochUnit.MILLISECONDS), config, "Kafka timestamp")
        return day, _hour_in_range(fallback_ms // _MS_PER_HOUR, "Kafka timestamp")
    event_date(config, fields, kafka_timestamp_ms)  # raises its MissingEventTimeError
    raise MissingEventTimeError("no event time")  # unreachable: event_date raised


def _value_date_hour(value: Any, config: EventTimeConfig) -> tuple[date, int]:
    if isinstance(value, str):
        iso, zone = _split_annotations(value)
        try:
            moment = datetime.fromisoformat(iso)
        except ValueError:
            raise InvalidEventTimeError(f"{value!r} is not an ISO-8601 date or date-time") from None
        if moment.tzinfo is None and zone is not None:
            located = moment.replace(tzinfo=_zone(zone, value))
            # The date rule reads the zone only under utc (module docstring); the hour always.
            day = _datetime_date(
                located if config.date_rule is DateRule.UTC else moment, config.date_rule
            )
            return day, _datetime_hour(located)
        return _datetime_date(moment, config.date_rule), _datetime_hour(moment)
    return value_date(value, config), value_hour(value, config)


_MS_PER_HOUR = 3_600_000
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_EPOCH_HOUR = _MIN_EPOCH_DAY * 24  # 0001-01-01T00 UTC
_MAX_EPOCH_HOUR = _MAX_EPOCH_DAY * 24 + 23  # 9999-12-31T23 UTC


def _hour_in_range(hour: int, source: str) -> int:
    if _MIN_EPOCH_HOUR <= hour <= _MAX_EPOCH_HOUR:
        return hour
    raise InvalidEventTimeError(
        f"event time from {source} has its UTC hour outside 0001-01-01T00..9999-12-31T23"
    )


def value_hour(value: Any, config: EventTimeConfig) -> int:
    """The UTC hour (hours since 1970) of one non-null event-time value under ``config``'s
    epoch unit; raises :class:`InvalidEventTimeError`."""
    if isinstance(value, datetime):
        return _datetime_hour(value)
    if isinstance(value, date):
        return epoch_day(value) * 24
    if isinstance(value, str):
        iso, zone = _split_annotations(value)
        try:
            moment = datetime.fromisoformat(iso)
        except ValueError:
            raise InvalidEventTimeError(f"{value!r} is not an ISO-8601 date or date-time") from None
        if moment.tzinfo is None and zone is not None:
            moment = moment.replace(tzinfo=_zone(zone, value))
        return _datetime_hour(moment)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _epoch_date(value, config.epoch_unit)  # the same finiteness and range checks
        unit = config.epoch_unit
        if unit is EpochUnit.AUTO:
            unit = _inferred_unit(abs(value))
        per_hour = _UNITS_PER_DAY[unit] // 24
        return value // per_hour if isinstance(value, int) else math.floor(value / per_hour)
    raise InvalidEventTimeError(f"unsupported value type {type(value).__name__}: {value!r}")


def _datetime_hour(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _UNIX_EPOCH  # exact integers: a float would round 13:59:59.9999999 up
    return (delta.days * 86_400 + delta.seconds) // 3600


def epoch_day(day: date) -> int:
    """Days since 1970-01-01: the Avro ``date`` encoding of the event date column."""
    return day.toordinal() - _EPOCH_ORDINAL


def from_epoch_day(days: int) -> date:
    """The date ``days`` after 1970-01-01 (inverse of :func:`epoch_day`)."""
    return date.fromordinal(days + _EPOCH_ORDINAL)


def value_date(value: Any, config: EventTimeConfig) -> date:
    """The date of one non-null event-time value under ``config``'s unit and date rule
    (no range check); raises :class:`InvalidEventTimeError`."""
    if isinstance(value, datetime):  # before date: datetime is a date subclass
        return _datetime_date(value, config.date_rule)
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        return _string_date(value, config.date_rule)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _epoch_date(value, config.epoch_unit)
    raise InvalidEventTimeError(f"unsupported value type {type(value).__name__}: {value!r}")


def _in_range(day: date, config: EventTimeConfig, source: str) -> date:
    if config.min_date <= day <= config.max_date:
        return day
    raise InvalidEventTimeError(
        f"event time from {source} is {day.isoformat()}, outside the accepted range "
        f"{config.min_date.isoformat()}..{config.max_date.isoformat()}"
    )


def _datetime_date(moment: datetime, rule: DateRule) -> date:
    if rule is DateRule.UTC and moment.tzinfo is not None:
        try:
            return moment.astimezone(UTC).date()
        except OverflowError:
            raise InvalidEventTimeError(
                f"{moment.isoformat()} is outside the date range in UTC"
            ) from None
    return moment.date()


def _string_date(text: str, rule: DateRule) -> date:
    iso, zone = _split_annotations(text)
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise InvalidEventTimeError(f"{text!r} is not an ISO-8601 date or date-time") from None
    if rule is DateRule.UTC and moment.tzinfo is None and zone is not None:
        moment = moment.replace(tzinfo=_zone(zone, text))
    return _datetime_date(moment, rule)


def _split_annotations(text: str) -> tuple[str, str | None]:
    """``2024-09-13T14:36:45+02:00[Europe/Paris][u-ca=iso8601]`` → (the ISO part, the zone).

    The zone is the first bracketed annotation that is not a ``key=value`` tag; a leading ``!``
    (RFC 9557's critical flag) is dropped."""
    if not text.endswith("]"):
        return text, None
    start = text.find("[")
    if start <= 0:
        raise InvalidEventTimeError(f"{text!r} has no date-time before its annotations")
    annotations = text[start + 1 : -1].split("][")
    zones = [a.lstrip("!") for a in annotations if "=" not in a]
    return text[:start], zones[0] if zones else None


def _zone(name: str, text: str) -> ZoneInfo:
    try:
        return _cached_zone(name)
    except (ValueError, LookupError):  # ZoneInfoNotFoundError is a KeyError
        raise InvalidEventTimeError(f"{text!r}: unknown time zone {name!r}") from None


@lru_cache(maxsize=256)
def _cached_zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def _inferred_unit(magnitude: float) -> EpochUnit:
    if magnitude < _AUTO_SECONDS_BELOW:
        return EpochUnit.SECONDS
    if magnitude < _AUTO_MILLIS_BELOW:
        return EpochUnit.MILLISECONDS
    if magnitude < _AUTO_MICROS_BELOW:
        return EpochUnit.MICROSECONDS
    return EpochUnit.NANOSECONDS


def _epoch_date(value: int | float, unit: EpochUnit) -> date:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidEventTimeError(f"epoch value {value!r} is not a finite number")
    if unit is EpochUnit.AUTO:
        unit = _inferred_unit(abs(value))
    per_day = _UNITS_PER_DAY[unit]
    # Integers stay exact; floor (not truncation) keeps pre-1970 instants on the right day.
    days = value // per_day if isinstance(value, int) else math.floor(value / per_day)
    if not _MIN_EPOCH_DAY <= days <= _MAX_EPOCH_DAY:
        raise InvalidEventTimeError(
            f"epoch value {value!r} ({unit.value}) is outside the date range 0001-01-01..9999-12-31"
        )
    return from_epoch_day(int(days))
