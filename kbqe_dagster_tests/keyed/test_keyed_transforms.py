"""Transforms on keyed topics, stage side (keyed/changes.py ``RowTransform``): the row of every
change — the Debezium envelope's ``after`` and a delete's ``before`` alike, ExtractNewRecordState's
row, a plain keyed record — is transformed before it reaches the changelog, so the current
table and the history (derived from it) hold the transformed row too. The change columns and
the version are read from the message as it came."""

from __future__ import annotations

import hmac
from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import (
    TransformFailedError,
    TransformSchemaError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.transforms.compiler import MessageMeta
from kbqe_dagster.demo.debezium import ROW_V2, envelope_schema
from kbqe_dagster.demo.debezium_changes import Change, value_record
from kbqe_dagster.keyed.changes import change_layout
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster_tests.support.change_layouts import FLAT, NS, PRICE, decode, encode

STATIC = {"mode": "static", "dataset": "inventory", "table": "customers"}
KEY = b"mask-key"
META = MessageMeta("t", 2, 41, 1_732_000_000_999, b"7", [("trace", b"abc")])
CUSTOMER_TRANSFORMS = [
    {"rename": "id", "to": "customer_id"},
    {"cast": "customer_id", "to": "string"},
    {"mask": "email", "key_env": "KBQE_TEST_MASK_KEY"},
    {"drop": "last_name"},
    {"add": "source_db", "value": "inventory"},
    {"add": "kafka_offset", "message": "offset"},
    {"compute": "greeting", "expression": '"Hi " + first_name', "type": "string"},
]


def topic(transforms, source_format="debezium", keyed=None):
    section = {"name": "t", "format": source_format, "routing": STATIC,
               "keyed": keyed or {"key": ["id"]}, "transforms": transforms}  # fmt: skip
    if source_format == "avro":
        section["event_time"] = {"fields": ["updated_at"]}
    return parse_pipeline_config({"version": 1, "topics": [section]}).topics[0]


def staged(schema, record, transforms, source_format="debezium", keyed=None) -> dict:
    layout = change_layout(schema, topic(transforms, source_format, keyed), {2: KEY})
    body = encode(schema, record)
    fields = RecordProbe(schema, layout.wanted).probe(body)
    return decode(layout.schema, layout.body(body, fields, META))


def digest(text: str) -> str:
    return hmac.new(KEY, text.encode(), "sha256").hexdigest()


ROW = {"id": 7, "first_name": "Anne", "last_name": "Kretchmar", "email": "a@example.com",
       "phone": None}  # fmt: skip
NEWER = {**ROW, "email": "anne@example.com", "phone": "+1-555-0100"}


def transformed(row: dict) -> dict:
    """The oracle: CUSTOMER_TRANSFORMS written out by hand."""
    return {"customer_id": str(row["id"]), "first_name": row["first_name"],
            "email": digest(row["email"]), "phone": row["phone"], "source_db": "inventory",
            "kafka_offset": 41, "greeting": "Hi " + row["first_name"]}  # fmt: skip


@pytest.mark.parametrize(
    ("op", "before", "after", "row", "deleted"),
    [
        ("r", None, ROW, ROW, False),
        ("c", None, ROW, ROW, False),
        ("u", ROW, NEWER, NEWER, False),
        ("d", NEWER, None, NEWER, True),  # the before image, transformed the same way
    ],
)
def test_an_envelope_row_is_transformed_whichever_image_it_is(op, before, after, row, deleted):
    schema = envelope_schema(NS, ROW_V2)
    change = value_record(Change(7, op, before, after, 1_732_000_000_123, 2), NS)
    record = staged(schema, change, CUSTOMER_TRANSFORMS)
    assert record == {"_op": op, "_source_ts_ms": 1_732_000_000_123, "_deleted": deleted,
                      **transformed(row)}  # fmt: skip


def test_the_changelog_schema_is_the_change_columns_then_the_derived_row():
    layout = change_layout(envelope_schema(NS, ROW_V2), topic(CUSTOMER_TRANSFORMS), {2: KEY})
    names = [f["name"] for f in layout.schema["fields"]]
    assert names == ["_op", "_source_ts_ms", "_deleted", "customer_id", "first_name", "email",
                     "phone", "source_db", "kafka_offset", "greeting"]  # fmt: skip
    assert layout.row_fields == ("id", "first_name", "last_name", "email", "phone")
    assert layout.schema["name"] == f"{NS}.Value"


def test_a_truncate_row_holds_the_derived_row_nulls_and_zeros():
    schema = envelope_schema(NS, ROW_V2)
    record = staged(schema, value_record(Change(0, "t", None, None, 5, 2), NS), CUSTOMER_TRANSFORMS)
    assert record == {"_op": "t", "_source_ts_ms": 5, "_deleted": True, "customer_id": "",
                      "first_name": "", "email": "", "phone": None, "source_db": "",
                      "kafka_offset": 0, "greeting": ""}  # fmt: skip


@pytest.mark.parametrize(("deleted", "op"), [("false", "u"), ("true", "d")])
def test_an_extract_new_record_state_row_is_transformed(deleted, op):
    record = staged(FLAT, {**NEWER, "__op": op, "__source_ts_ms": 99, "__deleted": deleted},
                    CUSTOMER_TRANSFORMS)  # fmt: skip
    assert record == {"_op": op, "_source_ts_ms": 99, "_deleted": op == "d", **transformed(NEWER)}


def test_a_plain_keyed_record_is_transformed_and_versioned_by_its_field_as_it_came():
    at = datetime(2024, 11, 19, 12, 0, 0, 123000, tzinfo=UTC)
    price = {"sku": "A-1", "cents": 1999, "updated_at": at, "discontinued": False}
    transforms = [
        {"timestamp": "updated_at", "to": "string"},  # the version is read before it
        {"cast": "cents", "to": "double"},
        {"mask": "sku", "key_env": "KBQE_TEST_MASK_KEY"},
        {"drop": "discontinued"},
        {"add": "x", "value": 1},
    ]
    record = staged(PRICE, price, transforms, "avro", {"key": ["sku"], "version": "updated_at"})
    assert record == {"_op": "u", "_source_ts_ms": 1_732_017_600_123, "_deleted": False,
                      "sku": digest("A-1"), "cents": 1999.0,
                      "updated_at": "2024-11-19T12:00:00.123000+00:00", "x": 1}  # fmt: skip


def test_transforms_that_do_not_fit_a_schema_refuse_its_messages_as_bad_input():
    # Every message of the schema then follows the bad-input policy (dead letters by default).
    with pytest.raises(TransformSchemaError, match=r"transforms\[0\] \(rename\) field 'fax'"):
        change_layout(envelope_schema(NS, ROW_V2), topic([{"rename": "fax", "to": "f"}]))
    with pytest.raises(UnsupportedSchemaError, match=r"collide with change columns"):
        change_layout(envelope_schema(NS, ROW_V2), topic([{"rename": "phone", "to": "_op"}]))


def test_a_value_a_transform_cannot_convert_fails_that_change_naming_the_field():
    schema = envelope_schema(NS, ROW_V2)
    change = value_record(Change(7, "c", None, NEWER, 5, 2), NS)
    with pytest.raises(TransformFailedError, match=r"transforms\[0\] \(cast\) field 'phone'"):
        staged(schema, change, [{"cast": "phone", "to": "long"}])


# --- merge side: the key's columns ------------------------------------------------------------
class _Loads:
    client = None
    project = "p"


def merge_spec(transforms, kafka_key):
    from google.cloud.bigquery import SchemaField

    from kbqe_dagster.keyed.merge import Destination, KeyedMerger

    dest = Destination(topic(transforms, keyed={"deletes": "hard"}), "inventory", "customers")
    names = ["_kafka_partition", "_kafka_offset", "_op", "_source_ts_ms", "_deleted",
             "customer_id", "first_name", "email"]  # fmt: skip
    columns = {name: SchemaField(name, "STRING") for name in names}
    merger = KeyedMerger(_Loads(), key_fields=lambda name: kafka_key)  # type: ignore[arg-type]
    return merger.spec(dest, columns)[0]


def test_the_merge_keys_on_the_renamed_key_column_wherever_the_key_comes_from():
    spec = merge_spec(CUSTOMER_TRANSFORMS, ("id",))  # the Kafka key's fields
    assert spec.key == ("customer_id",)
    assert "customer_id" in spec.target_columns and "id" not in spec.row_columns
    assert spec.deleted_keys == "p.inventory.customers_deleted_keys"


def test_a_kafka_key_field_a_transform_does_not_keep_fails_the_merge_naming_the_transform():
    from kbqe_dagster.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"topics\[t\]\.transforms\[2\]: mask of key field "
                       r"'email': method \"null\""):  # fmt: skip
        merge_spec([*CUSTOMER_TRANSFORMS[:2], {"mask": "email", "method": "null"}], ("email",))


# --- a Debezium topic's Kafka key, at stage time -------------------------------------------
def kafka_keyed_stream(transforms, tmp_path):
    """A truncate (no Kafka key), then a create keyed as Debezium's Avro converter writes it,
    on a topic without keyed.key, staged on the Python path."""
    from kbqe_dagster.demo.debezium import frame, key_schema
    from kbqe_dagster_tests.staging.kernel_equality import Msg, stage

    schema, key = envelope_schema(NS, ROW_V2), key_schema(NS)
    config = parse_pipeline_config({"version": 1, "topics": [
        {"name": "t", "format": "debezium", "routing": STATIC, "keyed": {},
         "transforms": transforms}]})  # fmt: skip
    changes = [Change(0, "t", None, None, 5, 2), Change(7, "c", None, ROW, 6, 2)]
    msgs = [Msg("t", 0, offset, frame(4, schema, value_record(change, NS)),
                key=None if change.op == "t" else frame(9, key, {"id": 7}))
            for offset, change in enumerate(changes)]  # fmt: skip
    return stage(tmp_path, config, "t", {4: schema, 9: key}, msgs, native=False)


def test_a_kafka_key_field_a_transform_would_lose_stops_the_range_before_the_changelog(tmp_path):
    from kbqe_dagster.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"the Kafka key's fields \['id'\]: topics\[0\]"
                       r"\.transforms\[1\]: drop of key field 'id'"):  # fmt: skip
        kafka_keyed_stream([{"mask": "email", "method": "null"}, {"drop": "id"}], tmp_path)


def test_a_kafka_key_field_renamed_is_staged_under_its_new_name(tmp_path):
    staged_run = kafka_keyed_stream([{"rename": "id", "to": "customer_id"}], tmp_path)
    assert staged_run.result.records == 2 and staged_run.result.dead_letters == {}
