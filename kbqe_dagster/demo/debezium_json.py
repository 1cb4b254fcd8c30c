"""The demo's Debezium events as Kafka Connect's ``JsonConverter`` writes them with an embedded
schema (``schemas.enable=true``, Connect's default): each key and value is
``{"schema": <Connect schema>, "payload": <data>}``, compact, schema first, no registry.

The Connect schemas here are those Debezium builds for the Postgres ``customers`` table of
kbqe_dagster/demo/debezium.py, whose Avro schemas (:func:`~kbqe_dagster.demo.debezium.envelope_schema`,
:func:`~kbqe_dagster.demo.debezium.key_schema`) are what the Avro converter registers for them:
the same events either way, for the tests that compare the two encodings.
"""

from __future__ import annotations

import json
from typing import Any

from kbqe_dagster.demo.debezium_changes import PRECISE_TS, Change, value_record


def _field(field: str, kind: str, optional: bool = False, **extra: Any) -> dict:
    return {"type": kind, "optional": optional, **extra, "field": field}


def row_fields(schema_version: int) -> list[dict]:
    fields = [
        _field("id", "int32"),
        _field("first_name", "string"),
        _field("last_name", "string"),
        _field("email", "string"),
    ]
    if schema_version >= 2:
        fields.append(_field("phone", "string", optional=True))
    return fields


def connect_value_schema(namespace: str, schema_version: int, ts_precision: bool = False) -> dict:
    """The envelope's Connect schema (Debezium's ``<topic>.Envelope``)."""
    row = {"type": "struct", "fields": row_fields(schema_version), "optional": True,
           "name": f"{namespace}.Value"}  # fmt: skip
    source = {
        "type": "struct",
        "fields": [
            _field("version", "string"),
            _field("connector", "string"),
            _field("name", "string"),
            _field("ts_ms", "int64"),
            _field(
                "snapshot",
                "string",
                optional=True,
                name="io.debezium.data.Enum",
                version=1,
                parameters={"allowed": "true,last,false,incremental"},
                default="false",
            ),
            _field("db", "string"),
            _field("sequence", "string", optional=True),
            _field("schema", "string"),
            _field("table", "string"),
            _field("txId", "int64", optional=True),
            _field("lsn", "int64", optional=True),
            _field("xmin", "int64", optional=True),
        ],
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
        "field": "source",
    }
    block = {
        "type": "struct",
        "fields": [
            _field("id", "string"),
            _field("total_order", "int64"),
            _field("data_collection_order", "int64"),
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
    }
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            source,
            _field("op", "string"),
            _field("ts_ms", "int64", optional=True),
            *([_field(n, "int64", optional=True) for n in PRECISE_TS] if ts_precision else []),
            block,
        ],
        "optional": False,
        "name": f"{namespace}.Envelope",
    }


def connect_key_schema(namespace: str) -> dict:
    return {"type": "struct", "fields": [_field("id", "int32")], "optional": False,
            "name": f"{namespace}.Key"}  # fmt: skip


def envelope(schema: dict, payload: Any) -> bytes:
    """One JsonConverter message: compact, schema first (as Jackson writes the envelope)."""
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()


def json_value(change: Change, namespace: str, ts_precision: bool = False) -> bytes:
    record = value_record(change, namespace)
    if not ts_precision:
        for name in PRECISE_TS:
            record.pop(name)
    schema = connect_value_schema(namespace, change.schema_version, ts_precision)
    return envelope(schema, record)


def json_key(change: Change, namespace: str) -> bytes:
    return envelope(connect_key_schema(namespace), {"id": change.id})
