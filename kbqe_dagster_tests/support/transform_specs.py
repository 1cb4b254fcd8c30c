"""A JSON topic's declared schema and the transforms the end-to-end transform test applies to it
(rename, drop, mask, cast, a header and a key column), for a dataset of the caller's: what that
test and bench/bench_transforms.py share."""

from __future__ import annotations

SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "phone", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": "string"},
        {"name": "created", "type": "string"},
        {"name": "debug", "type": "string"},
    ],
}


def transforms(dataset: str) -> list[dict]:
    return [
        {"add": "shop", "value": dataset},
        {"compute": "tableName", "expression": "lower(kind) + 's'", "type": "string"},
        {"cast": "amount", "to": "double"},
        {"mask": "email", "key_env": "KBQE_TRANSFORMS_E2E_KEY"},
        {"mask": "phone", "method": None},
        {"timestamp": "created", "to": "timestamp_millis", "zone": "Europe/Paris"},
        {"add": "trace_id", "header": "trace-id"},
        {"rename": "id", "to": "order_id"},
        {"drop": "debug"},
    ]
