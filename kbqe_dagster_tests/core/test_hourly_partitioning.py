"""HOUR-partitioned tables: where the setting lives (``tables:``), the event hour of a record,
the event hour column of an HOUR table's files, and manifests that count records per hour."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import (
    ConfigError,
    InvalidEventTimeError,
    MissingEventTimeError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.protocol.commit import parse_manifest, plan_range_commit
from kbqe_dagster.core.protocol.naming import AvroFileName, FileKey
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import (
    EnrichmentConfig,
    EnrichmentEncoder,
    event_hour_suffix,
    extended_schema,
    with_event_hour,
)
from kbqe_dagster.core.record.event_time import (
    DateRule,
    EpochUnit,
    EventTimeConfig,
    event_date,
    event_date_and_hour,
    event_hour,
)
from kbqe_dagster.core.record.partitioning import (
    Partitioning,
    epoch_hour_of,
    hour_key,
    hour_start,
    parse_hour_key,
)


def _raw(tables: Any = None, **extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "topics": [
            {"name": "clicks", "event_time": {"fields": ["ts"]}},
            {
                "name": "audit",
                "routing": {"mode": "static", "dataset": "ops", "table": "audit"},
                "event_time": {"kafka_timestamp_fallback": True},
            },
        ],
        "allowed_destinations": ["acme_web.*", "acme_sales.orders"],
        **extra,
    }
    if tables is not None:
        raw["tables"] = tables
    return raw


def _problems(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_config(raw, source="test.yaml")
    return str(caught.value)


# --- configuration -----------------------------------------------------------------------------
def test_tables_are_day_partitioned_unless_the_tables_map_says_hour() -> None:
    config = parse_pipeline_config(_raw(), source="test.yaml")
    assert config.partitioning("acme_web", "page_views") is Partitioning.DAY
    assert not config.tables.any_hourly
    assert config.topic_may_write_hourly("clicks") is False


def test_an_exact_key_wins_over_its_dataset_wildcard() -> None:
    config = parse_pipeline_config(
        _raw(
            {
                "acme_web.*": {"partitioning": "hour"},
                "acme_web.page_views": {"partitioning": "day"},
                "ops.audit": {"partitioning": "hour"},
            }
        ),
        source="test.yaml",
    )
    assert config.partitioning("acme_web", "clicks") is Partitioning.HOUR
    assert config.partitioning("acme_web", "page_views") is Partitioning.DAY
    assert config.partitioning("acme_sales", "orders") is Partitioning.DAY
    assert config.is_hourly("ops", "audit")
    # A static topic is hourly by its table; a fields-routed one may reach any HOUR table.
    assert config.topic_may_write_hourly("audit") is True
    assert config.topic_may_write_hourly("clicks") is True


def test_a_static_topic_of_a_day_table_is_not_hourly_when_others_are() -> None:
    config = parse_pipeline_config(
        _raw({"acme_sales.orders": {"partitioning": "hour"}}), source="test.yaml"
    )
    assert config.topic_may_write_hourly("audit") is False


@pytest.mark.parametrize(
    "tables, expected",
    [
        ({"acme_web.clicks": {"partitioning": "minute"}},
         "tables.acme_web.clicks.partitioning: expected one of"),
        ({"acme_web.clicks": {"partitoning": "hour"}},
         "tables.acme_web.clicks.partitoning: unknown key; did you mean 'partitioning'?"),
        ({"nowhere.clicks": {"partitioning": "hour"}},
         "tables.nowhere.clicks: not a destination of this pipeline"),
        ({"acme_sales.*": {"partitioning": "hour"}},
         "tables.acme_sales.*: dataset.* needs the allow-list entry 'acme_sales.*'"),
        ({"clicks": {"partitioning": "hour"}}, "tables.clicks: table key 'clicks' must be"),
        (["acme_web.*"], "tables: expected a mapping"),
        ({"kbqe_dead_letters.dead_letters": {"partitioning": "hour"}},
         "tables.kbqe_dead_letters.dead_letters.partitioning: the dead-letter table is "
         "DAY-partitioned"),
    ],
)  # fmt: skip
def test_wrong_tables_entries_are_named_by_key_path(tables: Any, expected: str) -> None:
    message = _problems(_raw(tables))
    assert expected in message and "1 problem(s)" in message


def test_keyed_tables_cannot_be_hourly() -> None:
    raw = _raw({"shop.*": {"partitioning": "hour"}}, allowed_destinations=["shop.*"])
    raw["topics"].append(
        {
            "name": "customers",
            "format": "debezium",
            "keyed": {},
            "routing": {"mode": "static", "dataset": "shop", "table": "customers"},
        }
    )
    assert "tables.shop.*.partitioning: covers the tables of keyed topic 'customers'" in (
        _problems(raw)
    )


# --- the event hour of a record -----------------------------------------------------------------
_UTC = EventTimeConfig(fields=("ts",), date_rule=DateRule.UTC)
_LOCAL = EventTimeConfig(fields=("ts",))
_H = 3_600


def _hour(text: str) -> int:
    return epoch_hour_of(datetime.fromisoformat(text))


@pytest.mark.parametrize(
    "value, config, expected",
    [
        ("2026-11-23T14:59:59.999999+00:00", _UTC, "2026-11-23T14"),
        ("2026-11-23T15:00:00Z", _UTC, "2026-11-23T15"),
        # The hour is the instant's UTC hour under either date rule ...
        ("2026-11-23T23:30:00-05:00", _LOCAL, "2026-11-24T04"),
        ("2026-11-23T23:30:00-05:00", _UTC, "2026-11-24T04"),
        # ... a zone id without an offset is resolved with its zone ...
        ("2026-07-01T10:15:00[Europe/Paris]", _LOCAL, "2026-07-01T08"),
        # ... naive values are UTC, a date alone is its midnight UTC.
        ("2026-11-23T14:05:00", _LOCAL, "2026-11-23T14"),
        ("2026-11-23", _LOCAL, "2026-11-23T00"),
        (date(2026, 11, 23), _LOCAL, "2026-11-23T00"),
        (datetime(2026, 11, 23, 14, 1, tzinfo=UTC), _LOCAL, "2026-11-23T14"),
        # Epochs in their unit (auto: by magnitude); pre-1970 floors to the earlier hour.
        (1_795_442_400, _LOCAL, "2026-11-23T14"),
        (1_795_442_400_000 + 3_599_999, _LOCAL, "2026-11-23T14"),
        (1_795_442_400_000_000, _LOCAL, "2026-11-23T14"),
        (-1, EventTimeConfig(fields=("ts",), epoch_unit=EpochUnit.SECONDS), "1969-12-31T23"),
    ],
)  # fmt: skip
def test_the_event_hour_is_the_utc_hour_of_the_event_instant(
    value: Any, config: EventTimeConfig, expected: str
) -> None:
    assert hour_key(event_hour(config, {"ts": value})) == expected
    # The hot path's one-parse reader gives the same date and hour as the two readers.
    assert event_date_and_hour(config, {"ts": value}) == (
        event_date(config, {"ts": value}),
        event_hour(config, {"ts": value}),
    )


def test_the_kafka_timestamp_gives_the_hour_when_it_gives_the_date() -> None:
    config = EventTimeConfig(fields=("ts",), kafka_timestamp_fallback=True)
    ts = 1_795_442_400_000 + 45 * 60_000  # 2026-11-23T14:45Z
    assert hour_key(event_hour(config, {}, ts)) == "2026-11-23T14"
    assert event_date(config, {}, ts) == date(2026, 11, 23)
    assert event_date_and_hour(config, {}, ts) == (date(2026, 11, 23), event_hour(config, {}, ts))


def test_a_value_without_an_hour_is_bad_input_like_its_date() -> None:
    with pytest.raises(InvalidEventTimeError, match="field 'ts'"):
        event_hour(_UTC, {"ts": "yesterday"})
    with pytest.raises(InvalidEventTimeError, match="unknown time zone"):
        event_hour(_LOCAL, {"ts": "2026-07-01T10:15:00[Mars/Olympus]"})
    with pytest.raises(InvalidEventTimeError, match="not a finite number"):
        event_hour(_LOCAL, {"ts": float("nan")})
    with pytest.raises(InvalidEventTimeError, match="unknown time zone"):
        event_date_and_hour(_LOCAL, {"ts": "2026-07-01T10:15:00[Mars/Olympus]"})
    with pytest.raises(InvalidEventTimeError, match="outside the accepted range"):
        event_date_and_hour(
            EventTimeConfig(fields=("ts",), max_date=date(2026, 1, 1)),
            {"ts": "2026-07-01T10:15:00Z"},
        )
    with pytest.raises(MissingEventTimeError):
        event_date_and_hour(_UTC, {})


def test_the_date_rule_reads_a_zone_id_only_under_utc_the_hour_always() -> None:
    value = {"ts": "2026-07-01T23:30:00[America/New_York]"}  # 2026-07-02T03:30Z
    assert event_date_and_hour(_LOCAL, value) == (date(2026, 7, 1), event_hour(_LOCAL, value))
    assert event_date_and_hour(_UTC, value)[0] == date(2026, 7, 2)
    assert hour_key(event_date_and_hour(_UTC, value)[1]) == "2026-07-02T03"


def test_hour_keys_round_trip() -> None:
    hour = _hour("2026-11-23T14:00:00+00:00")
    assert hour_key(hour) == "2026-11-23T14"
    assert parse_hour_key("2026-11-23T14") == hour_start(hour)
    assert hour_start(hour) == datetime(2026, 11, 23, 14, tzinfo=UTC)


# --- the event hour column -----------------------------------------------------------------------
_WRITER = {
    "type": "record",
    "name": "Click",
    "namespace": "acme",
    "fields": [{"name": "url", "type": "string"}],
}


def test_an_hour_table_s_files_carry_the_event_hour_last_among_the_enrichment_columns() -> None:
    config = EnrichmentConfig()
    daily = extended_schema(_WRITER, config)
    hourly = extended_schema(_WRITER, config, hourly=True)
    names = [f["name"] for f in hourly["fields"]]
    assert names == [*config.columns, "_event_hour", "url"]
    assert [f["name"] for f in daily["fields"]] == [*config.columns, "url"]
    assert hourly["fields"][len(config.columns)]["type"] == {
        "type": "long",
        "logicalType": "timestamp-millis",
    }
    # A format's own DAY file schema becomes the same HOUR file schema.
    assert with_event_hour(daily, config) == hourly


def test_the_prefix_plus_the_hour_suffix_is_a_record_of_the_hour_schema() -> None:
    config = EnrichmentConfig()
    schema = extended_schema(_WRITER, config, hourly=True)
    hour = _hour("2026-11-23T14:00:00+00:00")
    prefix = EnrichmentEncoder(config, "clicks", 3).encode(
        20_415, 42, 1_795_442_400_123
    ) + event_hour_suffix(hour)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(_WRITER), {"url": "/a"})
    record = fastavro.schemaless_reader(
        io.BytesIO(prefix + body.getvalue()), fastavro.parse_schema(schema)
    )
    assert record["_event_hour"] == datetime(2026, 11, 23, 14, tzinfo=UTC)
    assert record["_kafka_offset"] == 42 and record["url"] == "/a"


def test_the_event_hour_column_may_not_collide_with_a_record_field() -> None:
    writer = {**_WRITER, "fields": [{"name": "_EVENT_HOUR", "type": "long"}]}
    with pytest.raises(UnsupportedSchemaError, match="_event_hour"):
        extended_schema(writer, EnrichmentConfig(), hourly=True)
    with pytest.raises(UnsupportedSchemaError, match="event_hour_column"):
        with_event_hour(extended_schema(writer, EnrichmentConfig()), EnrichmentConfig())
    with pytest.raises(ConfigError, match="both name column"):
        EnrichmentConfig(event_hour_column="_event_date")


# --- manifests ---------------------------------------------------------------------------------
def _range_commit(**kwargs: Any):
    rng = OffsetRange("clicks", 0, 10, 19)
    avro = AvroFileName(FileKey("clicks", 0, "acme_web", "clicks", 7, 10))
    return avro, plan_range_commit(
        rng, [(avro, 10)], created_at=datetime(2026, 11, 23, 15, tzinfo=UTC), **kwargs
    )


def test_a_manifest_records_hours_next_to_days_and_reads_them_back() -> None:
    avro, commit = _range_commit(
        days={
            AvroFileName(FileKey("clicks", 0, "acme_web", "clicks", 7, 10)).name: {"2026-11-23": 10}
        },
        hours={
            AvroFileName(FileKey("clicks", 0, "acme_web", "clicks", 7, 10)).name: {
                "2026-11-23T14": 6,
                "2026-11-23T13": 4,
            }
        },
    )
    assert b'"hours":{"2026-11-23T13":4,"2026-11-23T14":6}' in commit.content
    parsed = parse_manifest(commit.content, commit.done_files[0].name)
    assert parsed is not None
    (staged,) = parsed.files
    assert staged.hours == (("2026-11-23T13", 4), ("2026-11-23T14", 6))
    assert staged.days == (("2026-11-23", 10),)


def test_a_day_table_s_manifest_has_no_hours_and_old_manifests_still_parse() -> None:
    _, commit = _range_commit()
    assert b'"hours"' not in commit.content
    parsed = parse_manifest(commit.content, commit.done_files[0].name)
    assert parsed is not None and parsed.files[0].hours == ()


@pytest.mark.parametrize(
    "value",
    [
        "9999-12-31T23:30:00-05:00",  # dated 9999-12-31 as written; 10000-01-01T04 in UTC
        "0001-01-01T00:30:00+01:00",  # dated 0001-01-01 as written; year 0 in UTC
    ],
)
def test_an_hour_outside_the_years_0001_to_9999_is_invalid_though_its_date_is_not(value) -> None:
    """Under ``local`` the date as written is in range but the UTC hour is not: the HOUR
    table's record is bad input (its hour has no partition key), not a range that fails at
    commit; a DAY table's record keeps its date."""
    assert event_date(_LOCAL, {"ts": value}) in (date(9999, 12, 31), date(1, 1, 1))
    with pytest.raises(InvalidEventTimeError, match="UTC hour outside"):
        event_hour(_LOCAL, {"ts": value})
    with pytest.raises(InvalidEventTimeError, match="UTC hour outside"):
        event_date_and_hour(_LOCAL, {"ts": value})
