"""From a change message to its changelog record: the change columns, then the row image cut
out of the body. The record must equal what fastavro writes for the same values under the
changelog schema (so the row bytes are a correct slice), for every source form."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError, NotAChangeError, UnsupportedSchemaError
from kbqe_dagster.demo.debezium import ROW_V2, envelope_schema
from kbqe_dagster.demo.debezium_changes import Change, value_record
from kbqe_dagster.keyed import changes
from kbqe_dagster.keyed.changes import change_layout
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster_tests.support.change_layouts import FLAT, NS, PRICE, decode, encode

STATIC = {"mode": "static", "dataset": "inventory", "table": "customers"}


def debezium_topic(**keyed):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": "t", "format": "debezium", "routing": STATIC, "keyed": keyed}],
        }
    ).topics[0]


def plain_topic(**keyed):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": "prices",
                    "routing": STATIC,
                    "event_time": {"fields": ["updated_at"]},
                    "keyed": {"key": ["sku"], "version": "updated_at", **keyed},
                }
            ],
        }
    ).topics[0]


def changelog_record(schema: dict, body: bytes, topic) -> dict:
    layout = change_layout(schema, topic)
    fields = RecordProbe(schema, layout.wanted).probe(body)
    return decode(layout.schema, layout.body(body, fields))


ROW = {
    "id": 7,
    "first_name": "Anne",
    "last_name": "Kretchmar",
    "email": "a@example.com",
    "phone": None,
}
NEWER = {**ROW, "email": "anne@example.com", "phone": "+1-555-0100"}


@pytest.mark.parametrize(
    ("op", "before", "after", "row", "deleted"),
    [
        ("r", None, ROW, ROW, False),
        ("c", None, ROW, ROW, False),
        ("u", ROW, NEWER, NEWER, False),
        ("d", NEWER, None, NEWER, True),
    ],
)
def test_an_envelope_becomes_the_change_columns_and_its_row_image(op, before, after, row, deleted):
    schema = envelope_schema(NS, ROW_V2)
    change = Change(7, op, before, after, 1_732_000_000_123, 2)
    record = changelog_record(schema, encode(schema, value_record(change, NS)), debezium_topic())
    assert record == {"_op": op, "_source_ts_ms": 1_732_000_000_123, "_deleted": deleted, **row}


def test_the_changelog_schema_puts_change_columns_first_and_keeps_the_row_fields_in_order():
    layout = change_layout(envelope_schema(NS, ROW_V2), debezium_topic())
    names = [f["name"] for f in layout.schema["fields"]]
    assert names == [
        "_op",
        "_source_ts_ms",
        "_deleted",
        "id",
        "first_name",
        "last_name",
        "email",
        "phone",
    ]
    assert layout.schema["name"] == f"{NS}.Value"


@pytest.mark.parametrize(
    ("op", "before", "after", "expected"),
    [
        ("m", None, None, "op 'm' is not a row change"),
        ("d", None, None, "op 'd' without a before image"),
        ("u", ROW, None, "op 'u' without a after image"),
    ],
)
def test_an_envelope_that_is_not_a_row_change_is_bad_input(op, before, after, expected):
    schema = envelope_schema(NS, ROW_V2)
    change = Change(7, op, before, after, 1, 2)
    with pytest.raises(NotAChangeError, match=expected) as caught:
        changelog_record(schema, encode(schema, value_record(change, NS)), debezium_topic())
    assert caught.value.reason == "not_a_change"


def test_a_truncate_is_a_deleting_change_without_row_values():
    """Both images are null: the row fields are NULL where nullable, the zero value of their
    type where Avro has no null (the NOT NULL key: no MERGE or history reads them)."""
    schema = envelope_schema(NS, ROW_V2)
    change = Change(7, "t", None, None, 1_732_000_000_999, 2)
    record = changelog_record(schema, encode(schema, value_record(change, NS)), debezium_topic())
    assert record == {
        "_op": "t",
        "_source_ts_ms": 1_732_000_000_999,
        "_deleted": True,
        "id": 0,
        "first_name": "",
        "last_name": "",
        "email": "",
        "phone": None,
    }


def test_an_empty_row_covers_every_avro_type():
    row = {
        "type": "record",
        "name": "Value",
        "fields": [
            {"name": "b", "type": "boolean"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "raw", "type": "bytes"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["x", "y"]}},
            {"name": "again", "type": "E"},
            {"name": "fx", "type": {"type": "fixed", "name": "F", "size": 3}},
            {"name": "a", "type": {"type": "array", "items": "string"}},
            {"name": "m", "type": {"type": "map", "values": "long"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "n", "type": ["string", "null"]},
            {"name": "u", "type": ["int", "string"]},
            {"name": "r", "type": {"type": "record", "name": "In", "fields": [
                {"name": "x", "type": "int"}]}},
        ],
    }  # fmt: skip
    schema = envelope_schema(NS, row["fields"])
    change = Change(7, "t", None, None, 5, 2)
    record = changelog_record(schema, encode(schema, value_record(change, NS)), debezium_topic())
    assert {k: v for k, v in record.items() if not k.startswith("_")} == {
        "b": False, "f": 0.0, "d": 0.0, "raw": b"", "e": "x", "again": "x", "fx": bytes(3),
        "a": [], "m": {}, "ts": datetime(1970, 1, 1, tzinfo=UTC), "n": None, "u": 0,
        "r": {"x": 0},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("op", "deleted", "expected_op", "expected_deleted"),
    [
        ("c", "false", "c", False),
        ("u", "false", "u", False),
        ("d", "true", "d", True),
        (None, "true", "d", True),
    ],
)
def test_extract_new_record_state_records_become_changes(
    op, deleted, expected_op, expected_deleted
):
    body = encode(FLAT, {**NEWER, "__op": op, "__source_ts_ms": 99, "__deleted": deleted})
    record = changelog_record(FLAT, body, debezium_topic())
    assert record == {
        "_op": expected_op,
        "_source_ts_ms": 99,
        "_deleted": expected_deleted,
        **NEWER,
    }


def test_extract_new_record_state_needs_its_fields_after_the_row_and_a_version():
    shuffled = {**FLAT, "fields": [FLAT["fields"][5], *FLAT["fields"][:5], *FLAT["fields"][6:]]}
    with pytest.raises(UnsupportedSchemaError, match="follow the transform's __ fields"):
        change_layout(shuffled, debezium_topic())
    unversioned = {**FLAT, "fields": [f for f in FLAT["fields"] if f["name"] != "__source_ts_ms"]}
    with pytest.raises(UnsupportedSchemaError, match="add.fields=op,source.ts_ms"):
        change_layout(unversioned, debezium_topic())


def test_a_debezium_topic_refuses_records_that_are_no_change_events():
    with pytest.raises(UnsupportedSchemaError, match="neither a Debezium envelope"):
        change_layout({"type": "record", "name": "X", "fields": ROW_V2}, debezium_topic())


@pytest.mark.parametrize(("discontinued", "op"), [(False, "u"), (True, "d")])
def test_a_plain_keyed_record_is_an_upsert_or_a_delete_versioned_by_its_field(discontinued, op):
    at = datetime(2024, 11, 19, 12, 0, 0, 123000, tzinfo=UTC)
    price = {"sku": "A-1", "cents": 1999, "updated_at": at, "discontinued": discontinued}
    record = changelog_record(PRICE, encode(PRICE, price), plain_topic(delete_field="discontinued"))
    assert record == {
        "_op": op,
        "_source_ts_ms": 1_732_017_600_123,
        "_deleted": discontinued,
        **price,
    }


@pytest.mark.parametrize(
    ("keyed", "expected"),
    [
        ({"key": ["id"]}, "topics[prices].keyed.key: ['id'] not among the row fields"),
        (
            {"version": "cents_x"},
            "topics[prices].keyed.version: field 'cents_x' is not in shop.Price",
        ),
        ({"version": "sku"}, "topics[prices].keyed.version: field 'sku' is ['string'], expected"),
        ({"delete_field": "cents"}, "topics[prices].keyed.delete_field: field 'cents' is ['long']"),
    ],
)
def test_keyed_fields_the_schema_lacks_fail_the_run_naming_the_key_path(keyed, expected):
    with pytest.raises(ConfigError) as caught:
        change_layout(PRICE, plain_topic(**keyed))
    assert expected in str(caught.value)


def test_a_debezium_key_must_be_a_row_field():
    with pytest.raises(ConfigError, match=r"topics\[t\].keyed.key: \['customer_id'\]"):
        change_layout(envelope_schema(NS, ROW_V2), debezium_topic(key=["customer_id"]))


@pytest.mark.parametrize("form", ["envelope", "flat"])
def test_the_python_skippers_are_generated_by_the_first_cut_only(monkeypatch, form):
    # The native kernel cuts these layouts itself: a range it stages whole never needs the
    # generated Python skippers, whose source generation and compile were most of a layout's
    # cost in every range (issue 26).
    generated = []
    real = changes.record_skipper
    monkeypatch.setattr(
        changes, "record_skipper", lambda *a, **k: generated.append(a) or real(*a, **k)
    )
    if form == "envelope":
        schema = envelope_schema(NS, ROW_V2)
        body = encode(schema, value_record(Change(7, "u", ROW, NEWER, 99, 2), NS))
    else:
        schema = FLAT
        body = encode(FLAT, {**NEWER, "__op": "u", "__source_ts_ms": 99, "__deleted": "false"})
    layout = change_layout(schema, debezium_topic())
    assert generated == []
    fields = RecordProbe(schema, layout.wanted).probe(body)
    record = decode(layout.schema, layout.body(body, fields))
    assert record == {"_op": "u", "_source_ts_ms": 99, "_deleted": False, **NEWER}
    made = len(generated)
    assert made > 0
    layout.body(body, fields)
    assert len(generated) == made  # generated once per layout


def test_an_image_naming_an_undefined_record_is_refused_when_the_layout_is_made():
    # Checked as the layout is made, as when the skippers were generated there: the refusal
    # does not move to the first message the Python path cuts.
    schema = envelope_schema(NS, ROW_V2)
    fields = [{**f, "type": ["null", "Nowhere"]} if f["name"] == "before" else f
              for f in schema["fields"]]  # fmt: skip
    with pytest.raises(ValueError, match="unknown Avro type 'Nowhere'"):
        change_layout({**schema, "fields": fields}, debezium_topic())
