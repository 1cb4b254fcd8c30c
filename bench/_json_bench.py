"""The JSON variants of the stage benchmark. ``bench_stage.py --json-values``: the same
16-field order row as schemaless JSON (Avro's JSON conventions for logical types: epoch
milliseconds, days since 1970), staged under the declared schema by ``format: json``.
``--json-schema-values``: the same row as Confluent-framed JSON under a registry JSON Schema
(:data:`JSON_SCHEMA`; RFC 3339 date-times and ISO dates), staged by ``format: json_schema``."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

from bench_hot_path import make_record

JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "OrderEvent", "type": "object", "additionalProperties": False,
    "properties": {
        "eventId": {"type": "string", "format": "uuid"},
        "eventTime": {"type": "string"},  # ISO with a [Zone/Id] suffix: not RFC 3339
        "datasetName": {"type": "string"},
        "tableName": {"type": "string"},
        "userId": {"type": "integer"},
        "sessionId": {"type": "string"},
        "amount": {"type": "number"},
        "currency": {"enum": ["EUR", "USD", "GBP", "JPY"]},
        "quantity": {"type": "integer"},
        "isTest": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attributes": {"type": "object", "additionalProperties": {"type": "string"}},
        "payload": {"type": "object", "properties": {
            "eventTime": {"type": "string", "format": "date-time"},
            "source": {"type": "string"},
            "version": {"type": "integer"}}, "required": ["eventTime", "source", "version"]},
        "note": {"type": ["string", "null"]},
        "createdDate": {"type": "string", "format": "date"},
        "ip": {"type": "string"},
    },
}  # fmt: skip
JSON_SCHEMA["required"] = [name for name in JSON_SCHEMA["properties"] if name != "note"]

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return int((value - EPOCH).total_seconds() * 1000)
    if isinstance(value, dt.date):
        return (value - EPOCH.date()).days
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def build_json_values(count: int, unique: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    distinct = [json.dumps(_plain(make_record(rng))).encode() for _ in range(min(unique, count))]
    return [distinct[i % len(distinct)] for i in range(count)]


def _iso(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _iso(v) for k, v in value.items()}
    return value


def build_json_schema_values(count: int, unique: int, seed: int) -> list[bytes]:
    """The row as JSON text for :data:`JSON_SCHEMA` (the caller frames it)."""
    rng = random.Random(seed)
    distinct = [json.dumps(_iso(make_record(rng))).encode() for _ in range(min(unique, count))]
    return [distinct[i % len(distinct)] for i in range(count)]
