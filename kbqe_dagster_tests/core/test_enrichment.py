"""Enrichment: the encoded prefix followed by a Confluent body is a record of the extended
schema — the writer's fields, then the enrichment columns — and the extended schema is a
deterministic function of the writer schema and the config."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json

import fastavro
import pytest

from kbqe_dagster.core.errors import ConfigError, UnsupportedSchemaError
from kbqe_dagster.core.record.enrichment import (
    EnrichmentConfig,
    EnrichmentEncoder,
    _long,
    encode_enrichment,
    extended_schema,
    schema_json,
)

UTC = dt.UTC
WRITER = {
    "type": "record", "name": "Order", "namespace": "com.acme", "doc": "an order",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lines", "type": {"type": "array", "items": {
            "type": "record", "name": "Line", "fields": [{"name": "sku", "type": "string"}]}}},
    ],
}  # fmt: skip
ORDER = {"id": "o-1", "at": dt.datetime(2024, 9, 13, 12, 0, tzinfo=UTC), "lines": [{"sku": "a"}]}
FULL = EnrichmentConfig(key_column="_key", headers_column="_headers")


def body_of(schema, value) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def decode(schema, data: bytes):
    stream = io.BytesIO(data)
    value = fastavro.schemaless_reader(stream, fastavro.parse_schema(schema))
    assert stream.tell() == len(data)
    return value


def test_default_columns_in_order():
    assert EnrichmentConfig().columns == (
        "_event_date", "_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp",
    )  # fmt: skip
    assert FULL.columns[-2:] == ("_key", "_headers")


def test_extended_schema_puts_the_columns_first_and_keeps_the_record_identity():
    extended = extended_schema(WRITER, FULL)
    assert (extended["name"], extended["namespace"], extended["doc"]) == (
        "Order",
        "com.acme",
        "an order",
    )
    assert [f["name"] for f in extended["fields"]] == [*FULL.columns, "id", "at", "lines"]
    assert extended["fields"][0]["type"] == {"type": "int", "logicalType": "date"}
    assert extended["fields"][4]["type"] == [
        "null",
        {"type": "long", "logicalType": "timestamp-millis"},
    ]
    fastavro.parse_schema(extended)  # a valid schema


def test_a_field_added_at_the_end_keeps_every_older_column_in_its_position():
    # Readers that match Avro columns by position (the BigQuery emulator, DuckDB) line up
    # files of both schema versions: that is why the enrichment goes first.
    evolved = {
        **WRITER,
        "fields": WRITER["fields"]
        + [{"name": "coupon", "type": ["null", "string"], "default": None}],
    }
    old = [f["name"] for f in extended_schema(WRITER, FULL)["fields"]]
    new = [f["name"] for f in extended_schema(evolved, FULL)["fields"]]
    assert new[: len(old)] == old and new[len(old) :] == ["coupon"]


def test_extended_schema_does_not_touch_its_input():
    before = copy.deepcopy(WRITER)
    extended_schema(WRITER, FULL)["fields"][0]["name"] = "changed"
    assert before == WRITER


def test_extended_schema_json_is_deterministic():
    first = schema_json(extended_schema(WRITER, FULL))
    again = schema_json(
        extended_schema(
            json.loads(json.dumps(WRITER)),
            EnrichmentConfig(key_column="_key", headers_column="_headers"),
        )
    )
    assert first == again
    assert json.loads(first) == extended_schema(WRITER, FULL)


@pytest.mark.parametrize(
    "config, value",
    [
        (EnrichmentConfig(), {"_event_date": dt.date(2024, 9, 13), "_kafka_topic": "com.acme.events",
                              "_kafka_partition": 7, "_kafka_offset": 123_456_789_012,
                              "_kafka_timestamp": dt.datetime(2024, 9, 13, 14, 36, 45, 123000, tzinfo=UTC)}),
        (FULL, {"_event_date": dt.date(2024, 9, 13), "_kafka_topic": "com.acme.events", "_kafka_partition": 7,
                "_kafka_offset": 123_456_789_012,
                "_kafka_timestamp": dt.datetime(2024, 9, 13, 14, 36, 45, 123000, tzinfo=UTC),
                "_key": b"k-1", "_headers": [{"key": "trace", "value": b"\x00\x01"}, {"key": "trace", "value": None}]}),
        (EnrichmentConfig(timestamp_column=None, offset_column="off"),
         {"_event_date": dt.date(2024, 9, 13), "_kafka_topic": "com.acme.events", "_kafka_partition": 7,
          "off": 123_456_789_012}),
    ],
    ids=["default", "key_and_headers", "no_timestamp_renamed_offset"],
)  # fmt: skip
def test_prefix_plus_body_decodes_to_the_enrichment_and_the_original_fields(config, value):
    prefix = EnrichmentEncoder(config, "com.acme.events", 7).encode(
        19979, 123_456_789_012, 1_726_238_205_123, b"k-1", [("trace", b"\x00\x01"), ("trace", None)]
    )
    assert decode(extended_schema(WRITER, config), prefix + body_of(WRITER, ORDER)) == {
        **ORDER,
        **value,
    }


@pytest.mark.parametrize("timestamp", [None, -1, 253_402_300_800_000, 2**62])
def test_an_unknown_or_impossible_kafka_timestamp_is_null(timestamp):
    prefix = EnrichmentEncoder(FULL, "t", 0).encode(0, 0, timestamp)
    record = decode(extended_schema(WRITER, FULL), prefix + body_of(WRITER, ORDER))
    assert (record["_kafka_timestamp"], record["_key"], record["_headers"]) == (None, None, [])


@pytest.mark.parametrize("day", [-719162, -1, 0, 19979, 2932896])
@pytest.mark.parametrize("offset", [0, 63, 64, 8191, 8192, 2**27, 2**40, 2**62, 2**63 - 1])
def test_days_and_offsets_round_trip_at_varint_boundaries(day, offset):
    prefix = encode_enrichment(
        day, "t", 2**31 - 1, offset, 1_726_238_205_123, None, None, EnrichmentConfig()
    )
    record = decode(extended_schema(WRITER, EnrichmentConfig()), prefix + body_of(WRITER, ORDER))
    assert record["_event_date"] == dt.date(1970, 1, 1) + dt.timedelta(days=day)
    assert (record["_kafka_offset"], record["_kafka_partition"]) == (offset, 2**31 - 1)


@pytest.mark.parametrize(
    "value", [0, -1, 1, 63, -64, 64, 8191, -8193, 2**21, 2**42, -(2**42), 2**63 - 1, -(2**63)]
)
def test_long_encoding_is_avro_zigzag(value):
    assert _long(value) == body_of(
        {"type": "record", "name": "L", "fields": [{"name": "v", "type": "long"}]}, {"v": value}
    )


def test_encode_enrichment_equals_the_encoder():
    encoder = EnrichmentEncoder(FULL, "t", 3)
    assert encode_enrichment(5, "t", 3, 10, 20, b"k", [("h", b"v")], FULL) == encoder.encode(
        5, 10, 20, b"k", [("h", b"v")]
    )


def test_a_partition_beyond_int32_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        EnrichmentEncoder(EnrichmentConfig(), "t", 2**31)


@pytest.mark.parametrize(
    "schema, match",
    [
        ({**WRITER, "fields": [*WRITER["fields"], {"name": "_KAFKA_OFFSET", "type": "long"}]}, "collides"),
        ({"type": "array", "items": "string"}, "only record schemas"),
        ("string", "only record schemas"),
        ({"type": "record", "name": "X"}, "no field list"),
        ({**WRITER, "fields": [*WRITER["fields"], {"name": "h", "type": {
            "type": "record", "name": "KafkaHeader", "namespace": "kbqe_dagster.enrichment", "fields": []}}]},
         "headers record"),
    ],
    ids=["column_collision_case_insensitive", "array", "primitive", "no_fields", "header_type_collision"],
)  # fmt: skip
def test_schemas_that_cannot_be_extended_are_unsupported(schema, match):
    with pytest.raises(UnsupportedSchemaError, match=match) as caught:
        extended_schema(schema, FULL)
    assert caught.value.reason == "unsupported_schema"


def test_from_mapping_takes_defaults_and_overrides():
    assert EnrichmentConfig.from_mapping(None) == EnrichmentConfig()
    assert EnrichmentConfig.from_mapping(
        {"key_column": "k", "timestamp_column": None}
    ) == EnrichmentConfig(key_column="k", timestamp_column=None)


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"colour": "x"}, r"pipeline.enrichment: unknown key\(s\) \['colour'\]"),
        ({"offset_column": None}, r"pipeline.enrichment.offset_column: this column is required"),
        ({"key_column": 3}, r"pipeline.enrichment.key_column: expected a column name"),
        ({"key_column": "has space"}, "not a valid Avro/BigQuery column name"),
        ({"key_column": "_Kafka_Topic"}, "both name column"),
        (["key_column"], "expected a mapping"),
    ],
)
def test_from_mapping_names_the_bad_key(raw, match):
    with pytest.raises(ConfigError, match=match):
        EnrichmentConfig.from_mapping(raw, "pipeline.enrichment")


def test_the_last_representable_kafka_timestamp_is_kept():
    prefix = EnrichmentEncoder(EnrichmentConfig(), "t", 0).encode(0, 0, 253_402_300_799_999)
    record = decode(extended_schema(WRITER, EnrichmentConfig()), prefix + body_of(WRITER, ORDER))
    assert record["_kafka_timestamp"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)
