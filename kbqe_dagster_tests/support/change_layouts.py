"""A flattened Debezium change (``FLAT``, as the ExtractNewRecordState transform writes it) of the
customers table in namespace ``NS``, a PRICE field, and Avro encode/decode of a body: what the
changelog layout tests and the keyed transform tests share."""

from __future__ import annotations

import io

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kbqe_dagster.demo.debezium import ROW_V2

NS = "dbserver1.inventory.customers"


def encode(schema, record) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def decode(schema, body: bytes) -> dict:
    return schemaless_reader(io.BytesIO(body), parse_schema(schema), None)


FLAT = {
    "type": "record",
    "name": "Value",
    "namespace": NS,
    "fields": [
        *ROW_V2,
        {"name": "__op", "type": ["null", "string"], "default": None},
        {"name": "__source_ts_ms", "type": ["null", "long"], "default": None},
        {"name": "__deleted", "type": ["null", "string"], "default": None},
    ],
}


PRICE = {
    "type": "record",
    "name": "Price",
    "namespace": "shop",
    "fields": [
        {"name": "sku", "type": "string"},
        {"name": "cents", "type": "long"},
        {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "discontinued", "type": "boolean"},
    ],
}
