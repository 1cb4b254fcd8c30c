"""Rows for the Storage Write API: the proto writer schema of a staged file's Avro schema has
the columns the load path derives from that schema (names, modes, nesting, maps as repeated
key/value records), with the proto types of the API's type table; and every record the stage
path can write, decoded by fastavro, serializes to a message that parses back to the values a
load job would put in those columns."""

from __future__ import annotations

import datetime as dt
import io
import re
import uuid
from decimal import Decimal

import fastavro
import pytest
from google.protobuf import descriptor_pb2

from kbqe_dagster.core.errors import RowEncodeError, UnsupportedSchemaError
from kbqe_dagster.core.formats.avro_proto import (
    MAX_REQUEST_BYTES,
    ProtoRows,
    batches,
    encode_rows,
    proto_rows,
    proto_schema,
)
from kbqe_dagster.core.record.enrichment import (
    EnrichmentConfig,
    EnrichmentEncoder,
    event_hour_suffix,
    extended_schema,
    with_event_hour,
)
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro
from kbqe_dagster_tests.support.proto_rows import F, message_class, parsed

UTC = dt.UTC

# The proto types the API takes for each BigQuery column type, as this mapping chooses them
# ("Supported protocol buffer data types"): DATE int32 days, TIMESTAMP int64 micros, DATETIME,
# TIME and NUMERIC as their string literals.
PROTO_TYPE_OF = {
    "BOOLEAN": F.TYPE_BOOL,
    "INTEGER": F.TYPE_INT64,
    "FLOAT": F.TYPE_DOUBLE,
    "BYTES": F.TYPE_BYTES,
    "STRING": F.TYPE_STRING,
    "DATE": F.TYPE_INT32,
    "TIMESTAMP": F.TYPE_INT64,
    "DATETIME": F.TYPE_STRING,
    "TIME": F.TYPE_STRING,
    "NUMERIC": F.TYPE_STRING,
    "BIGNUMERIC": F.TYPE_STRING,
    "RECORD": F.TYPE_MESSAGE,
}

DEC = {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}
BIGDEC = {
    "type": "fixed",
    "name": "Big",
    "size": 20,
    "logicalType": "decimal",
    "precision": 40,
    "scale": 9,
}
ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "shop.common",
    "fields": [
        {"name": "city", "type": "string"},
        {"name": "zip", "type": ["null", "string"], "default": None},
    ],
}
EVERY_TYPE = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "small", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "ratio", "type": "float"},
        {"name": "amount", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "name", "type": "string"},
        {"name": "maybe", "type": ["null", "string"], "default": None},
        {"name": "maybe_last", "type": ["long", "null"]},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "clock_ms", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "clock_us", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "price", "type": DEC},
        {"name": "huge", "type": BIGDEC},
        {"name": "future", "type": {"type": "long", "logicalType": "some-future-type"}},
        {"name": "ship_to", "type": ADDRESS},
        {"name": "bill_to", "type": ["null", "shop.common.Address"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "scores", "type": {"type": "array", "items": ["null", "long"]}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "qty", "type": "int"},
                        {"name": "attrs", "type": {"type": "map", "values": "string"}},
                    ],
                },
            },
        },
        {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
        {"name": "where", "type": {"type": "map", "values": "shop.common.Address"}},
        {"name": "lists", "type": {"type": "map", "values": {"type": "array", "items": "int"}}},
        {
            "name": "nested_maps",
            "type": {"type": "map", "values": {"type": "map", "values": "int"}},
        },
        {"name": "opt_map", "type": ["null", {"type": "map", "values": "double"}], "default": None},
        {
            "name": "empty",
            "type": {
                "type": "record",
                "name": "Empty",
                "fields": [{"name": "nothing", "type": ["null", "int"], "default": None}],
            },
        },
    ],
}
ORDER = {
    "flag": True, "small": -7, "big": 2**62, "ratio": 1.1, "amount": -0.25, "blob": b"\x00\xff",
    "name": "Ünïcode ✓", "maybe": None, "maybe_last": 5, "color": "GREEN",
    "hash": b"\x01\x02\x03\x04", "day": dt.date(2024, 2, 29),
    "clock_ms": dt.time(23, 59, 58, 123000), "clock_us": dt.time(0, 0, 1, 5),
    "at_ms": dt.datetime(2024, 9, 13, 12, 0, 0, 123000, tzinfo=UTC),
    "at_us": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    "local_ms": dt.datetime(2024, 1, 2, 3, 4, 5, 6000),
    "local_us": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "price": Decimal("-123456789.125"), "huge": Decimal("12345678901234567890123456789.123456789"),
    "future": 42,
    "ship_to": {"city": "Paris", "zip": None}, "bill_to": {"city": "Lyon", "zip": "69001"},
    "tags": ["a", "", "c"], "scores": [1, 2],
    "lines": [{"sku": "x", "qty": 2, "attrs": {"size": "L"}}, {"sku": "y", "qty": 0, "attrs": {}}],
    "counts": {"a": 1, "b": None}, "where": {"home": {"city": "Nice", "zip": None}},
    "lists": {"evens": [2, 4], "none": []}, "nested_maps": {"outer": {"inner": 1}},
    "opt_map": None, "empty": {"nothing": None},
}  # fmt: skip


# --- helpers ---------------------------------------------------------------------------------
def avro_round_trip(schema, records) -> list[dict]:
    """The records as the stage path's reader sees them: written to an Avro container and
    decoded by fastavro (logical types decoded)."""
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records)
    out.seek(0)
    return list(fastavro.reader(out))


def assert_columns_match(fields, descriptor: descriptor_pb2.DescriptorProto) -> None:
    """The proto fields are the BigQuery columns: same names in the same order, REPEATED as
    repeated, RECORD as a nested message with the same columns, types per the API's table."""
    assert [f.name for f in descriptor.field] == [c["name"] for c in fields]
    nested = {n.name: n for n in descriptor.nested_type}
    for column, field in zip(fields, descriptor.field):
        repeated = field.label == F.LABEL_REPEATED
        assert repeated == (column["mode"] == "REPEATED"), column["name"]
        assert field.label != F.LABEL_REQUIRED  # REQUIRED is BigQuery's to enforce
        assert field.type == PROTO_TYPE_OF[column["type"]], column["name"]
        if column["type"] == "RECORD":
            assert_columns_match(column["fields"], nested[field.type_name])


# --- the writer schema -----------------------------------------------------------------------
def test_the_writer_schema_has_the_columns_a_load_of_the_same_file_creates() -> None:
    assert_columns_match(bigquery_schema_from_avro(EVERY_TYPE), proto_schema(EVERY_TYPE))


@pytest.mark.parametrize("hourly", [False, True], ids=["day table", "hour table"])
@pytest.mark.parametrize(
    "config",
    [
        EnrichmentConfig(),
        EnrichmentConfig(key_column="_kafka_key", headers_column="_kafka_headers"),
        EnrichmentConfig(timestamp_column=None, event_date_column="ev_day"),
    ],
    ids=["default", "key and headers", "renamed, no timestamp"],
)
def test_the_enrichment_columns_come_first_exactly_as_the_load_path_makes_them(
    config, hourly
) -> None:
    schema = extended_schema(EVERY_TYPE, config, hourly=hourly)
    descriptor = proto_schema(schema)
    assert_columns_match(bigquery_schema_from_avro(schema), descriptor)
    assert [f.name for f in descriptor.field][: len(config.columns_of(hourly))] == list(
        config.columns_of(hourly)
    )
    by_name = {f.name: f for f in descriptor.field}
    assert by_name[config.event_date_column].type == F.TYPE_INT32  # DATE: days
    if hourly:
        assert by_name[config.event_hour_column].type == F.TYPE_INT64  # TIMESTAMP: micros


def test_the_hourly_schema_of_a_day_tables_file_maps_like_the_extended_one() -> None:
    config = EnrichmentConfig()
    assert proto_schema(
        with_event_hour(extended_schema(EVERY_TYPE, config), config)
    ) == proto_schema(extended_schema(EVERY_TYPE, config, hourly=True))


def test_nested_message_names_never_clash_with_a_field_of_the_same_message() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {
                "name": "a",
                "type": {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]},
            },
            {"name": "AMessage", "type": "string"},
        ],
    }
    descriptor = proto_schema(schema)
    assert {n.name for n in descriptor.nested_type}.isdisjoint(f.name for f in descriptor.field)
    assert parsed(schema, [{"a": {"x": 1}, "AMessage": "s"}]) == [{"a": {"x": 1}, "AMessage": "s"}]


def test_the_writer_schema_is_a_copy_the_caller_may_change() -> None:
    first = proto_schema(EVERY_TYPE)
    first.field[0].name = "changed"
    assert proto_schema(EVERY_TYPE).field[0].name == "flag"
    assert encode_rows(EVERY_TYPE, avro_round_trip(EVERY_TYPE, [ORDER]))  # still encodes


@pytest.mark.parametrize(
    ("avro_type", "problem"),
    [
        (["null", "string", "long"], "union of 2 non-null types"),
        ({"type": "array", "items": {"type": "array", "items": "int"}}, "array of arrays"),
        ({"type": "array", "items": {"type": "map", "values": "int"}}, "array of arrays"),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 80, "scale": 2},
            "decimal(80, 2)",
        ),
        ("no.such.Type", "unknown Avro type"),
    ],
)
def test_a_type_bigquery_cannot_hold_is_refused_naming_the_file_and_field(
    avro_type, problem
) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": avro_type}]}
    with pytest.raises(
        UnsupportedSchemaError, match=rf"orders-0\.avro: field f.*{re.escape(problem)}"
    ):
        proto_schema(schema, source="orders-0.avro")


def test_a_schema_that_is_not_a_record_is_refused() -> None:
    with pytest.raises(UnsupportedSchemaError, match="not a record schema"):
        proto_schema({"type": "array", "items": "int"})


# --- the rows --------------------------------------------------------------------------------
def test_every_type_round_trips_to_the_values_its_column_holds() -> None:
    (row,) = parsed(EVERY_TYPE, avro_round_trip(EVERY_TYPE, [ORDER]))
    assert row == {
        "flag": True,
        "small": -7,
        "big": 2**62,
        "ratio": pytest.approx(1.1, rel=1e-7),
        "amount": -0.25,
        "blob": b"\x00\xff",
        "name": "Ünïcode ✓",
        "maybe_last": 5,
        "color": "GREEN",
        "hash": b"\x01\x02\x03\x04",
        "day": (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days,
        "clock_ms": "23:59:58.123000",
        "clock_us": "00:00:01.000005",
        "at_ms": 1726228800123000,
        "at_us": -1,
        "local_ms": "2024-01-02 03:04:05.006000",
        "local_us": "9999-12-31 23:59:59.999999",
        "id": "12345678-1234-5678-1234-567812345678",
        "price": "-123456789.125",
        "huge": "12345678901234567890123456789.123456789",
        "future": 42,
        "ship_to": {"city": "Paris"},
        "bill_to": {"city": "Lyon", "zip": "69001"},
        "tags": ["a", "", "c"],
        "scores": [1, 2],
        "lines": [
            {"sku": "x", "qty": 2, "attrs": [{"key": "size", "value": "L"}]},
            {"sku": "y", "qty": 0},
        ],
        "counts": [{"key": "a", "value": 1}, {"key": "b"}],
        "where": [{"key": "home", "value": {"city": "Nice"}}],
        "lists": [{"key": "evens", "value": [2, 4]}, {"key": "none"}],
        "nested_maps": [{"key": "outer", "value": [{"key": "inner", "value": 1}]}],
        "empty": {},  # present, all its fields null: a record, not a NULL record
    }


def test_an_avro_float_is_widened_exactly_as_a_load_widens_it() -> None:
    (record,) = avro_round_trip(EVERY_TYPE, [ORDER])
    (row,) = parsed(EVERY_TYPE, [record])
    assert row["ratio"] == record["ratio"]  # the float32 value, not 1.1


def test_a_null_record_is_an_unset_field_and_an_empty_record_a_set_one() -> None:
    cls = message_class(proto_schema(EVERY_TYPE))
    records = avro_round_trip(EVERY_TYPE, [{**ORDER, "bill_to": None, "opt_map": None}])
    message = cls()
    message.ParseFromString(encode_rows(EVERY_TYPE, records)[0])
    assert not message.HasField("bill_to")  # NULL
    assert message.HasField("empty")  # a record whose fields are all NULL
    assert len(message.opt_map) == 0  # a null map: REPEATED has no NULL, it is empty


def test_raw_avro_values_encode_like_the_decoded_logical_values() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
            {"name": "clock", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "price", "type": DEC},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        ],
    }
    raw = {
        "day": 19782,
        "at_ms": 1726228800123,
        "at_us": 1726228800123456,
        "local": 1704164645006,
        "clock": 86_398_123,
        "price": (-123456789125).to_bytes(6, "big", signed=True),
        "id": "12345678-1234-5678-1234-567812345678",
    }
    decoded = avro_round_trip(schema, [raw])
    assert encode_rows(schema, [raw]) == encode_rows(schema, decoded)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("1E+3"), "1000"),
        (Decimal("0.000"), "0.000"),
        (Decimal("-0.5"), "-0.5"),
        (Decimal("999999999.999"), "999999999.999"),
    ],
)
def test_a_decimal_is_written_in_plain_notation(value, text) -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": DEC}]}
    assert parsed(schema, [{"n": value}]) == [{"n": text}]


def test_the_enrichment_of_a_staged_record_round_trips() -> None:
    """The bytes the stage path writes (enrichment prefix, event hour, then the Confluent
    body) decoded by fastavro under the file schema, encoded, parsed back."""
    config = EnrichmentConfig(key_column="_kafka_key", headers_column="_kafka_headers")
    writer = {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "url", "type": "string"}, {"name": "n", "type": ["null", "int"]}],
    }
    schema = extended_schema(writer, config, hourly=True)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(writer), {"url": "/a", "n": None})
    encoder = EnrichmentEncoder(config, "clicks", 3)
    staged = (
        encoder.encode(
            19_979, 1_234_567, 1_726_228_800_123, b"k-1", [("trace", b"t"), ("trace", None)]
        )
        + event_hour_suffix(479_508)
        + body.getvalue()
    )
    record = fastavro.schemaless_reader(io.BytesIO(staged), fastavro.parse_schema(schema))
    (row,) = parsed(schema, [record])
    assert row == {
        "_event_date": 19_979,
        "_kafka_topic": "clicks",
        "_kafka_partition": 3,
        "_kafka_offset": 1_234_567,
        "_kafka_timestamp": 1_726_228_800_123_000,
        "_kafka_key": b"k-1",
        "_kafka_headers": [{"key": "trace", "value": b"t"}, {"key": "trace"}],
        "_event_hour": 479_508 * 3_600 * 1_000_000,
        "url": "/a",
    }


def test_a_staged_record_without_timestamp_or_headers_leaves_them_null_and_empty() -> None:
    config = EnrichmentConfig(headers_column="_kafka_headers")
    writer = {"type": "record", "name": "Click", "fields": [{"name": "url", "type": "string"}]}
    schema = extended_schema(writer, config)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(writer), {"url": "/b"})
    staged = EnrichmentEncoder(config, "clicks", 0).encode(0, 0, -1, None, None) + body.getvalue()
    record = fastavro.schemaless_reader(io.BytesIO(staged), fastavro.parse_schema(schema))
    assert parsed(schema, [record]) == [
        {
            "_event_date": 0,
            "_kafka_topic": "clicks",
            "_kafka_partition": 0,
            "_kafka_offset": 0,
            "url": "/b",
        }
    ]  # proto3-style zero values are still set fields in proto2: check presence
    message = message_class(proto_schema(schema))()
    message.ParseFromString(encode_rows(schema, [record])[0])
    assert message.HasField("_event_date") and message.HasField("_kafka_offset")
    assert not message.HasField("_kafka_timestamp")


def test_a_null_array_item_is_refused_naming_the_record_and_field() -> None:
    records = [{"tags": ["a"], "n": 1}, {"tags": ["a", None], "n": 2}]
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
            {"name": "n", "type": "int"},
        ],
    }
    with pytest.raises(RowEncodeError, match=r"orders-0\.avro: record 1: field tags .*NULL") as err:
        encode_rows(schema, records, source="orders-0.avro")
    assert err.value.index == 1


def test_a_value_of_the_wrong_type_is_refused_naming_the_record() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    with pytest.raises(RowEncodeError, match="record 0"):
        encode_rows(schema, [{"n": "not a number"}])


def test_proto_rows_carry_the_writer_schema_and_the_rows_in_order() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    payload = proto_rows(schema, [{"n": i} for i in range(3)])
    assert isinstance(payload, ProtoRows)
    assert payload.descriptor == proto_schema(schema)
    assert payload.rows == tuple(encode_rows(schema, [{"n": i} for i in range(3)]))
    assert payload.size == sum(len(r) for r in payload.rows)


# --- batches ---------------------------------------------------------------------------------
def request_rows_size(rows: list[bytes]) -> int:
    """Bytes of the rows inside an AppendRows request (the API's ProtoRows message)."""
    from google.cloud.bigquery_storage_v1 import types

    return types.ProtoRows.pb(types.ProtoRows(serialized_rows=rows)).ByteSize()


def test_batches_keep_the_order_and_stay_within_the_limit_with_their_framing() -> None:
    rows = [bytes([i % 251]) * (i * 37 % 5000 + 1) for i in range(600)]
    cut = list(batches(rows, max_bytes=20_000))
    assert [r for batch in cut for r in batch] == rows
    assert all(request_rows_size(batch) <= 20_000 for batch in cut)
    # full: the next row would not have fit
    assert all(request_rows_size(batch + [nxt[0]]) > 20_000 for batch, nxt in zip(cut, cut[1:]))


def test_a_row_over_the_limit_comes_alone_and_nothing_is_lost() -> None:
    rows = [b"a" * 10, b"b" * 500, b"c" * 10]
    assert list(batches(rows, max_bytes=100)) == [[rows[0]], [rows[1]], [rows[2]]]


def test_no_rows_no_batches_and_the_default_leaves_room_under_ten_megabytes() -> None:
    assert list(batches([])) == []
    assert MAX_REQUEST_BYTES <= 10_000_000 - 1_000_000


def test_files_of_one_schema_share_one_compiled_schema_whatever_their_names() -> None:
    from kbqe_dagster.core.formats import avro_proto

    schema = {"type": "record", "name": "Shared", "fields": [{"name": "n", "type": "long"}]}
    encode_rows(schema, [{"n": 1}], source="a.avro")
    before = len(avro_proto._cache)
    encode_rows(schema, [{"n": 2}], source="b.avro")
    proto_schema(schema, source="c.avro")
    assert len(avro_proto._cache) == before
