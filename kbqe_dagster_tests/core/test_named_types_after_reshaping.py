"""A derived record schema (transforms, a destination's projection) defines every named type
where it is first used (core/formats/avro_names.py ``define_before_use``): leaving out the
field that carried a definition, or putting a referring field first, must not give a schema
fastavro refuses (before, such a range failed on every retry)."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from kbqe_dagster.core.formats.avro_names import define_before_use
from kbqe_dagster.core.transforms.compiler import compile_transforms
from kbqe_dagster.core.transforms.destinations import project_schema
from kbqe_dagster.core.transforms.specs import DropFields, MaskField, MaskMethod

COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}
POINT = {
    "type": "record",
    "name": "Point",
    "namespace": "geo",
    "fields": [
        {"name": "x", "type": "long"},
        # A short name inside geo.Point: resolved in geo, wherever Point's definition lands.
        {"name": "unit", "type": {"type": "enum", "name": "Unit", "symbols": ["M", "KM"]}},
        {"name": "other_unit", "type": "Unit"},
    ],
}
SOURCE = {
    "type": "record",
    "name": "Shape",
    "namespace": "shop",
    "fields": [
        {"name": "fill", "type": COLOR},
        {"name": "line", "type": "Color"},
        {"name": "origin", "type": POINT},
        {"name": "corners", "type": {"type": "array", "items": "geo.Point"}},
        {"name": "by_name", "type": {"type": "map", "values": ["null", "shop.Color"]}},
    ],
}


def parses(schema: dict) -> bool:
    fastavro.parse_schema(schema, _write_hint=False)
    return True


def test_a_schema_already_in_order_comes_back_equal() -> None:
    assert json.dumps(define_before_use(SOURCE, SOURCE)) == json.dumps(SOURCE)
    assert json.dumps(project_schema(SOURCE, ["fill", "line"])) == json.dumps(
        {**SOURCE, "fields": SOURCE["fields"][:2]}
    )


def test_dropping_the_field_that_defined_a_type_moves_the_definition_to_its_first_use() -> None:
    output = compile_transforms([DropFields(("fill", "origin"))], SOURCE).output_schema
    assert parses(output)
    line, corners = output["fields"][0], output["fields"][1]
    assert line["type"] == {**COLOR, "name": "shop.Color"}
    assert corners["type"]["items"]["name"] == "geo.Point"
    # Point's inner short reference still means geo.Unit.
    assert corners["type"]["items"]["fields"][2]["type"] == "Unit"
    assert output["fields"][2]["type"] == {"type": "map", "values": ["null", "shop.Color"]}


def test_a_projection_that_puts_a_reference_first_defines_it_there_and_refers_after() -> None:
    output = project_schema(SOURCE, ["corners", "line", "origin", "fill"])
    assert parses(output)
    assert output["fields"][0]["type"]["items"]["name"] == "geo.Point"
    assert output["fields"][1]["type"]["name"] == "shop.Color"
    assert output["fields"][2]["type"] == "geo.Point"
    assert output["fields"][3]["type"] == "shop.Color"


def test_records_written_under_the_source_read_back_under_the_derived_schema() -> None:
    output = project_schema(SOURCE, ["line", "corners"])
    record = {"line": "BLUE", "corners": [{"x": 1, "unit": "KM", "other_unit": "M"}]}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(output), record)
    buffer.seek(0)
    assert fastavro.schemaless_reader(buffer, fastavro.parse_schema(output), None) == record


@pytest.mark.parametrize("method", [MaskMethod.NULL])
def test_a_mask_keeps_a_definition_in_its_nullable_type(method) -> None:
    output = compile_transforms([MaskField("fill", method=method)], SOURCE).output_schema
    assert parses(output)
    assert output["fields"][0]["type"] == ["null", COLOR]
