"""Per-record transforms: for each kind, the output schema derived from the input schema, the
value it gives, and the ``transform_failed`` reason naming the transform and the field when a
record or a schema does not fit."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import fastavro
import pytest

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.errors import ConfigError, TransformFailedError, TransformSchemaError
from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.transforms.compiler import MessageMeta, compile_transforms, hmac_keys
from kbqe_dagster.core.transforms.specs import read_transforms

SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "email", "type": "string"},
        {"name": "phone", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "paid", "type": "boolean"},
        {"name": "created_ms", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "local", "type": "string"},
    ],
}
AT = datetime(2024, 9, 13, 12, 36, 45, 123000, tzinfo=UTC)
RECORD = {
    "id": 7,
    "email": "ann@example.com",
    "phone": "+33 1",
    "amount": "12",
    "qty": 3,
    "price": 2.5,
    "paid": True,
    "created_ms": 1_726_230_000_000,
    "at": AT,
    "local": "2024-09-13T14:36:45.123+02:00[Europe/Paris]",
}
META = MessageMeta(
    "shop.orders",
    2,
    41,
    1_726_238_205_000,
    b"order-7",
    [("trace-id", b"t-1"), ("trace-id", b"t-2"), ("bin", b"\xff")],
)
KEY = b"s3cret"


def compiled(*items):
    problems = r.Problems()
    specs = read_transforms(list(items), "transforms", problems)
    assert not problems, problems.items
    return compile_transforms(specs, SCHEMA, dict.fromkeys(range(len(specs)), KEY))


def field_type(schema: dict, name: str):
    return next(f["type"] for f in schema["fields"] if f["name"] == name)


def roundtrip(schema: dict, record: dict) -> dict:
    """Encode and decode with fastavro: the output schema and record really fit."""
    import io

    parsed = fastavro.parse_schema(schema)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    out.seek(0)
    return fastavro.schemaless_reader(out, parsed, parsed)


@pytest.mark.parametrize(
    ("item", "field", "avro", "value"),
    [
        ({"add": "source", "value": "web"}, "source", "string", "web"),
        ({"add": "n", "value": 3}, "n", "long", 3),
        ({"add": "ratio", "value": 0.5}, "ratio", "double", 0.5),
        ({"add": "flag", "value": True}, "flag", "boolean", True),
        ({"add": "none", "value": None, "type": "string?"}, "none", ["null", "string"], None),
        ({"add": "trace", "header": "trace-id"}, "trace", ["null", "string"], "t-2"),
        ({"add": "absent", "header": "nope"}, "absent", ["null", "string"], None),
        ({"add": "k", "message": "key"}, "k", ["null", "string"], "order-7"),
        ({"add": "kb", "message": "key", "type": "bytes"}, "kb", ["null", "bytes"], b"order-7"),
        ({"add": "t", "message": "topic"}, "t", "string", "shop.orders"),
        ({"add": "p", "message": "partition"}, "p", "int", 2),
        ({"add": "o", "message": "offset"}, "o", "long", 41),
        (
            {"add": "ts", "message": "timestamp"},
            "ts",
            ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            datetime(2024, 9, 13, 14, 36, 45, tzinfo=UTC),
        ),
        ({"rename": "amount", "to": "amount_text"}, "amount_text", "string", "12"),
        (
            {"mask": "email", "key_env": "K"},
            "email",
            "string",
            hmac.new(KEY, b"ann@example.com", hashlib.sha256).hexdigest(),
        ),
        (
            {"mask": "id", "key_env": "K"},
            "id",
            "string",
            hmac.new(KEY, b"7", hashlib.sha256).hexdigest(),
        ),
        ({"mask": "email", "method": None}, "email", ["null", "string"], None),
        ({"cast": "amount", "to": "long"}, "amount", "long", 12),
        ({"cast": "amount", "to": "double"}, "amount", "double", 12.0),
        ({"cast": "qty", "to": "string"}, "qty", "string", "3"),
        ({"cast": "price", "to": "string"}, "price", "string", "2.5"),
        ({"cast": "paid", "to": "string"}, "paid", "string", "true"),
        ({"cast": "paid", "to": "long"}, "paid", "long", 1),
        ({"cast": "phone", "to": "string"}, "phone", ["null", "string"], "+33 1"),
        (
            {"timestamp": "created_ms", "epoch_unit": "ms", "to": "timestamp_micros"},
            "created_ms",
            {"type": "long", "logicalType": "timestamp-micros"},
            datetime(2024, 9, 13, 12, 20, tzinfo=UTC),
        ),
        ({"timestamp": "at", "to": "epoch_s"}, "at", "long", 1_726_231_005),
        ({"timestamp": "at", "to": "epoch_us"}, "at", "long", 1_726_231_005_123_000),
        (
            {"timestamp": "at", "to": "string", "zone": "Europe/Paris"},
            "at",
            "string",
            "2024-09-13T14:36:45.123000+02:00",
        ),
        (
            {
                "timestamp": "at",
                "to": "string",
                "zone": "America/New_York",
                "format": "%Y-%m-%d %H:%M %Z",
            },
            "at",
            "string",
            "2024-09-13 08:36 EDT",
        ),
        (
            {"timestamp": "local", "to": "timestamp_millis"},
            "local",
            {"type": "long", "logicalType": "timestamp-millis"},
            AT,
        ),
        (
            {"compute": "total", "expression": "price * qty", "type": "double"},
            "total",
            "double",
            7.5,
        ),
        (
            {
                "compute": "label",
                "expression": "upper(email[:3]) + '-' + str(id)",
                "type": "string",
            },
            "label",
            "string",
            "ANN-7",
        ),
        (
            {"compute": "big", "expression": "qty > 2 and paid", "type": "boolean"},
            "big",
            "boolean",
            True,
        ),
        (
            {
                "function": "kbqe_dagster_tests.core.transform_functions:add_segment",
                "fields": {"segment": "string?"},
            },
            "segment",
            ["null", "string"],
            "bulk",
        ),
    ],
)
def test_each_kind_derives_its_field_type_and_value(item, field, avro, value) -> None:
    transforms = compiled(item)
    assert field_type(transforms.output_schema, field) == avro
    out = transforms.apply(RECORD, META)
    assert out[field] == value
    assert roundtrip(transforms.output_schema, out)[field] == value
    assert RECORD["amount"] == "12"  # the input record is not changed


def test_drop_removes_fields_from_schema_and_record_and_keeps_the_record_name() -> None:
    transforms = compiled({"drop": ["phone", "local"]}, {"drop": "qty"})
    names = [f["name"] for f in transforms.output_schema["fields"]]
    assert names == ["id", "email", "amount", "price", "paid", "created_ms", "at"]
    assert (transforms.output_schema["name"], transforms.output_schema["namespace"]) == (
        "Order",
        "shop",
    )
    out = transforms.apply(RECORD, META)
    assert "phone" not in out and "qty" not in out
    assert roundtrip(transforms.output_schema, out)["id"] == 7


def test_transforms_apply_in_order_each_to_the_previous_output() -> None:
    transforms = compiled(
        {"rename": "amount", "to": "amount_text"},
        {"cast": "amount_text", "to": "long"},
        {"compute": "total", "expression": "amount_text * qty", "type": "long"},
        {"drop": "amount_text"},
    )
    out = transforms.apply(RECORD, META)
    assert out["total"] == 36 and "amount_text" not in out
    assert field_type(transforms.output_schema, "total") == "long"


def test_hmac_mask_of_a_nullable_field_keeps_null_and_stays_nullable() -> None:
    transforms = compiled({"mask": "phone", "key_env": "K"})
    assert field_type(transforms.output_schema, "phone") == ["null", "string"]
    assert transforms.apply({**RECORD, "phone": None}, META)["phone"] is None


@pytest.mark.parametrize(
    ("item", "record", "detail"),
    [
        ({"cast": "amount", "to": "long"}, {"amount": "12x"}, "'12x' is not a long"),
        ({"cast": "amount", "to": "long"}, {"amount": "1.5"}, "'1.5' is not a long"),
        ({"cast": "amount", "to": "long"}, {"amount": str(2**63)}, "outside the 64-bit range"),
        ({"cast": "amount", "to": "double"}, {"amount": "abc"}, "'abc' is not a double"),
        ({"cast": "amount", "to": "boolean"}, {"amount": "yes"}, "expected true or false"),
        ({"cast": "qty", "to": "boolean"}, {"qty": 2}, "only 0 and 1 are booleans"),
        ({"cast": "price", "to": "long"}, {"price": 2.5}, "not a whole number"),
        ({"timestamp": "local", "to": "epoch_ms"}, {"local": "13/09/2024"}, "not a timestamp"),
        (
            {"timestamp": "local", "to": "epoch_ms"},
            {"local": "2024-09-13T10:00[Mars/Base]"},
            "not a timestamp",
        ),
        (
            {"timestamp": "created_ms", "epoch_unit": "s", "to": "timestamp_millis"},
            {"created_ms": 10**15},
            "not a timestamp",
        ),
        ({"add": "bad", "header": "bin"}, {}, "not UTF-8"),
        (
            {"compute": "x", "expression": "price / (qty - 3)", "type": "double"},
            {},
            "ZeroDivisionError",
        ),
        ({"compute": "x", "expression": "email", "type": "long"}, {}, "not a long"),
        (
            {"function": "kbqe_dagster_tests.core.transform_functions:explode", "fields": {}},
            {},
            "raised RuntimeError: boom for 7",
        ),
        (
            {"function": "kbqe_dagster_tests.core.transform_functions:undeclared", "fields": {}},
            {},
            "undeclared field(s) ['extra']",
        ),
        (
            {
                "function": "kbqe_dagster_tests.core.transform_functions:add_segment",
                "fields": {"segment": "long"},
            },
            {},
            "not a long",
        ),
    ],
)
def test_a_value_that_does_not_transform_fails_naming_transform_and_field(
    item, record, detail
) -> None:
    transforms = compiled({"add": "first", "value": 1}, item)
    with pytest.raises(TransformFailedError) as raised:
        transforms.apply({**RECORD, **record}, META)
    kind = next(k for k in item if k in ("add", "cast", "timestamp", "compute", "function"))
    assert raised.value.reason == Reason.TRANSFORM_FAILED == "transform_failed"
    assert str(raised.value).startswith(f"transforms[1] ({kind}) field ")
    assert detail in str(raised.value)


@pytest.mark.parametrize(
    ("item", "detail"),
    [
        ({"rename": "nope", "to": "x"}, "field 'nope': is not in the record schema"),
        ({"rename": "id", "to": "email"}, "field 'email': already exists"),
        ({"drop": "nope"}, "field 'nope': is not in the record schema"),
        ({"add": "id", "value": 1}, "field 'id': already exists"),
        ({"add": "x", "value": "a", "type": "long"}, "the constant 'a' is not a long"),
        ({"cast": "at", "to": "string"}, "is a long (timestamp-millis); cast reads"),
        ({"mask": "price", "key_env": "K"}, "is a double; hmac masks"),
        ({"timestamp": "created_ms", "to": "string"}, "plain long: give epoch_unit"),
        ({"timestamp": "paid", "to": "string"}, "is a boolean; timestamp reads"),
        ({"compute": "x", "expression": "nope + 1", "type": "long"}, "reads nope, not in"),
    ],
)
def test_a_transform_that_does_not_fit_the_schema_is_a_schema_error(item, detail) -> None:
    with pytest.raises(TransformSchemaError) as raised:
        compiled(item)
    assert raised.value.reason == "transform_failed" and raised.value.index == 0
    assert str(raised.value).startswith(f"transforms[0] ({next(iter(item))}) ")
    assert detail in str(raised.value) and "(record schema Order)" in str(raised.value)


def test_the_hmac_key_comes_from_the_environment_and_a_missing_one_stops_naming_the_variable() -> (
    None
):
    problems = r.Problems()
    specs = read_transforms(
        [{"add": "a", "value": 1}, {"mask": "email", "key_env": "SHOP_KEY"}],
        "topics[0].transforms",
        problems,
    )
    assert hmac_keys(specs, {"SHOP_KEY": "k1"}, "topics[0].transforms") == {1: b"k1"}
    with pytest.raises(ConfigError) as raised:
        hmac_keys(specs, {}, "topics[0].transforms")
    assert str(raised.value) == (
        "topics[0].transforms[1].key_env: environment variable SHOP_KEY "
        "is not set (or empty) where the stage runs"
    )


def test_expressions_cannot_reach_python_internals() -> None:
    transforms = compiled({"compute": "x", "expression": "email.__class__", "type": "string"})
    with pytest.raises(TransformFailedError, match="transforms\\[0\\] \\(compute\\) field 'x'"):
        transforms.apply(RECORD, META)


@pytest.mark.parametrize("timestamp_ms", [None, -1, 253_402_300_800_000])
def test_a_kafka_timestamp_that_is_unknown_or_past_9999_is_added_as_null(timestamp_ms) -> None:
    transforms = compiled({"add": "ts", "message": "timestamp"})
    assert transforms.apply(RECORD, META._replace(timestamp_ms=timestamp_ms))["ts"] is None


def test_an_unexpected_error_inside_a_step_still_fails_only_the_record() -> None:
    transforms = compiled({"mask": "email", "key_env": "K"})
    with pytest.raises(TransformFailedError, match=r"^transforms\[0\] \(mask\) field 'email'"):
        transforms.apply({**RECORD, "email": None}, META)  # not nullable: missing
    odd = {**RECORD, "amount": object()}
    with pytest.raises(TransformFailedError, match=r"^transforms\[0\] \(cast\): TypeError"):
        compiled({"cast": "amount", "to": "long"}).apply(odd, META)
