"""A registry JSON Schema maps to one Avro record, construct by construct; what has no Avro
form is refused naming the construct and its JSON pointer; values convert to the Avro form."""

from __future__ import annotations

import io

import fastavro
import pytest

from kbqe_dagster.core.errors import JsonSchemaMismatchError, UnmappableJsonSchemaError
from kbqe_dagster.core.formats.json_schema_avro import map_json_schema

CLICK = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Click",
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "the page"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "count": {"type": "integer"},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["view", "buy"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "user": {
            "type": ["object", "null"],
            "properties": {"id": {"type": "integer"}},
            "required": ["id"],
        },
        "home": {"$ref": "#/definitions/Address"},
        "work": {"$ref": "#/definitions/Address"},
    },
    "required": ["url", "at", "count", "home"],
    "definitions": {
        "Address": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "since": {"type": "string", "format": "date"},
            },
        }
    },
}


def fields(schema: dict) -> dict:
    return {f["name"]: f["type"] for f in map_json_schema(schema, "topic").avro_schema["fields"]}


def test_each_construct_maps_to_its_avro_type_in_properties_order() -> None:
    avro = map_json_schema(CLICK, "shop.clicks").avro_schema
    assert avro["name"] == "Click" and avro["type"] == "record"
    assert [f["name"] for f in avro["fields"]] == list(CLICK["properties"])
    by_name = {f["name"]: f for f in avro["fields"]}
    assert by_name["url"] == {"name": "url", "type": "string", "doc": "the page"}
    assert by_name["at"]["type"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert by_name["day"] == {
        "name": "day",
        "type": ["null", {"type": "int", "logicalType": "date"}],
        "default": None,
    }
    assert by_name["count"]["type"] == "long"
    assert by_name["score"]["type"] == ["null", "double"]
    assert by_name["ok"]["type"] == ["null", "boolean"]
    assert by_name["kind"]["type"] == [
        "null",
        {"type": "enum", "name": "Click_kind", "symbols": ["view", "buy"]},
    ]
    assert by_name["tags"]["type"] == ["null", {"type": "array", "items": "string"}]
    assert by_name["attrs"]["type"] == ["null", {"type": "map", "values": "long"}]
    assert by_name["user"]["type"] == [
        "null",
        {"type": "record", "name": "Click_user", "fields": [{"name": "id", "type": "long"}]},
    ]
    # A $ref target is one named type, defined at its first use and referenced after.
    assert by_name["home"]["type"]["name"] == "Address"
    assert by_name["work"]["type"] == ["null", "Address"]
    fastavro.parse_schema(avro)  # a valid Avro schema


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": ["string", "null"]}, ["null", "string"]),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, ["null", "string"]),
        ({"oneOf": [{"type": "null"}, {"type": "integer"}]}, ["null", "long"]),
        ({"allOf": [{"type": "boolean"}]}, "boolean"),
        ({"type": ["integer", "number"]}, "double"),
        (
            {"enum": ["a", "b", None]},
            ["null", {"type": "enum", "name": "R_p", "symbols": ["a", "b"]}],
        ),
        ({"enum": ["in-progress", "done"]}, "string"),
        ({"enum": [1, 2, 3]}, "long"),
        ({"type": "string", "format": "email"}, "string"),
        ({"$ref": "#/$defs/Id"}, "long"),
    ],
)
def test_nullable_idioms_and_enum_forms(schema: dict, expected) -> None:
    root = {
        "title": "R",
        "type": "object",
        "properties": {"p": schema},
        "required": ["p"],
        "$defs": {"Id": {"type": "integer"}},
    }
    assert fields(root)["p"] == expected


def test_names_come_from_title_then_path_and_are_made_avro_safe_and_unique() -> None:
    schema = {
        "type": "object",
        "properties": {
            "shipping-address": {"type": "object", "properties": {"zip code": {"type": "string"}}},
            "1st": {"title": "Thing", "type": "object", "properties": {"x": {"type": "integer"}}},
            "2nd": {"title": "Thing", "type": "object", "properties": {"y": {"type": "integer"}}},
        },
    }
    avro = map_json_schema(schema, "com.acme-events").avro_schema
    assert avro["name"] == "com_acme_events"
    types = {f["name"]: f["type"][1] for f in avro["fields"]}
    assert types["shipping_address"]["name"] == "com_acme_events_shipping_address"
    assert types["shipping_address"]["fields"][0]["name"] == "zip_code"
    assert (types["_1st"]["name"], types["_2nd"]["name"]) == ("Thing", "Thing_2")
    fastavro.parse_schema(avro)


@pytest.mark.parametrize(
    ("prop", "construct", "pointer"),
    [
        (
            {
                "oneOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}},
                    {"type": "object", "properties": {"b": {"type": "string"}}},
                ]
            },
            "oneOf of several schemas",
            "/properties/p/oneOf",
        ),
        (
            {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "anyOf of several schemas",
            "/properties/p/anyOf",
        ),
        (
            {"allOf": [{"type": "object"}, {"type": "object"}]},
            "allOf of several schemas",
            "/properties/p/allOf",
        ),
        (
            {"type": "object", "patternProperties": {"^x": {"type": "string"}}},
            "patternProperties",
            "/properties/p/patternProperties",
        ),
        (
            {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
            "tuple array",
            "/properties/p/items",
        ),
        (
            {"type": "array", "prefixItems": [{"type": "string"}]},
            "tuple array",
            "/properties/p/prefixItems",
        ),
        ({"$ref": "https://example.com/other.json"}, "remote $ref", "/properties/p/$ref"),
        (
            {"$ref": "#/definitions/Node"},
            "recursive $ref",
            "/definitions/Node/properties/next/$ref",
        ),
        ({"$ref": "#/definitions/Missing"}, "a $ref to nothing", "/properties/p/$ref"),
        ({"type": ["string", "integer"]}, "type union", "/properties/p/type"),
        ({}, "untyped schema", "/properties/p"),
        ({"type": "null"}, "only allows null", "/properties/p/type"),
        (
            {"type": "object"},
            "neither properties nor an additionalProperties schema",
            "/properties/p",
        ),
        ({"type": "array"}, "array without an items schema", "/properties/p"),
        (
            {"type": "array", "items": {"type": ["string", "null"]}},
            "items may be null",
            "/properties/p/items",
        ),
        (
            {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
            "array of arrays",
            "/properties/p/items",
        ),
        (
            {"if": {"type": "string"}, "then": {"type": "string"}},
            "conditional schema",
            "/properties/p/if",
        ),
        ({"enum": [1, "a"]}, "neither all strings nor all integers", "/properties/p/enum"),
    ],
)
def test_what_has_no_avro_form_is_refused_naming_construct_and_pointer(
    prop: dict, construct: str, pointer: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"p": prop},
        "definitions": {
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/definitions/Node"}}}
        },
    }
    with pytest.raises(UnmappableJsonSchemaError) as caught:
        map_json_schema(schema, "t")
    assert construct in str(caught.value) and f"at {pointer}" in str(caught.value)
    assert caught.value.reason == "unmappable_json_schema"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": ["object", "null"], "properties": {"a": {"type": "string"}}},
        [1],
    ],
)
def test_the_root_must_be_an_object_with_properties(schema) -> None:
    with pytest.raises(UnmappableJsonSchemaError, match="root"):
        map_json_schema(schema, "t")


def test_a_root_that_references_its_definition_is_that_definition() -> None:
    schema = {
        "$ref": "#/definitions/Click",
        "definitions": {
            "Click": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
            }
        },
    }
    assert map_json_schema(schema, "t").avro_schema == {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "url", "type": "string"}],
    }


def test_properties_that_collide_once_made_avro_safe_are_refused() -> None:
    schema = {
        "type": "object",
        "properties": {"a-b": {"type": "string"}, "a_b": {"type": "string"}},
    }
    with pytest.raises(UnmappableJsonSchemaError, match="'a-b' and 'a_b' have the same Avro name"):
        map_json_schema(schema, "t")


def test_values_convert_to_the_avro_form_and_encode_under_the_mapped_schema() -> None:
    mapping = map_json_schema(CLICK, "t")
    value = {
        "url": "/a",
        "at": "2024-09-13T14:36:45.123456+02:00",
        "day": "2024-09-13",
        "count": 3.0,
        "score": 2,
        "ok": True,
        "kind": "buy",
        "tags": ["x"],
        "attrs": {"k": 1},
        "user": {"id": 7},
        "home": {"city": "Paris", "since": "1970-01-02"},
        "extra": "not staged",
    }
    record = mapping.convert(value)
    assert record["at"] == 1_726_231_005_123_456  # 12:36:45.123456 UTC
    assert record["day"] == 19979 and record["count"] == 3 and isinstance(record["count"], int)
    assert record["home"] == {"city": "Paris", "since": 1}
    assert record["work"] is None and "extra" not in record
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(mapping.avro_schema), record)
    out.seek(0)
    back = fastavro.schemaless_reader(out, fastavro.parse_schema(mapping.avro_schema), None)
    assert back["at"].isoformat() == "2024-09-13T12:36:45.123456+00:00"
    assert back["home"]["since"].isoformat() == "1970-01-02" and back["kind"] == "buy"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"at": "2024-09-13T14:36:45"}, "has no UTC offset (RFC 3339 requires one) at /at"),
        ({"at": "yesterday"}, "'yesterday' is not an RFC 3339 date-time at /at"),
        ({"day": "20240913"}, "'20240913' is not a date (YYYY-MM-DD) at /day"),
        ({"home": {"since": "soon"}}, "at /home/since"),
        ({"count": 2**63}, "outside the 64-bit integer range at /count"),
    ],
)
def test_a_value_that_does_not_convert_is_a_mismatch_naming_its_pointer(value, expected) -> None:
    base = {"url": "/a", "at": "2024-09-13T14:36:45Z", "count": 1, "home": {}}
    with pytest.raises(JsonSchemaMismatchError) as caught:
        map_json_schema(CLICK, "t").convert({**base, **value})
    assert expected in str(caught.value)


def test_nested_pointers_name_array_indexes_and_map_keys() -> None:
    schema = {
        "type": "object",
        "properties": {
            "days": {"type": "array", "items": {"type": "string", "format": "date"}},
            "seen": {
                "type": "object",
                "additionalProperties": {"type": "string", "format": "date-time"},
            },
        },
    }
    mapping = map_json_schema(schema, "t")
    with pytest.raises(JsonSchemaMismatchError, match="at /days/1"):
        mapping.convert({"days": ["2024-01-01", "x"]})
    with pytest.raises(JsonSchemaMismatchError, match="at /seen/a~1b"):
        mapping.convert({"seen": {"a/b": "x"}})
    assert mapping.convert({"days": ["1970-01-03"], "seen": {"k": "1970-01-01T00:00:01Z"}}) == {
        "days": [2],
        "seen": {"k": 1_000_000},
    }
