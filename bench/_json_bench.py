"""The JSON variant of the stage benchmark (``bench_stage.py --json-values``): the same
16-field order row as schemaless JSON (Avro's JSON conventions for logical types: epoch
milliseconds, days since 1970), staged under the declared schema by ``format: json``."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

from bench_hot_path import make_record

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


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
