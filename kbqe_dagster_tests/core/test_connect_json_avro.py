"""Kafka Connect JsonConverter messages (schema embedded) become the Avro schema and body that
Confluent's AvroConverter (AvroData.fromConnectSchema / fromConnectData) would have written for
the same Connect record: core/formats/connect_json_avro.py."""

from __future__ import annotations

import base64
import json
from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kbqe_dagster.core.errors import (
    JsonDecodeError,
    JsonSchemaMismatchError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.formats.connect_json_avro import (
    ConnectJsonReader,
    connect_avro,
    connect_envelope,
    connect_key_fields,
    is_json_value,
    plain_writer_schema,
    schema_id,
)
from kbqe_dagster.core.formats.source_format import DECLARED_SCHEMA_IDS
from kbqe_dagster.demo.debezium import ROW_V1, ROW_V2, envelope_schema, key_schema
from kbqe_dagster.demo.debezium_changes import Change, value_record
from kbqe_dagster.demo.debezium_json import (
    connect_key_schema,
    connect_value_schema,
    envelope,
    json_key,
    json_value,
)
from kbqe_dagster_tests.support.connect_json import canonical

NS = "dbserver1.inventory.customers"


def field(field_name: str, kind: str, optional: bool = False, **extra: Any) -> dict:
    return {"type": kind, "optional": optional, **extra, "field": field_name}


def struct(fields: list[dict], name: str | None = "test.Row", **extra: Any) -> dict:
    return {"type": "struct", "fields": fields, "optional": False,
            **({"name": name} if name else {}), **extra}  # fmt: skip


def field_type(connect_field: dict) -> Any:
    """The Avro type of one field of a struct holding only ``connect_field``."""
    [avro_field] = connect_avro(struct([connect_field])).avro["fields"]
    return avro_field


def encode(avro: Any, datum: Any) -> bytes:
    out = BytesIO()
    schemaless_writer(out, parse_schema(plain_writer_schema(avro)), datum)
    return out.getvalue()


def roundtrip(connect_field: dict, payload_value: Any) -> Any:
    """The value of ``connect_field`` as Avro decodes it after the JSON payload was converted."""
    converted = connect_avro(struct([connect_field]))
    body = encode(converted.avro, converted.datum({connect_field["field"]: payload_value}))
    record = schemaless_reader(BytesIO(body), parse_schema(plain_writer_schema(converted.avro)))
    return record[connect_field["field"]]


# --- types -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("connect_field", "avro_type", "payload", "decoded"),
    [
        (field("a", "int8"), {"type": "int", "connect.type": "int8"}, -128, -128),
        (field("a", "int16"), {"type": "int", "connect.type": "int16"}, 32767, 32767),
        (field("a", "int32"), "int", -(2**31), -(2**31)),
        (field("a", "int64"), "long", 2**63 - 1, 2**63 - 1),
        (field("a", "float"), "float", 1.5, 1.5),
        (field("a", "double"), "double", 0.1, 0.1),
        (field("a", "double"), "double", 3, 3.0),
        (field("a", "boolean"), "boolean", True, True),
        (field("a", "string"), "string", "héllo", "héllo"),
        (field("a", "bytes"), "bytes", base64.b64encode(b"\x00\xff").decode(), b"\x00\xff"),
    ],
)
def test_each_connect_type_becomes_avro_data_s_type_and_its_payload_its_value(
    connect_field, avro_type, payload, decoded
) -> None:
    assert field_type(connect_field) == {"name": "a", "type": avro_type}
    assert roundtrip(connect_field, payload) == decoded


@pytest.mark.parametrize(
    ("connect_field", "avro_type"),
    [
        (
            field("price", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
                  parameters={"scale": "2", "connect.decimal.precision": "10"}),
            {"type": "bytes", "scale": 2, "precision": 10, "logicalType": "decimal",
             "connect.version": 1,
             "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
             "connect.name": "org.apache.kafka.connect.data.Decimal"},
        ),
        (  # no precision parameter: AvroData's default precision, 64
            field("price", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
                  parameters={"scale": "3"}),
            {"type": "bytes", "scale": 3, "precision": 64, "logicalType": "decimal",
             "connect.version": 1, "connect.parameters": {"scale": "3"},
             "connect.name": "org.apache.kafka.connect.data.Decimal"},
        ),
        (
            field("d", "int32", name="org.apache.kafka.connect.data.Date", version=1),
            {"type": "int", "logicalType": "date", "connect.version": 1,
             "connect.name": "org.apache.kafka.connect.data.Date"},
        ),
        (
            field("t", "int32", name="org.apache.kafka.connect.data.Time", version=1),
            {"type": "int", "logicalType": "time-millis", "connect.version": 1,
             "connect.name": "org.apache.kafka.connect.data.Time"},
        ),
        (
            field("ts", "int64", name="org.apache.kafka.connect.data.Timestamp", version=1),
            {"type": "long", "logicalType": "timestamp-millis", "connect.version": 1,
             "connect.name": "org.apache.kafka.connect.data.Timestamp"},
        ),
    ],
)  # fmt: skip
def test_connect_logical_types_become_avro_logical_types(connect_field, avro_type) -> None:
    assert field_type(connect_field)["type"] == avro_type


@pytest.mark.parametrize(
    ("name", "kind", "version", "params", "payload", "decoded"),
    [
        ("io.debezium.time.Date", "int32", 1, None, 19_700, 19_700),
        ("io.debezium.time.Time", "int32", 1, None, 3_600_000, 3_600_000),
        ("io.debezium.time.MicroTime", "int64", 1, None, 3_600_000_001, 3_600_000_001),
        ("io.debezium.time.Timestamp", "int64", 1, None, 1_700_000_000_123, 1_700_000_000_123),
        ("io.debezium.time.MicroTimestamp", "int64", 1, None, 1_700_000_000_123_456,
         1_700_000_000_123_456),
        ("io.debezium.time.NanoTimestamp", "int64", 1, None, 1_700_000_000_123_456_789,
         1_700_000_000_123_456_789),
        ("io.debezium.time.ZonedTimestamp", "string", 1, None, "2024-11-19T10:00:00.5Z",
         "2024-11-19T10:00:00.5Z"),
        ("io.debezium.time.ZonedTime", "string", 1, None, "10:00:00Z", "10:00:00Z"),
        ("io.debezium.time.Interval", "string", 1, None, "P1Y2M", "P1Y2M"),
        ("io.debezium.data.Json", "string", 1, None, '{"a": 1}', '{"a": 1}'),
        ("io.debezium.data.Uuid", "string", 1, None, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
         "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        ("io.debezium.data.Enum", "string", 1, {"allowed": "a,b"}, "b", "b"),
        ("io.debezium.data.Bits", "bytes", 1, {"length": "3"}, "BQ==", b"\x05"),
    ],
)  # fmt: skip
def test_debezium_semantic_types_keep_their_plain_type_and_their_connect_name(
    name, kind, version, params, payload, decoded
) -> None:
    extra = {"name": name, "version": version, **({"parameters": params} if params else {})}
    avro = field_type(field("v", kind, **extra))["type"]
    plain = {"int32": "int", "int64": "long", "string": "string", "bytes": "bytes"}[kind]
    expected = {"type": plain, "connect.version": version, "connect.name": name}
    if params:
        expected["connect.parameters"] = params
    assert avro == expected
    assert roundtrip(field("v", kind, **extra), payload) == decoded


def test_a_variable_scale_decimal_is_its_named_record_of_scale_and_unscaled_bytes() -> None:
    vsd = field(
        "amount",
        "struct",
        optional=True,
        name="io.debezium.data.VariableScaleDecimal",
        version=1,
        doc="Variable scaled decimal",
        fields=[field("scale", "int32"), field("value", "bytes")],
    )
    avro = field_type(vsd)
    assert avro == {
        "name": "amount",
        "type": [
            "null",
            {
                "type": "record",
                "name": "VariableScaleDecimal",
                "namespace": "io.debezium.data",
                "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                "connect.doc": "Variable scaled decimal",
                "connect.version": 1,
                "connect.name": "io.debezium.data.VariableScaleDecimal",
            },
        ],
        "default": None,
    }
    value = {"scale": 2, "value": base64.b64encode(b"\x30\x39").decode()}  # 123.45
    assert roundtrip(vsd, value) == {"scale": 2, "value": b"\x30\x39"}
    assert roundtrip(vsd, None) is None


# --- decimals in the payload -----------------------------------------------------------------------
DECIMAL = field("price", "bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
                parameters={"scale": "2", "connect.decimal.precision": "10"})  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "unscaled"),
    [
        (base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode(), 12345),  # BASE64
        ("/88=", -49),  # BASE64 0xffcf: two's complement, written shortest (0xcf) as Avro's
        (123.45, 12345),  # decimal.format=NUMERIC
        (-0.49, -49),
        (7, 700),
        (128, 12800),  # 0x3200: the shortest two's complement, as BigInteger.toByteArray
    ],
)
def test_a_decimal_payload_is_its_unscaled_twos_complement_bytes(payload, unscaled) -> None:
    converted = connect_avro(struct([DECIMAL]))
    text = envelope(converted.connect, {"price": payload})
    _, parsed = connect_envelope(text)
    raw = roundtrip(DECIMAL, parsed["price"])
    assert int.from_bytes(raw, "big", signed=True) == unscaled
    assert raw == unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)


def test_a_numeric_decimal_with_more_digits_than_its_scale_is_a_mismatch() -> None:
    converted = connect_avro(struct([DECIMAL]))
    _, parsed = connect_envelope(envelope(converted.connect, {"price": 1.234}))
    with pytest.raises(
        JsonSchemaMismatchError, match=r"payload\.price: expected a decimal of scale 2"
    ):
        converted.datum(parsed)


# --- optional, defaults --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("connect_field", "avro_field", "null_reads"),
    [
        (field("a", "string", optional=True), {"name": "a", "type": ["null", "string"],
                                               "default": None}, None),
        (  # optional with a default: the default's branch first, Avro's rule for defaults
            field("a", "int32", optional=True, default=5),
            {"name": "a", "type": [{"type": "int", "connect.default": 5}, "null"], "default": 5},
            5,
        ),
        (  # required with a default: a null payload takes it (replace.null.with.default)
            field("a", "string", default="x"),
            {"name": "a", "type": {"type": "string", "connect.default": "x"}, "default": "x"},
            "x",
        ),
        (  # a bytes default is ISO-8859-1 text in Avro, base64 in the Connect schema
            field("a", "bytes", default=base64.b64encode(b"\xff\x01").decode()),
            {"name": "a", "type": {"type": "bytes", "connect.default": "\xff\x01"},
             "default": "\xff\x01"},
            b"\xff\x01",
        ),
    ],
)  # fmt: skip
def test_optional_fields_are_null_unions_and_defaults_are_avro_data_s(
    connect_field, avro_field, null_reads
) -> None:
    assert field_type(connect_field) == avro_field
    assert roundtrip(connect_field, None) == null_reads


def test_a_null_for_a_required_field_without_default_is_a_mismatch_naming_the_field() -> None:
    converted = connect_avro(struct([field("id", "int32"), field("name", "string")]))
    with pytest.raises(
        JsonSchemaMismatchError, match=r"payload\.name: expected a string, got None"
    ):
        converted.datum({"id": 1})


@pytest.mark.parametrize(
    ("connect_field", "payload", "path"),
    [
        (field("a", "int32"), 2**31, "payload.a: expected an int32"),
        (field("a", "int8"), 128, "payload.a: expected an int8"),
        (field("a", "int64"), "1", "payload.a: expected an int64"),
        (field("a", "int32"), True, "payload.a: expected an int32"),
        (field("a", "boolean"), 1, "payload.a: expected a boolean"),
        (field("a", "bytes"), "not base64!", "payload.a: expected base64 text"),
        (field("a", "array", items={"type": "int32", "optional": False}), [1, "x"],
         r"payload.a\[1\]: expected an int32"),
    ],
)  # fmt: skip
def test_a_payload_that_does_not_fit_is_a_mismatch_naming_the_path(connect_field, payload, path):
    converted = connect_avro(struct([connect_field]))
    with pytest.raises(JsonSchemaMismatchError, match=path.replace(".", r"\.")):
        converted.datum({"a": payload})


def test_quoted_non_finite_floats_are_those_floats() -> None:
    import math

    assert math.isnan(roundtrip(field("a", "double"), "NaN"))
    assert roundtrip(field("a", "float"), "-Infinity") == -math.inf


# --- containers, names -----------------------------------------------------------------------
def test_arrays_and_string_keyed_maps_are_avro_arrays_and_maps() -> None:
    tags = field("tags", "array", items={"type": "string", "optional": True})
    attrs = field("attrs", "map", optional=True, keys={"type": "string", "optional": False},
                  values={"type": "int64", "optional": False})  # fmt: skip
    converted = connect_avro(struct([tags, attrs]))
    assert converted.avro["fields"] == [
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "attrs", "type": ["null", {"type": "map", "values": "long"}], "default": None},
    ]
    assert roundtrip(tags, ["a", None]) == ["a", None]
    assert roundtrip(attrs, {"x": 1}) == {"x": 1}


def test_a_map_with_other_keys_is_an_array_of_map_entry_records() -> None:
    counts = field("counts", "map", keys={"type": "int32", "optional": False},
                   values={"type": "string", "optional": True})  # fmt: skip
    assert field_type(counts)["type"] == {
        "type": "array",
        "items": {
            "type": "record",
            "name": "MapEntry",
            "namespace": "io.confluent.connect.avro",
            "fields": [
                {"name": "key", "type": "int"},
                {"name": "value", "type": ["null", "string"], "default": None},
            ],
        },
    }
    # JsonConverter writes such a map as [[key, value], ...].
    assert roundtrip(counts, [[1, "one"], [2, None]]) == [
        {"key": 1, "value": "one"},
        {"key": 2, "value": None},
    ]


def test_unnamed_structs_are_connect_default_numbered_in_the_order_met() -> None:
    inner = {"type": "struct", "fields": [field("x", "int32")], "optional": False}
    converted = connect_avro(struct([{**inner, "field": "a"},
                                     {**inner, "fields": [field("y", "int32")], "field": "b"}],
                                    name=None))  # fmt: skip
    avro = converted.avro
    assert (avro["namespace"], avro["name"]) == ("io.confluent.connect.avro", "ConnectDefault")
    assert [f["type"]["name"] for f in avro["fields"]] == ["ConnectDefault2", "ConnectDefault3"]


def test_a_schema_met_again_is_a_reference_to_the_first_definition() -> None:
    converted = connect_avro(connect_value_schema(NS, 1))
    before, after = converted.avro["fields"][:2]
    assert before["type"][1]["name"] == "Value"
    assert after == {"name": "after", "type": ["null", f"{NS}.Value"], "default": None}


def test_two_different_schemas_of_one_name_have_no_avro_form() -> None:
    a = {"type": "struct", "fields": [field("x", "int32")], "optional": False, "name": "n.S"}
    b = {**a, "fields": [field("y", "int32")]}
    with pytest.raises(UnsupportedSchemaError, match="both named 'n.S'"):
        connect_avro(struct([{**a, "field": "a"}, {**b, "field": "b"}]))


def test_record_and_field_docs_and_avro_parameters_are_kept() -> None:
    row = struct(
        [field("a", "string", doc="the a", parameters={"avro.java.string": "String"})],
        parameters={"io.confluent.connect.avro.record.doc": "rows",
                    "io.confluent.connect.avro.field.doc.a": "field a"},
    )  # fmt: skip
    avro = connect_avro(row).avro
    assert avro["doc"] == "rows"
    assert avro["fields"] == [
        {
            "name": "a",
            "doc": "field a",
            "type": {"type": "string", "connect.doc": "the a",
                     "connect.parameters": {"avro.java.string": "String"},
                     "avro.java.string": "String"},
        }
    ]  # fmt: skip


# --- Debezium's envelope and key, against the Avro converter's --------------------------------------
@pytest.mark.parametrize(("version", "rows", "precise"), [(1, ROW_V1, False), (2, ROW_V2, True)])
def test_debezium_s_envelope_becomes_the_avro_converter_s_envelope(version, rows, precise) -> None:
    converted = connect_avro(connect_value_schema(NS, version, precise))
    assert canonical(converted.avro) == canonical(envelope_schema(NS, rows, precise))


def test_debezium_s_key_becomes_the_avro_converter_s_key() -> None:
    assert canonical(connect_avro(connect_key_schema(NS)).avro) == canonical(key_schema(NS))


@pytest.mark.parametrize("op", ["r", "c", "u", "d"])
def test_a_change_event_encodes_to_the_avro_converter_s_bytes(op) -> None:
    row = {"id": 7, "first_name": "Anne", "last_name": "Kretchmar", "email": "a@x", "phone": None}
    change = Change(7, op, before=row if op in "ud" else None, after=None if op == "d" else row,
                    ts_ms=1_732_000_000_123, schema_version=2)  # fmt: skip
    avro_envelope = envelope_schema(NS, ROW_V2)
    record = {k: v for k, v in value_record(change, NS).items() if k not in ("ts_us", "ts_ns")}
    expected = BytesIO()
    schemaless_writer(expected, parse_schema(avro_envelope), record)

    schema, payload = connect_envelope(json_value(change, NS))
    converted = connect_avro(schema)
    assert encode(converted.avro, converted.datum(payload)) == expected.getvalue()


# --- messages ------------------------------------------------------------------------------------
def test_a_json_value_without_an_embedded_schema_is_refused_with_the_setting_to_change() -> None:
    with pytest.raises(UnsupportedSchemaError, match=r"value\.converter\.schemas\.enable=true"):
        connect_envelope(b'{"before": null, "after": {"id": 1}, "op": "c"}')


@pytest.mark.parametrize("value", [b"{not json", b'["schema", "payload"]', b"\xff{"])
def test_a_value_that_is_not_one_json_object_is_a_json_decode_error(value) -> None:
    with pytest.raises(JsonDecodeError):
        connect_envelope(value)


@pytest.mark.parametrize(
    ("value", "is_json"),
    [(b'{"schema":{}}', True), (b' \n\t{"a":1}', True), (b"\x00\x00\x00\x00\x01\x02", False),
     (b"[1]", False), (b"", False)],
)  # fmt: skip
def test_json_values_are_told_from_confluent_frames_by_their_first_byte(value, is_json) -> None:
    assert is_json_value(value) is is_json


def test_the_key_fields_come_from_a_json_key_s_struct_schema() -> None:
    change = Change(1001, "c")
    assert connect_key_fields(json_key(change, NS)) == ("id",)
    assert connect_key_fields(b"\x00\x00\x00\x00\x01\x02") is None
    assert connect_key_fields(b'{"id": 1001}') is None  # schemas.enable=false: no schema
    assert connect_key_fields(None) is None


def test_each_distinct_schema_is_converted_once_whatever_its_layout() -> None:
    made = []
    reader = ConnectJsonReader(lambda converted: made.append(converted) or converted)
    compact = json_value(Change(1, "c", after={"id": 1, "first_name": "a", "last_name": "b",
                                               "email": "c"}), NS)  # fmt: skip
    spaced = json.dumps(json.loads(compact), indent=2).encode()
    for value in (compact, compact, spaced, compact.replace(b'"id":1,', b'"id":2,')):
        converted, payload = reader.read(value)
        assert payload["after"]["id"] in (1, 2)
    assert len(made) == 1
    v2 = json_value(Change(1, "c", after={"id": 1, "first_name": "a", "last_name": "b",
                                          "email": "c", "phone": None}, schema_version=2), NS)  # fmt: skip
    converted_v2, _ = reader.read(v2)
    assert len(made) == 2 and converted_v2.schema_id != made[0].schema_id


def test_a_schema_s_verdict_is_kept_for_every_message_of_it() -> None:
    calls = []

    def refuse(converted):
        calls.append(converted)
        raise UnsupportedSchemaError("not a change layout")

    reader = ConnectJsonReader(refuse)
    value = envelope(struct([field("a", "int32")]), {"a": 1})
    for _ in range(3):
        with pytest.raises(UnsupportedSchemaError, match="not a change layout"):
            reader.read(value)
    assert len(calls) == 1


def test_schema_ids_are_stable_declared_ids_that_change_with_the_schema() -> None:
    v1, v2 = connect_value_schema(NS, 1), connect_value_schema(NS, 2)
    assert schema_id(v1) == connect_avro(v1).schema_id >= DECLARED_SCHEMA_IDS
    assert schema_id(v1) != schema_id(v2)
    # The same on every machine and run: a pinned value (zlib.crc32 of the canonical JSON).
    assert schema_id(connect_key_schema(NS)) == schema_id(
        json.loads(json.dumps(connect_key_schema(NS)))
    )
    assert schema_id({"type": "int32", "optional": False}) == 1_611_142_599


def test_a_known_schema_with_an_unusual_payload_layout_is_still_read_whole() -> None:
    reader = ConnectJsonReader(lambda converted: converted)
    schema = struct([field("a", "int32")])
    reader.read(envelope(schema, {"a": 1}))
    prefix = envelope(schema, {"a": 1}).split(b',"payload":')[0]
    _, payload = reader.read(prefix + b',"payload": {"a": 2} }')
    assert payload == {"a": 2}
    with pytest.raises(JsonDecodeError):
        reader.read(prefix + b',"payload":{"a": 3}} trailing')


def test_a_null_embedded_schema_is_refused_as_schemaless() -> None:
    with pytest.raises(UnsupportedSchemaError, match="embedded schema is null"):
        connect_envelope(b'{"schema":null,"payload":{"a":1}}')
