"""``format: protobuf``: the Confluent message indexes, and the Avro record each Protobuf
construct maps to, with the values its parsed messages convert to (descriptors compiled from
``.proto`` text by the bundled protoc, as the stage path does)."""

from __future__ import annotations

from datetime import UTC, datetime
from io import BytesIO

import fastavro
import pytest
from google.protobuf import descriptor_pool, message_factory

from kbqe_dagster.core.errors import ProtobufDecodeError, UnmappableProtobufSchemaError
from kbqe_dagster.core.formats.protobuf_avro import map_protobuf_message, message_at
from kbqe_dagster.core.formats.protobuf_wire import encode_message_indexes, read_message_indexes
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files

ORDER = """
syntax = "proto3";
package acme.orders;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "acme/common.proto";

message Order {
  int64 id = 1;
  google.protobuf.Timestamp placed_at = 2;
  optional string note = 3;
  repeated Line lines = 4;
  map<int32, string> tags = 5;
  acme.common.Money total = 6;
  google.protobuf.StringValue coupon = 7;
  Status status = 8;
  uint64 big = 9;
  oneof pay { string card = 10; Line gift = 11; }
  map<bool, Line> flags = 12;
  int32 small = 13; sint32 zig = 14; sfixed32 fix = 15; uint32 u32 = 16; fixed32 f32 = 17;
  sint64 zig64 = 18; sfixed64 fix64 = 19; fixed64 f64 = 20;
  float ratio = 21; double price = 22; bool gift_wrap = 23; bytes blob = 24;
  repeated string labels = 25;
  google.protobuf.Int64Value count = 26; google.protobuf.UInt64Value ucount = 27;
  google.protobuf.BoolValue paid = 28; google.protobuf.BytesValue raw = 29;
  Line main_line = 30;

  enum Status { NEW = 0; PAID = 1; }
  message Line { string sku = 1; uint32 qty = 2; }
}
message Refund { int64 order_id = 1; message Reason { string text = 1; } }
"""
COMMON = 'syntax = "proto3"; package acme.common; message Money { string currency = 1; int64 units = 2; }'


def compiled(text: str, **files: str):
    fds = compile_files(
        {ROOT_FILE: text, **{k.replace("__", "/") + ".proto": v for k, v in files.items()}}
    )
    pool = descriptor_pool.DescriptorPool()
    for proto in fds.file:
        pool.Add(proto)
    return pool.FindFileByName(ROOT_FILE)


FILE = compiled(ORDER, acme__common=COMMON)
ORDER_TYPE = FILE.message_types_by_name["Order"]
Order = message_factory.GetMessageClass(ORDER_TYPE)
MAPPING = map_protobuf_message(ORDER_TYPE)
FIELDS = {f["name"]: f["type"] for f in MAPPING.avro_schema["fields"]}


def roundtrip(message) -> dict:
    """Serialise, parse, convert, and check that fastavro writes and reads it back."""
    record = MAPPING.convert(Order.FromString(message.SerializeToString()))
    out = BytesIO()
    parsed = fastavro.parse_schema(MAPPING.avro_schema)
    fastavro.schemaless_writer(out, parsed, record)
    out.seek(0)
    assert fastavro.schemaless_reader(out, parsed, None) == record
    return record


# --- message indexes -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("encoded", "indexes"),
    [
        (b"\x00", (0,)),
        (b"\x02\x00", (0,)),
        (b"\x02\x02", (1,)),
        (b"\x04\x02\x04", (1, 2)),
        (b"\x02\x80\x01", (64,)),
    ],
)
def test_message_indexes_are_zigzag_varints_and_a_zero_count_is_the_first_message(
    encoded: bytes,
    indexes: tuple[int, ...],
) -> None:
    assert read_message_indexes(b"\x00\x00\x00\x00\x07" + encoded + b"\x08\x01", 5) == (
        indexes,
        5 + len(encoded),
    )


@pytest.mark.parametrize("indexes", [(0,), (1,), (1, 2), (64, 0, 300)])
def test_encoded_message_indexes_read_back(indexes: tuple[int, ...]) -> None:
    encoded = encode_message_indexes(indexes)
    assert read_message_indexes(encoded) == (indexes, len(encoded))
    if indexes == (0,):
        assert encoded == b"\x00"  # what Confluent's serializers write for the first message


@pytest.mark.parametrize(
    ("encoded", "why"),
    [
        (b"", "ends inside a varint"),
        (b"\x80", "ends inside a varint"),
        (b"\x01", "negative count"),
        (b"\x02\x01", "negative index"),
        (b"\x08\x02", "a count of 4 with 1 byte"),
        (b"\xff" * 11, "longer than 10 bytes"),
    ],
)
def test_malformed_message_indexes_are_protobuf_decode_errors(encoded: bytes, why: str) -> None:
    with pytest.raises(ProtobufDecodeError, match=why) as caught:
        read_message_indexes(encoded)
    assert caught.value.reason == "protobuf_decode_error"


def test_message_indexes_pick_top_level_then_nested_messages() -> None:
    assert message_at(FILE, (0,)).full_name == "acme.orders.Order"
    assert message_at(FILE, (1,)).full_name == "acme.orders.Refund"
    # Nested messages in descriptor order, map entries included (a map field declares one
    # where it stands), as Confluent's serializers count them.
    assert message_at(FILE, (0, 0)).full_name == "acme.orders.Order.TagsEntry"
    assert message_at(FILE, (0, 2)).full_name == "acme.orders.Order.Line"
    assert message_at(FILE, (1, 0)).full_name == "acme.orders.Refund.Reason"
    with pytest.raises(ProtobufDecodeError, match=r"name no message .* \(level 0 has 2\)"):
        message_at(FILE, (2,))
    with pytest.raises(ProtobufDecodeError, match=r"level 2 has 0"):
        message_at(FILE, (0, 2, 0))


# --- the schema ------------------------------------------------------------------------------
def test_a_message_is_a_record_named_by_its_full_name_fields_in_declaration_order() -> None:
    assert MAPPING.avro_schema["name"] == "acme.orders.Order"
    assert list(FIELDS)[:5] == ["id", "placed_at", "note", "lines", "tags"]
    assert list(FIELDS)[-1] == "main_line"  # declared last (number 30), whatever the numbers


@pytest.mark.parametrize(
    ("field", "avro"),
    [
        ("small", "int"),
        ("zig", "int"),
        ("fix", "int"),
        ("id", "long"),
        ("zig64", "long"),
        ("fix64", "long"),
        ("u32", "long"),
        ("f32", "long"),
        ("big", "long"),
        ("f64", "long"),
        ("ratio", "float"),
        ("price", "double"),
        ("gift_wrap", "boolean"),
        ("blob", "bytes"),
        ("labels", {"type": "array", "items": "string"}),
    ],
)
def test_scalars_map_to_the_avro_type_that_holds_every_value(field: str, avro) -> None:
    assert FIELDS[field] == avro


def test_fields_with_presence_are_nullable_and_plain_scalars_are_not() -> None:
    nullable = {name for name, t in FIELDS.items() if isinstance(t, list)}
    assert nullable == {
        "placed_at",
        "note",
        "total",
        "coupon",
        "card",
        "gift",
        "count",
        "ucount",
        "paid",
        "raw",
        "main_line",
    }
    assert all(t[0] == "null" for t in FIELDS.values() if isinstance(t, list))
    defaults = {f["name"]: f.get("default", "none") for f in MAPPING.avro_schema["fields"]}
    assert defaults["note"] is None and defaults["id"] == "none"


def test_well_known_types_timestamps_and_wrappers() -> None:
    assert FIELDS["placed_at"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert FIELDS["coupon"] == ["null", "string"]
    assert (FIELDS["count"], FIELDS["ucount"]) == (["null", "long"], ["null", "long"])
    assert (FIELDS["paid"], FIELDS["raw"]) == (["null", "boolean"], ["null", "bytes"])


def test_nested_imported_and_enum_types_are_named_types_defined_once() -> None:
    line = FIELDS["lines"]["items"]
    assert line["name"] == "acme.orders.Order.Line"
    assert [f["name"] for f in line["fields"]] == ["sku", "qty"]
    assert FIELDS["gift"] == ["null", "acme.orders.Order.Line"]  # referenced, not redefined
    assert FIELDS["main_line"] == ["null", "acme.orders.Order.Line"]
    assert FIELDS["total"][1]["name"] == "acme.common.Money"
    assert FIELDS["status"] == {
        "type": "enum",
        "name": "acme.orders.Order.Status",
        "symbols": ["NEW", "PAID"],
    }
    assert FIELDS["tags"] == {"type": "map", "values": "string"}
    assert FIELDS["flags"] == {"type": "map", "values": "acme.orders.Order.Line"}
    fastavro.parse_schema(MAPPING.avro_schema)  # a valid Avro schema, names resolved


@pytest.mark.parametrize(
    ("text", "construct"),
    [
        (
            "message Node { string v = 1; Node next = 2; }",
            r"recursive message \(Node → Node\) .* at Node.next",
        ),
        (
            "message A { B b = 1; } message B { repeated A a = 1; }",
            r"recursive message \(A → B → A\)",
        ),
        (
            'import "google/protobuf/struct.proto"; message S { google.protobuf.Struct s = 1; }',
            r"recursive message \(google.protobuf.Struct → google.protobuf.Value → google.protobuf.Struct\)",
        ),
        (
            'import "google/protobuf/empty.proto"; message E { google.protobuf.Empty e = 1; }',
            r"message google.protobuf.Empty has no fields .* at E.e",
        ),
        ("message Nothing {}", "message Nothing has no fields"),
    ],
)
def test_messages_without_a_fixed_column_layout_are_refused_naming_the_construct(
    text: str,
    construct: str,
) -> None:
    root = compiled('syntax = "proto3"; ' + text).message_types_by_name
    with pytest.raises(UnmappableProtobufSchemaError, match=construct) as caught:
        map_protobuf_message(next(iter(root.values())))
    assert caught.value.reason == "unmappable_protobuf_schema"


# --- values ----------------------------------------------------------------------------------
def test_unset_proto3_scalars_are_their_defaults_and_fields_with_presence_are_null() -> None:
    record = roundtrip(Order())
    assert (record["id"], record["big"], record["ratio"], record["gift_wrap"]) == (0, 0, 0.0, False)
    assert (record["blob"], record["status"], record["lines"], record["tags"]) == (
        b"",
        "NEW",
        [],
        {},
    )
    for name in ("placed_at", "note", "total", "coupon", "card", "gift", "count", "main_line"):
        assert record[name] is None, name


def test_set_values_convert_field_by_field() -> None:
    order = Order(
        id=7,
        note="",
        big=2**63 - 1,
        u32=2**32 - 1,
        small=-5,
        zig=-6,
        ratio=0.5,
        labels=["a", "b"],
        card="visa",
        status=Order.PAID,
        blob=b"\x00\xff",
    )
    order.placed_at.seconds, order.placed_at.nanos = 1_726_238_205, 123_456_789
    order.lines.add(sku="s1", qty=2)
    order.tags[3] = "three"
    order.flags[True].sku = "flag"
    order.total.currency, order.total.units = "EUR", 12
    order.coupon.value = ""  # a set wrapper holding its default is not null
    order.ucount.value = 9
    record = roundtrip(order)
    assert record["placed_at"] == datetime(2024, 9, 13, 14, 36, 45, 123_456, tzinfo=UTC)
    assert record["note"] == "" and record["coupon"] == "" and record["ucount"] == 9
    assert (record["big"], record["u32"], record["small"], record["zig"]) == (
        2**63 - 1,
        2**32 - 1,
        -5,
        -6,
    )
    assert record["lines"] == [{"sku": "s1", "qty": 2}] and record["labels"] == ["a", "b"]
    assert record["tags"] == {"3": "three"} and record["flags"] == {
        "true": {"sku": "flag", "qty": 0}
    }
    assert record["total"] == {"currency": "EUR", "units": 12} and record["status"] == "PAID"
    assert (record["card"], record["gift"]) == ("visa", None)  # one oneof member set


def test_a_uint64_above_the_avro_long_range_is_a_decode_error_naming_the_field() -> None:
    with pytest.raises(
        ProtobufDecodeError, match=r"acme.orders.Order.big: 9223372036854775808 is above"
    ):
        roundtrip(Order(big=2**63))
    wrapped = Order()
    wrapped.ucount.value = 2**64 - 1
    with pytest.raises(ProtobufDecodeError, match=r"Order.ucount: .* above 2\^63-1"):
        roundtrip(wrapped)


def test_an_enum_number_the_schema_does_not_declare_is_a_decode_error() -> None:
    with pytest.raises(
        ProtobufDecodeError, match="enum acme.orders.Order.Status has no value numbered 7"
    ):
        roundtrip(Order(status=7))  # proto3 enums are open: the runtime keeps the number


def test_a_timestamp_outside_years_1_to_9999_is_a_decode_error() -> None:
    order = Order()
    order.placed_at.seconds = 400_000_000_000
    with pytest.raises(ProtobufDecodeError, match=r"Order.placed_at: Timestamp 400000000000s"):
        roundtrip(order)


def test_proto2_optional_fields_are_nullable_and_required_ones_are_not() -> None:
    root = compiled(
        'syntax = "proto2"; message P { required int32 a = 1; optional string b = 2 [default = "x"]; }'
    )
    mapping = map_protobuf_message(root.message_types_by_name["P"])
    assert [f["type"] for f in mapping.avro_schema["fields"]] == ["int", ["null", "string"]]
    cls = message_factory.GetMessageClass(root.message_types_by_name["P"])
    assert mapping.convert(cls.FromString(cls(a=1).SerializeToString())) == {"a": 1, "b": None}
