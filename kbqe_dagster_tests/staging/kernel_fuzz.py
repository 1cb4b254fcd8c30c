"""Seeded random stage scenarios for the native kernel's differential test.

A scenario is a topic configuration (routing mode, event-time rules, enrichment columns,
bad-input policy, message size limit), one to three writer schemas, and a stream of
messages: valid records, corrupted bodies, unknown schema ids, bad frames, tombstones and
oversized values, with keys, headers and Kafka timestamps of every kind. Event-time values
cover ISO-8601 spellings valid and not (offsets, fractions, annotations), epochs of every
magnitude, NaN and infinities, dates and timestamps at their limits. Random extra fields come
from the probe's fuzz factory (every Avro type, logical types included, some of which the
kernel refuses, so those schemas take the Python path).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster_tests.staging.avro_fuzz import (
    SchemaFactory,
    ValueFactory,
    corruptions,
    encode,
    parse,
)
from kbqe_dagster_tests.staging.kernel_equality import Msg

TOPIC = "fuzz.events"
# Mostly routable values (the kernel learns their routes), some that are not allowed or not
# names at all (the Python path dead-letters those, every time).
DATASETS = ["acme_sales"] * 6 + ["acme_web"] * 3 + ["other", "bad-name", "", "日本"]
TABLES = ["orders"] * 6 + ["page_views", "refunds", "a.b", "", "t" * 1100]
EVENT_TYPES: list[Any] = [
    "string", "string", ["null", "string"], "long", ["null", "long"], "int", "double", "float",
    {"type": "int", "logicalType": "date"}, {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    {"type": "long", "logicalType": "local-timestamp-millis"},
    "boolean", {"type": "int", "logicalType": "time-millis"},
]  # fmt: skip


@dataclass
class Scenario:
    pipeline: PipelineConfig
    schemas: dict[int, dict]
    messages: list[Msg]
    policy: str


def iso_text(rng: random.Random) -> str:
    if rng.random() < 0.6:  # what producers write
        text = f"{rng.randint(1970, 2030):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return text + rng.choice(["", "T14:36:45Z", "T23:59:59.999+02:00", " 00:00:00-05:30",
                                  "T14:36:45.123+02:00[Europe/Paris]", "T14:36"])  # fmt: skip
    year = rng.choice([1, 1969, 1970, 2024, 2024, 9999, rng.randint(0, 9999)])
    month = rng.choice([1, 2, 9, 12, 12, rng.randint(0, 13)])
    day = rng.choice([1, 13, 28, 29, 30, 31, rng.randint(0, 32)])
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if rng.random() < 0.8:
        text += rng.choice("TT Tx")
        text += f"{rng.choice([0, 14, 23, 23, rng.randint(0, 25)]):02d}:{rng.choice([0, 36, 59, 60]):02d}"
        if rng.random() < 0.8:
            text += f":{rng.choice([0, 45, 59, 60]):02d}"
            if rng.random() < 0.6:
                text += rng.choice(".,") + "".join(
                    rng.choice("0123456789") for _ in range(rng.choice([0, 1, 3, 6, 9, 12]))
                )
        text += rng.choice(
            [
                "",
                "",
                "Z",
                "+02:00",
                "-05:30",
                "+23:59",
                "-00:00",
                "+24:00",
                "+0200",
                "z",
                "+02",
                "+02:00:30",
            ]
        )
    if rng.random() < 0.3:
        text += rng.choice(
            [
                "[Europe/Paris]",
                "[u-ca=iso8601]",
                "[!Asia/Tokyo]",
                "[Bad/Zone]",
                "[Europe/Paris][u-ca=iso8601]",
                "]",
            ]
        )
    if rng.random() < 0.03:
        text = rng.choice(
            ["", "[UTC]2024-01-01", "20240913", "2024-09-13T14:36:45.123+02:00 ", " 2024-09-13"]
        )
    return text


def event_value(rng: random.Random, t: Any) -> Any:
    kind = t if isinstance(t, str) else None
    if isinstance(t, list):
        if rng.random() < 0.25:
            return None
        kind = t[1]
    if kind == "string":
        return iso_text(rng)
    if kind in ("long", "int"):
        values = [0, -1, 19979, 1_726_238_205, 1_726_238_205_123, 1_726_238_205_123_456,
                  1_726_238_205_123_456_789, -62_135_596_800, 10**11 - 1, 10**11, 10**14, 10**17,
                  2**63 - 1, -(2**63), rng.randrange(-(10**18), 10**18)]  # fmt: skip
        value = rng.choice(values)
        return max(-(2**31), min(2**31 - 1, value)) if kind == "int" else value
    if kind in ("double", "float"):
        value = rng.choice([0.0, -0.5, 1_726_238_205.5, 1.7262382051234e12, 1.7e15, 1.7e18,
                            -1e300, math.nan, math.inf, -math.inf, rng.uniform(-1e12, 1e12)])  # fmt: skip
        return value if kind == "double" or not math.isfinite(value) or abs(value) < 1e38 else 0.0
    return None  # a logical or refused type: the value factory makes it


def scenario(seed: int, messages: int) -> Scenario:
    rng = random.Random(seed)
    factory = SchemaFactory(rng)
    routing = rng.choice(["fields", "fields", "fields", "static", "schema_name"])
    schemas: dict[int, dict] = {}
    for version in range(rng.randint(1, 3)):
        event_type = rng.choice(EVENT_TYPES)
        fields = [
            {"name": "datasetName", "type": rng.choice(["string", "string", ["null", "string"]])},
            {"name": "tableName", "type": "string"},
            {"name": "eventTime", "type": event_type},
        ]
        if rng.random() < 0.4:
            meta = {
                "type": "record",
                "name": factory.name("Meta"),
                "fields": [{"name": "ts", "type": rng.choice(EVENT_TYPES[:8])}],
            }
            fields.append({"name": "meta", "type": ["null", meta]})
        fields += factory.record(depth=1)["fields"] if rng.random() < 0.8 else []
        rng.shuffle(fields)
        schemas[7 + version] = {"type": "record", "name": factory.name("Event"), "namespace": "fuzz",
                                "fields": fields}  # fmt: skip
    event_fields = rng.choice(
        [["eventTime"], ["meta.ts", "eventTime"], ["missing", "eventTime"], ["meta.ts"]]
    )
    topic: dict[str, Any] = {"name": TOPIC}
    pipeline = random_pipeline(rng, topic, event_fields, routing, size_chance=0.15,
                               source=f"kernel fuzz seed {seed}")  # fmt: skip
    return Scenario(pipeline, schemas, list(stream(rng, schemas, messages)), topic["on_bad_input"])


def random_pipeline(
    rng: random.Random, topic: dict[str, Any], event_fields: list[str], routing: str, *,
    size_chance: float, source: str,
) -> PipelineConfig:  # fmt: skip
    """A random one-topic pipeline around ``topic`` (its name, and format and schema where
    it has them; completed in place): event time on ``event_fields``, a bad-input policy,
    ``routing``, sometimes a small message size limit, random enrichment columns. Shared
    with the JSON kernel's fuzz (formats/json_fuzz.py)."""
    event_time: dict[str, Any] = {
        "fields": event_fields,
        "epoch_unit": rng.choice(["auto", "auto", "s", "ms", "us", "ns"]),
        "date_rule": rng.choice(["local", "utc"]),
        "kafka_timestamp_fallback": rng.random() < 0.4,
    }
    if rng.random() < 0.2:
        event_time.update(min_date="2000-01-01", max_date="2030-12-31")
    topic["event_time"] = event_time
    topic["on_bad_input"] = rng.choice(["dead_letter"] * 6 + ["skip"] * 2 + ["fail"])
    topic["routing"] = {
        "fields": {"mode": "fields"},
        "static": {"mode": "static", "dataset": "acme_sales", "table": "orders"},
        "schema_name": {"mode": "schema_name"},
    }[routing]
    if rng.random() < size_chance:
        topic["staging"] = {"max_message_size": rng.choice([64, 200, 400])}
    enrichment = {
        "timestamp_column": rng.choice(["_kafka_timestamp", "_kafka_timestamp", None]),
        "key_column": rng.choice([None, "_kafka_key"]),
        "headers_column": rng.choice([None, "_kafka_headers"]),
    }
    return parse_pipeline_config({
        "version": 1, "topics": [topic], "enrichment": enrichment,
        "allowed_destinations": ["acme_sales.*", "acme_web.orders", "fuzz.*"],
    }, source=source)  # fmt: skip


def stream(rng: random.Random, schemas: dict[int, dict], count: int):
    parsed = {sid: parse(schema) for sid, schema in schemas.items()}
    start = rng.choice([0, 5, 1_000_000, 2**40])
    for i in range(count):
        offset = start + i
        sid = rng.choice(list(schemas))
        schema, (p, named) = schemas[sid], parsed[sid]
        roll = rng.random()
        value: bytes | None
        if roll < 0.03:
            value = None
        elif roll < 0.06:
            value = rng.choice([b"", b"\x00\x00", b"\x01" + sid.to_bytes(4, "big") + b"\x00",
                                b"\x00" + (999).to_bytes(4, "big") + b"\x02a"])  # fmt: skip
        else:
            body = encode(p, record(rng, schema, named))
            if roll < 0.2:
                body = rng.choice(corruptions(rng, body))
            value = b"\x00" + sid.to_bytes(4, "big") + body
        key = rng.choice([None, b"", b"k" + str(i).encode(), rng.randbytes(20)])
        headers = rng.choice(
            [None, [], [("h", b"v")], [("trace", None), ("zürich", rng.randbytes(3)), ("h", b"")]]
        )
        timestamp = rng.choice([(1, 1_726_238_205_123 + i), (1, 1_726_238_205_123 + i), (2, 0), (0, -1),
                                (1, -5), (1, 253_402_300_800_000), (1, 86_400_000 * 2_932_897)])  # fmt: skip
        yield Msg(TOPIC, 0, offset, value, key, headers, timestamp)


def record(rng: random.Random, schema: dict, named: dict) -> dict:
    values = ValueFactory(rng, named)
    out = {}
    for f in schema["fields"]:
        name, t = f["name"], f["type"]
        if name == "datasetName":
            out[name] = None if isinstance(t, list) and rng.random() < 0.1 else rng.choice(DATASETS)
        elif name == "tableName":
            out[name] = rng.choice(TABLES)
        elif name == "eventTime":
            special = event_value(rng, t)
            out[name] = special if special is not None or isinstance(t, list) else values.value(t)
        elif name == "meta":
            ts_type = t[1]["fields"][0]["type"]
            out[name] = None if rng.random() < 0.3 else {"ts": event_value(rng, ts_type)}
        else:
            out[name] = values.value(t)
    return out
