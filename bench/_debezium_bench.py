"""The Debezium variant of the stage benchmark (``bench_stage.py --debezium``): the same
16-field order row, wrapped in Debezium's envelope (before/after/source/op/ts_ms/transaction)
as its Avro converter writes it; a third of the changes are updates that carry both images,
like a real table's stream. The stage job cuts the row image out of each envelope
(keyed/changes.py), so its work per message is the envelope's validation plus a slice."""

from __future__ import annotations

import copy
import io
import random

import fastavro
from bench_hot_path import SCHEMA, make_record

NAMESPACE = "bench.inventory.orders"


def envelope_schema() -> dict:
    row = copy.deepcopy(SCHEMA)
    row.update({"name": "Value", "namespace": NAMESPACE})
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "db", "type": "string"},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": ["null", "long"], "default": None},
            {"name": "lsn", "type": ["null", "long"], "default": None},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": NAMESPACE,
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", "string"], "default": None},
        ],
    }


def build_envelopes(count: int, unique: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(envelope_schema())
    distinct = []
    ts = 1_726_238_205_123
    for i in range(min(unique, count)):
        ts += rng.randint(0, 5)
        after = make_record(rng)
        update = i % 3 == 0
        record = {
            "before": make_record(rng) if update else None,
            "after": after,
            "source": {
                "version": "2.7.0.Final",
                "connector": "postgresql",
                "name": "bench",
                "ts_ms": ts,
                "db": "shop",
                "schema": "public",
                "table": "orders",
                "txId": 1000 + i,
                "lsn": 10_000_000 + i,
            },
            "op": "u" if update else "c",
            "ts_ms": ts + 2,
            "transaction": None,
        }
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        distinct.append(out.getvalue())
    return [distinct[i % len(distinct)] for i in range(count)]
