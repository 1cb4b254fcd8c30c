"""Event time: which value decides a record's DAY partition, and how it is read."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest

from kbqe_dagster.core.errors import (
    BadInputError,
    EventTimeError,
    InvalidEventTimeError,
    MissingEventTimeError,
)
from kbqe_dagster.core.record.event_time import (
    DateRule,
    EpochUnit,
    EventTimeConfig,
    epoch_day,
    event_date,
    from_epoch_day,
)

LOCAL = EventTimeConfig(fields=("t",))
UTC = EventTimeConfig(fields=("t",), date_rule=DateRule.UTC)


def _date(value: Any, config: EventTimeConfig = LOCAL) -> date:
    return event_date(config, {"t": value})


def test_design_example_zoned_timestamp_is_epoch_day_19979() -> None:
    day = _date("2024-09-13T14:36:45.123+02:00[Europe/Paris]")
    assert day == date(2024, 9, 13)
    assert epoch_day(day) == 19979


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2024-09-13T14:36:45Z", date(2024, 9, 13)),
        ("2024-09-13T14:36:45+02:00", date(2024, 9, 13)),
        ("2024-09-13T14:36:45.123456Z", date(2024, 9, 13)),
        ("2024-09-13T23:59:59.999999999Z", date(2024, 9, 13)),  # nanos truncated, no rounding up
        ("2024-09-13T14:36:45.1234567-07:00", date(2024, 9, 13)),
        ("2024-09-13 14:36:45+02:00", date(2024, 9, 13)),
        ("2024-09-13", date(2024, 9, 13)),
        ("2024-09-13T14:36:45", date(2024, 9, 13)),
        ("2024-02-29T00:00:00+14:00", date(2024, 2, 29)),
        ("2024-09-13T14:36:45+02:00[Europe/Paris][u-ca=iso8601]", date(2024, 9, 13)),
        ("2024-09-13T14:36:45+02:00[!Europe/Paris]", date(2024, 9, 13)),
        ("20240913T143645Z", date(2024, 9, 13)),  # ISO basic format, never an epoch
    ],
)
def test_iso_strings_give_the_date_as_written(text: str, expected: date) -> None:
    assert _date(text) == expected


@pytest.mark.parametrize(
    "text, local, utc",
    [
        ("2024-09-13T23:30:00-05:00", date(2024, 9, 13), date(2024, 9, 14)),
        ("2024-09-14T01:30:00+02:00[Europe/Paris]", date(2024, 9, 14), date(2024, 9, 13)),
        ("2024-09-13T12:00:00Z", date(2024, 9, 13), date(2024, 9, 13)),
        ("2024-09-13T23:30:00", date(2024, 9, 13), date(2024, 9, 13)),  # naive: taken as UTC
        ("2024-09-13", date(2024, 9, 13), date(2024, 9, 13)),
        # No offset but a zone: the utc rule resolves the zone (EDT is UTC-4 in September).
        ("2024-09-13T21:30:00[America/New_York]", date(2024, 9, 13), date(2024, 9, 14)),
        ("2024-01-13T21:30:00[America/New_York]", date(2024, 1, 13), date(2024, 1, 14)),
        ("2024-09-13T19:30:00[America/New_York]", date(2024, 9, 13), date(2024, 9, 13)),
    ],
)
def test_date_rule_local_keeps_the_written_date_utc_converts(
    text: str, local: date, utc: date
) -> None:
    assert (_date(text, LOCAL), _date(text, UTC)) == (local, utc)


def test_unknown_zone_matters_only_when_it_must_be_resolved() -> None:
    text = "2024-09-13T23:30:00[Mars/Olympus_Mons]"
    assert _date(text, LOCAL) == date(2024, 9, 13)
    with pytest.raises(InvalidEventTimeError, match="unknown time zone 'Mars/Olympus_Mons'"):
        _date(text, UTC)


@pytest.mark.parametrize(
    "value, unit, expected",
    [
        (1726238205, EpochUnit.SECONDS, date(2024, 9, 13)),
        (1726238205123, EpochUnit.MILLISECONDS, date(2024, 9, 13)),
        (1726238205123456, EpochUnit.MICROSECONDS, date(2024, 9, 13)),
        (1726238205123456789, EpochUnit.NANOSECONDS, date(2024, 9, 13)),
        (1726238205.9, EpochUnit.SECONDS, date(2024, 9, 13)),
        (0, EpochUnit.SECONDS, date(1970, 1, 1)),
        (-1, EpochUnit.SECONDS, date(1969, 12, 31)),  # floor, not truncation toward zero
        (-1.5, EpochUnit.MILLISECONDS, date(1969, 12, 31)),
        (-86_400_000, EpochUnit.MILLISECONDS, date(1969, 12, 31)),
        (-86_400_001, EpochUnit.MILLISECONDS, date(1969, 12, 30)),
        # A configured unit is obeyed even where auto would guess otherwise.
        (1726238205123, EpochUnit.SECONDS, None),
        (1726238205, EpochUnit.MILLISECONDS, date(1970, 1, 20)),
    ],
)
def test_epoch_numbers_in_the_configured_unit(
    value: float, unit: EpochUnit, expected: date | None
) -> None:
    config = EventTimeConfig(fields=("t",), epoch_unit=unit)
    if expected is None:
        with pytest.raises(InvalidEventTimeError, match="outside the date range"):
            _date(value, config)
    else:
        assert _date(value, config) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        (1726238205, date(2024, 9, 13)),  # seconds
        (99_999_999_999, date(5138, 11, 16)),  # largest seconds value
        (100_000_000_000, date(1973, 3, 3)),  # smallest milliseconds value
        (1726238205123, date(2024, 9, 13)),
        (1726238205123456, date(2024, 9, 13)),
        (1726238205123456789, date(2024, 9, 13)),  # nanoseconds
        (-1726238205, date(1915, 4, 20)),  # thresholds apply to |value|
        (1726238205.5, date(2024, 9, 13)),
    ],
)
def test_auto_unit_is_inferred_from_magnitude(value: float, expected: date) -> None:
    assert _date(value) == expected


@pytest.mark.parametrize(
    "value, local, utc",
    [
        (date(2024, 9, 13), date(2024, 9, 13), date(2024, 9, 13)),
        (datetime(2024, 9, 13, 23, 0, tzinfo=timezone.utc), date(2024, 9, 13), date(2024, 9, 13)),  # noqa: UP017 (UTC names an EventTimeConfig here)
        (
            datetime(2024, 9, 13, 23, 0, tzinfo=timezone(timedelta(hours=-3))),
            date(2024, 9, 13),
            date(2024, 9, 14),
        ),
        (datetime(2024, 9, 13, 23, 0), date(2024, 9, 13), date(2024, 9, 13)),  # local-timestamp
    ],
)
def test_avro_logical_values_follow_the_date_rule(value: date, local: date, utc: date) -> None:
    assert (_date(value, LOCAL), _date(value, UTC)) == (local, utc)


def test_first_present_non_null_candidate_wins() -> None:
    config = EventTimeConfig(fields=("a", "b.c", "d"))
    fields = {"a": None, "b.c": "2024-01-02", "d": "2030-01-01"}
    assert event_date(config, fields) == date(2024, 1, 2)
    assert event_date(config, {"d": "2030-01-01"}) == date(2030, 1, 1)


def test_present_invalid_candidate_does_not_fall_through() -> None:
    config = EventTimeConfig(fields=("a", "b"), kafka_timestamp_fallback=True)
    with pytest.raises(InvalidEventTimeError, match="field 'a'"):
        event_date(config, {"a": "yesterday", "b": "2024-01-02"}, 1726238205123)


@pytest.mark.parametrize(
    "fields, kafka_ms, fallback, expected",
    [
        ({}, 1726238205123, True, date(2024, 9, 13)),
        ({"t": None}, 1726264800000, True, date(2024, 9, 13)),  # 22:00 UTC: the UTC date
        ({"t": "2020-05-05"}, 1726238205123, True, date(2020, 5, 5)),
        ({}, 0, True, date(1970, 1, 1)),
    ],
)
def test_kafka_timestamp_is_the_fallback_when_configured(
    fields: dict[str, Any], kafka_ms: int, fallback: bool, expected: date
) -> None:
    config = EventTimeConfig(fields=("t",), kafka_timestamp_fallback=fallback)
    assert event_date(config, fields, kafka_ms) == expected


@pytest.mark.parametrize(
    "config, kafka_ms, message_part",
    [
        (EventTimeConfig(fields=("t", "u")), 1726238205123, "'t', 'u'"),
        (EventTimeConfig(fields=("t",)), 1726238205123, "fallback is off"),
        (EventTimeConfig(fields=("t",), kafka_timestamp_fallback=True), None, "unknown"),
        (EventTimeConfig(fields=("t",), kafka_timestamp_fallback=True), -1, "unknown"),
        (EventTimeConfig(), None, "no candidate fields"),
    ],
)
def test_no_value_is_missing_event_time(
    config: EventTimeConfig, kafka_ms: int | None, message_part: str
) -> None:
    with pytest.raises(MissingEventTimeError) as caught:
        event_date(config, {"t": None, "other": "2024-01-01"}, kafka_ms)
    assert caught.value.reason == "missing_event_time"
    assert message_part in str(caught.value)


@pytest.mark.parametrize(
    "value, message_part",
    [
        ("", "not an ISO-8601"),
        ("yesterday", "not an ISO-8601"),
        ("1726238205123", "not an ISO-8601"),  # strings are never epochs
        ("2024-13-01", "not an ISO-8601"),
        ("2024-09-13T25:00:00Z", "not an ISO-8601"),
        ("10000-01-01", "not an ISO-8601"),
        ("[Europe/Paris]", "no date-time before"),
        ("2024-09-13T14:36:45+02:00[Europe/Paris", "not an ISO-8601"),
        (True, "unsupported value type bool"),
        (b"2024-09-13", "unsupported value type bytes"),
        ([2024, 9, 13], "unsupported value type list"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        (10**30, "outside the date range"),
        (-(10**22), "outside the date range"),
    ],
)
def test_unreadable_values_are_invalid_event_time(value: Any, message_part: str) -> None:
    with pytest.raises(InvalidEventTimeError) as caught:
        _date(value)
    assert caught.value.reason == "invalid_event_time"
    assert "'t'" in str(caught.value)
    assert message_part in str(caught.value)


def test_utc_conversion_that_leaves_the_calendar_is_invalid() -> None:
    with pytest.raises(InvalidEventTimeError, match="outside the date range in UTC"):
        _date("0001-01-01T00:30:00+01:00", UTC)
    assert _date("0001-01-01T00:30:00+01:00", LOCAL) == date(1, 1, 1)


@pytest.mark.parametrize(
    "value, source, ok",
    [
        ("2000-01-01", "field 't'", True),
        ("2099-12-31", "field 't'", True),
        ("1999-12-31", "field 't'", False),
        ("2100-01-01", "field 't'", False),
        (date(2100, 1, 1), "field 't'", False),
        (None, "Kafka timestamp", False),  # Kafka fallback is range-checked too (1970)
    ],
)
def test_configured_date_range_is_enforced_inclusively(value: Any, source: str, ok: bool) -> None:
    config = EventTimeConfig(
        fields=("t",),
        min_date=date(2000, 1, 1),
        max_date=date(2099, 12, 31),
        kafka_timestamp_fallback=True,
    )
    if ok:
        assert event_date(config, {"t": value}, 0) == date.fromisoformat(value)
    else:
        expected = f"from {source} .* outside the accepted range"
        with pytest.raises(InvalidEventTimeError, match=expected):
            event_date(config, {"t": value}, 0)


def test_far_future_dates_inside_bigquerys_range_are_accepted_by_default() -> None:
    assert _date("9999-12-31T23:59:59Z") == date(9999, 12, 31)
    assert _date("0001-01-01") == date(1, 1, 1)


def test_event_time_errors_are_bad_input() -> None:
    assert issubclass(MissingEventTimeError, EventTimeError)
    assert issubclass(InvalidEventTimeError, EventTimeError)
    assert issubclass(EventTimeError, BadInputError)


@pytest.mark.parametrize(
    "day, days",
    [
        (date(1970, 1, 1), 0),
        (date(1969, 12, 31), -1),
        (date(2024, 9, 13), 19979),
        (date(1, 1, 1), -719162),
        (date(9999, 12, 31), 2932896),
    ],
)
def test_epoch_day_round_trips(day: date, days: int) -> None:
    assert epoch_day(day) == days
    assert from_epoch_day(days) == day


def test_config_coerces_strings_and_rejects_contradictions() -> None:
    config = EventTimeConfig(
        fields=["a", "b"],
        epoch_unit="ms",
        date_rule="utc",  # type: ignore[arg-type]
    )
    assert (config.fields, config.epoch_unit, config.date_rule) == (
        ("a", "b"),
        EpochUnit.MILLISECONDS,
        DateRule.UTC,
    )
    with pytest.raises(ValueError, match="not a string"):
        EventTimeConfig(fields="eventTime")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="after max_date"):
        EventTimeConfig(min_date=date(2020, 1, 1), max_date=date(2019, 1, 1))
    with pytest.raises(ValueError):
        EventTimeConfig(epoch_unit="minutes")  # type: ignore[arg-type]
