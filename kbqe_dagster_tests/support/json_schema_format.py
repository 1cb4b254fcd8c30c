"""A topic of orders in JSON under registered JSON Schemas (``V1``, then ``V2``), one
``GOOD`` value and the pipeline config that reads the topic: what the JSON Schema format tests,
Python path and kernel, share."""

from __future__ import annotations

import json

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
from kbqe_dagster_tests.support.framing import json_framed

TOPIC = "shop.orders"


V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "datasetName": {"type": "string"},
        "tableName": {"type": "string"},
        "id": {"type": "integer", "minimum": 1},
        "placed_at": {"type": "string", "format": "date-time"},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
    },
    "required": ["datasetName", "tableName", "id", "placed_at"],
    "definitions": {
        "Line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku", "qty"],
        }
    },
}


V2 = {**V1, "properties": {**V1["properties"], "coupon": {"type": ["string", "null"]}}}


GOOD = {
    "datasetName": "shop",
    "tableName": "orders",
    "id": 1,
    "placed_at": "2024-09-13T14:36:45.123+02:00",
    "lines": [{"sku": "a", "qty": 2}],
}


def pipeline(**topic):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "json_schema",
                    "event_time": {"fields": ["placed_at"]},
                    **topic,
                }
            ],
            "allowed_destinations": ["shop.*"],
        }
    )


UNMAPPABLE = {
    "type": "object",
    "properties": {
        "pay": {
            "oneOf": [
                {"type": "object", "properties": {"card": {"type": "string"}}},
                {"type": "object", "properties": {"iban": {"type": "string"}}},
            ]
        }
    },
}


AVRO = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


IDS = {"v1": 11, "v2": 12, "unmappable": 13, "avro": 14, "invalid": 15}


def fake_registry() -> FakeSchemaRegistry:
    """The registry boundary: this file's schemas under fixed ids."""
    return FakeSchemaRegistry(
        {
            IDS["v1"]: RegisteredSchema(IDS["v1"], "JSON", json.dumps(V1)),
            IDS["v2"]: RegisteredSchema(IDS["v2"], "JSON", json.dumps(V2)),
            IDS["unmappable"]: RegisteredSchema(IDS["unmappable"], "JSON", json.dumps(UNMAPPABLE)),
            IDS["avro"]: RegisteredSchema(IDS["avro"], "AVRO", AVRO),
            IDS["invalid"]: RegisteredSchema(IDS["invalid"], "JSON", json.dumps({"type": 5})),
        }
    )


def framed(version: str, record) -> bytes:
    return json_framed(IDS[version], record)
